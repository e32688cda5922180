"""Issue 15, found by Helion's int4_gemm and blackwell_attention examples: a slice of a fixed
length whose start moves with a tile (`a[tm, 2 * tk.begin : 2 * tk.begin + 2 * block]`), and
reshapes of tile values that merge a tile with whole dims (`[tk, 2, tn] -> [2 * block, tn]`) or
merge split halves back into a whole dim (`[tm, 2, d / 2] -> [tm, d]`). Eager and interpret
modes against torch, at size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
MODES = ("eager", "interpret")


def pair_sums(x: T, y: T) -> T:
    """out[m, n] = sum over k of (x[m, 2k] + x[m, 2k + 1]) * y[k, n], one window of x per tile of y."""
    m, k = x.size(0), y.size(0)
    out = torch.zeros(m, y.size(1), dtype=torch.float32, device=x.device)
    block = hl.register_block_size(k)
    for tm, tn in hl.tile([m, y.size(1)]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k, block_size=block):
            begin = tk.begin * 2
            window = x[tm, begin:(begin + block * 2)]  # 2 * block lanes; past x's end they read 0
            pairs = window.reshape(tm.block_size, block, 2).sum(-1)
            acc = acc + hl.dot(pairs, y[tk, tn])
        out[tm, tn] = acc
    return out


def pair_sums_reference(x: T, y: T) -> T:
    width = 2 * y.size(0)
    padded = torch.nn.functional.pad(x, (0, width - x.size(1)))
    return padded.reshape(x.size(0), -1, 2).sum(-1) @ y


@pytest.mark.parametrize("m, k, n, block", [(1, 1, 1, 4), (5, 12, 7, 8), (4, 16, 16, 8), (3, 9, 2, 4)])
@pytest.mark.parametrize("mode", MODES)
def test_a_window_of_a_block_sized_length_moves_with_the_tile(m: int, k: int, n: int, block: int, mode: str) -> None:
    generator = torch.Generator().manual_seed(3)
    x, y = torch.randn(m, 2 * k, generator=generator), torch.randn(k, n, generator=generator)
    if mode == "eager" and k % block:
        pytest.skip("eager clips the last window and tile: the block-shaped reshape needs whole blocks")
    kernel = tessera.kernel(pair_sums, mode=mode, config=tessera.Config(block_sizes=[block, 4, 4]))
    torch.testing.assert_close(kernel(x, y), pair_sums_reference(x, y), rtol=1e-5, atol=1e-5)


def window_copy(x: T, width: int) -> T:
    """Copies x through windows of `width` columns that start at each tile's begin times 2."""
    out = torch.zeros_like(x)
    for tm, tk in hl.tile([x.size(0), (x.size(1) + 1) // 2]):
        begin = tk.begin * 2
        out[tm, begin:begin + width] = x[tm, begin:begin + width] * 2  # the last window passes x's end
    return out


@pytest.mark.parametrize("shape", [(1, 1), (5, 13), (4, 16), (2, 7)], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_a_window_past_the_end_reads_and_writes_only_inside(shape: tuple[int, int], mode: str) -> None:
    x = torch.randn(shape)
    # tiles of 2 columns-pairs: each window covers 4 columns from 2 * begin, the last one past the end
    kernel = tessera.kernel(window_copy, mode=mode, config=tessera.Config(block_sizes=[4, 2]))
    torch.testing.assert_close(kernel(x, 4), x * 2)


def moving_length(x: T) -> T:
    out = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, tile.begin:tile.begin + tile.id + 1].sum(-1)  # line: moving
    return out


def unpack_int4_matmul(a: T, b: T) -> T:
    """a [m, 2k] times the [2k, n] int4 matrix packed two to a byte in b [k, n] (low nibble first)."""
    m, k, n = a.size(0), b.size(0), b.size(1)
    out = torch.zeros(m, n, dtype=torch.float32, device=a.device)
    block = hl.register_block_size(k)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k, block_size=block):
            begin = tk.begin * 2
            a_tile = a[tm, begin:(begin + block * 2)]
            packed = b[tk, tn]
            low = (packed & 0xF).to(torch.int32)
            low = torch.where(low >= 8, low - 16, low)
            high = (packed >> 4).to(torch.int32)
            # lanes past k's end must not reach the product: the merge makes them zeros
            both = torch.stack([low.to(a.dtype) + 1, high.to(a.dtype) + 1], dim=1)
            acc = hl.dot(a_tile, both.reshape(tk.block_size * 2, tn.block_size), acc=acc)
        out[tm, tn] = acc
    return out


def unpack_int4_reference(a: T, b: T) -> T:
    low = (b & 0xF).to(torch.int32)
    low = torch.where(low >= 8, low - 16, low)
    high = (b >> 4).to(torch.int32)
    return a @ (torch.stack([low, high], dim=1).reshape(-1, b.size(1)) + 1).float()


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (5, 12, 7), (4, 8, 16), (3, 5, 9)])
@pytest.mark.parametrize("mode", MODES)
def test_merging_a_tile_with_a_whole_dim_interleaves_rows(m: int, k: int, n: int, mode: str) -> None:
    generator = torch.Generator().manual_seed(5)
    a = torch.randn(m, 2 * k, generator=generator)
    b = torch.randint(-128, 128, (k, n), generator=generator, dtype=torch.int8)
    block_k, block_n = 8, 4
    if mode == "eager" and (k % block_k or n % block_n):
        pytest.skip("eager's tail tiles are shorter than the block sizes the reshape names")
    kernel = tessera.kernel(unpack_int4_matmul, mode=mode, config=tessera.Config(block_sizes=[block_k, 4, block_n]))
    torch.testing.assert_close(kernel(a, b), unpack_int4_reference(a, b), rtol=1e-4, atol=1e-4)


def subtiled_rescale(x: T, scale: T, steps: int) -> T:
    """Blackwell attention's subtiling: the accumulator split into halves (each rescaled on its
    own), joined and merged back into its whole dim, carried across a loop."""
    m, d = x.size(0), hl.specialize(x.size(1))
    out = torch.empty_like(x)
    for tm in hl.tile(m):
        acc = hl.zeros([tm, d])
        for step in hl.tile(steps, block_size=1):
            first, second = hl.split(acc.reshape([tm, 2, d // 2]).permute(0, 2, 1))
            first = first * scale[tm][:, None]
            second = second * 2.0
            acc = hl.join(first, second).permute(0, 2, 1).reshape(acc.size(0), acc.size(1))
            acc = acc + x[tm, :]
        out[tm, :] = acc
    return out


@pytest.mark.parametrize("shape", [(1, 2), (5, 16), (9, 64)], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_split_halves_merge_back_into_the_carried_whole_dim(shape: tuple[int, int], mode: str) -> None:
    generator = torch.Generator().manual_seed(7)
    x, scale = torch.randn(shape, generator=generator), torch.rand(shape[0], generator=generator)
    expected = torch.zeros(shape)
    half = shape[1] // 2
    for _ in range(3):
        expected = torch.cat([expected[:, :half] * scale[:, None], expected[:, half:] * 2], dim=1) + x
    kernel = tessera.kernel(subtiled_rescale, mode=mode, config=tessera.Config(block_sizes=[4]))
    torch.testing.assert_close(kernel(x, scale, 3), expected, rtol=1e-5, atol=1e-5)


def flatten_tile(x: T) -> T:
    out = torch.zeros(x.size(0) * x.size(1), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].reshape(3, -1)[:]  # line: flatten (4 x 8 lanes: no rows of 3)
    return out


@pytest.mark.parametrize("function, message, line", [
    (moving_length, "depends on the tile", "moving"),  # a slice whose length changes from tile to tile
    (flatten_tile, "changes how elements are grouped", "flatten"),  # a tile merged into an unnamed size
])
def test_what_no_register_block_holds_is_still_refused_with_its_line(function: object, message: str,
                                                                     line: str) -> None:
    kernel = tessera.kernel(function, mode="interpret", config=tessera.Config(block_sizes=[4]))
    with pytest.raises(exc.UnsupportedOperationError, match=message) as info:
        kernel(torch.randn(8, 8))
    assert f"# line: {line}" in str(info.value)
