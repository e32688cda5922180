"""TMA tensor descriptors for accesses beyond plain 2-D tiles (backends/triton/indexing.py).

A scalar-indexed dim becomes a box of 1 (`q[b, tile, :]`), a transposed operand is loaded in
storage order and permuted (`k.transpose(1, 2)[b, :, tile]`), and an inner tile whose end is not
a kernel argument (a causal diagonal loop) is bounded by the tensor and masked after the load.
Each is checked in the interpreter against PyTorch, and by the code it generates.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from examples import attention as attention_example

CASES = [(1, 2, 37, 37, 16, True), (2, 1, 13, 40, 16, True), (1, 2, 37, 40, 32, False), (1, 1, 1, 1, 16, False),
         (1, 1, 40, 13, 16, True)]


def _descriptor_attention(blocks: list[int]) -> tessera.Kernel:
    config = tessera.Config(block_sizes=blocks, indexing="tensor_descriptor")
    return tessera.kernel(attention_example.attention.fn, config=config, mode="interpret")


@pytest.mark.parametrize("blocks", [[16, 16], [16, 32], [32, 16]], ids=["16x16", "bn16-bm32", "bn32-bm16"])
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:5])) + ("-causal" if c[5] else "") for c in CASES])
def test_attention_with_descriptors_matches_sdpa(case, blocks):
    batch, heads, m, n, head_dim, causal = case
    generator = torch.Generator().manual_seed(m + n)
    q = torch.randn(batch, heads, m, head_dim, generator=generator)
    k, v = (torch.randn(batch, heads, n, head_dim, generator=generator) for _ in range(2))
    actual = _descriptor_attention(blocks)(q, k, v, causal)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(actual, expected, atol=2e-5, rtol=2e-5)


def test_attention_loads_every_operand_through_a_descriptor():
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    code = _descriptor_attention([16, 32]).bind(q, k, v, True).to_triton_code()
    assert "tl.load(" not in code and "tl.store(" not in code
    assert "block_shape=[1, 32, 16]" in code                      # q[b, tile_m, :]: the batch dim a box of 1
    assert "tl.permute(tl.reshape(desc_1.load(" in code           # k transposed: loaded as stored, then permuted
    # the diagonal's keys past the tile masked: in its last (peeled) tile only
    assert "tl.where(mask_t3_tail[None, :], tl.permute(" in code and "mask_t3[" not in code


def test_transposed_store_falls_back_to_a_block_pointer():
    @tessera.kernel(config=tessera.Config(block_sizes=[16, 16], indexing="tensor_descriptor"), mode="interpret")
    def transpose_copy(x: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty([n, m], dtype=x.dtype, device=x.device)
        out_t = out.transpose(0, 1)
        for tile_m, tile_n in hl.tile([m, n]):
            out_t[tile_m, tile_n] = x[tile_m, tile_n] * 2
        return out

    x = torch.randn(37, 24)
    torch.testing.assert_close(transpose_copy(x), (x * 2).T.contiguous())
    code = transpose_copy.bind(x).to_triton_code()
    assert "make_tensor_descriptor(x" in code and "tl.store(tl.make_block_ptr(out" in code
