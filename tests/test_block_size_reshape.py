"""A reshape that merges dims into a `register_block_size` size (`[block_k // 2, 2, n] ->
[block_k, n]`, Helion's int4 unpacking) gives that block's axis, which an `hl.dot` with the tile
of that block then contracts lane for lane; eager and interpret modes against PyTorch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor


def unpacked_product(a: T, packed: T, out: T) -> T:
    m0, k0 = a.shape
    _, n0 = packed.shape
    block_n = hl.register_block_size(n0)
    block_k = hl.register_block_size(k0)
    for tile_m in hl.tile(m0):
        for tile_n in hl.tile(n0, block_size=block_n):
            acc = hl.zeros((tile_m, tile_n), dtype=torch.float32)
            for tile_k in hl.tile(k0, block_size=block_k):
                b = packed[tile_k.begin // 2: tile_k.begin // 2 + block_k // 2, tile_n]
                shift = hl.full((1,), 4, dtype=torch.int8)
                pair = torch.stack(((b << shift) >> shift, b >> shift), dim=2).to(a.dtype)
                acc = hl.dot(a[tile_m, tile_k], pair.permute(0, 2, 1).reshape([block_k, block_n]), acc=acc)
            out[tile_m, tile_n] = acc
    return out


def reference(a: T, packed: T) -> T:
    low, high = (packed << 4) >> 4, packed >> 4
    return a @ torch.stack((low, high), dim=1).reshape(-1, packed.size(1)).to(a.dtype)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 32, 16), (20, 64, 48)])
def test_int4_unpacking_reshape_to_block_sizes_feeds_a_dot(mode, shape):
    m, k, n = shape
    a = torch.randn(m, k)
    packed = torch.randint(-128, 127, (k // 2, n), dtype=torch.int8)
    kernel = tessera.kernel(unpacked_product, mode=mode, static_shapes=True,
                            config=tessera.Config(block_sizes=[16, 32, 16]))
    torch.testing.assert_close(kernel(a, packed, torch.zeros(m, n)), reference(a, packed), atol=1e-3, rtol=1e-4)
