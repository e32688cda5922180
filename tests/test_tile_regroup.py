"""Reshapes that regroup a tile's lanes: a tile split into whole power-of-two dims
(`v.view(tile.block_size // 2, 2)`, then hl.split), a `-1` that merges tiles
(`v.reshape(tile0, -1)` of [tile0, tile1, tile2], their tail lanes zero), and in eager mode
`v.reshape([tile.block_size, n])` of a tail tile (fewer rows than the block). Eager and interpret
against PyTorch, incl. size 1, non-powers of two and tails."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor
MODES = ("eager", "interpret")


def pair_sums(x: T) -> T:
    n = hl.specialize(x.size(0))
    out = x.new_empty(n // 2)
    for tile in hl.tile(n):
        pairs = x[tile].view(tile.block_size // 2, 2)
        first, second = hl.split(pairs)
        out[tile.begin // 2 + hl.arange(0, tile.block_size // 2)] = first + second
    return out


def merged_tile_sums(x: T) -> T:
    out = x.new_empty([x.size(0)])
    for tile0 in hl.tile(x.size(0)):
        acc = hl.zeros([tile0], dtype=x.dtype)
        for tile1, tile2 in hl.tile([x.size(1), x.size(2)]):
            acc += x[tile0, tile1, tile2].reshape(tile0, -1).sum(-1)
        out[tile0] = acc
    return out


def ragged_row_copy(rows: T, starts: T, count: int, out: T) -> None:
    width = hl.specialize(rows.size(1))
    for seq in hl.tile(count, block_size=1):
        for tile in hl.tile(starts[seq.begin], starts[seq.begin + 1]):
            block = rows[tile, :].reshape([tile.block_size, width])
            out[tile, :] = block


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size, block", [(4, 4), (32, 8), (64, 16)])
def test_tile_split_into_pairs(mode, size, block):
    x = torch.randn(size)
    kernel = tessera.kernel(pair_sums, mode=mode, config=tessera.Config(block_sizes=[block]))
    torch.testing.assert_close(kernel(x), x.view(-1, 2).sum(-1))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 4, 5), (5, 9, 17)])
def test_minus_one_merges_tiles(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(merged_tile_sums, mode=mode, config=tessera.Config(block_sizes=[4, 4, 8]))
    torch.testing.assert_close(kernel(x), x.sum((1, 2)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cuts", [[0, 1], [0, 1, 5], [0, 0, 19]])
def test_block_sized_reshape_of_a_tail_tile(mode, cuts):
    rows = torch.randn(cuts[-1], 6)
    out = torch.zeros_like(rows)
    kernel = tessera.kernel(ragged_row_copy, mode=mode, config=tessera.Config(block_sizes=[8]))
    kernel(rows, torch.tensor(cuts, dtype=torch.int32), len(cuts) - 1, out)
    torch.testing.assert_close(out, rows)


def rotate_halves(q: T, out: T) -> T:
    """Helion's rope shape: whole last dim split into (2, half), permuted, split, joined and merged back."""
    batch, heads, seq, dim = q.size()
    half = dim // 2
    for tile_b, tile_t in hl.tile([batch, seq]):
        pair = q[tile_b, :, tile_t, :].to(torch.float32).reshape([tile_b, heads, tile_t, 2, half]).permute(0, 1, 2, 4, 3)
        first, second = hl.split(pair)
        joined = hl.join(second * -1.0, first).permute(0, 1, 2, 4, 3)
        out[tile_b, :, tile_t, :] = joined.reshape([tile_b, heads, tile_t, dim]).to(out.dtype)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, blocks", [((1, 4, 12, 16), [1, 8]), ((3, 2, 5, 8), [1, 4]), ((2, 2, 7, 32), [2, 4])])
def test_merge_back_beside_a_tile_of_block_one(mode, shape, blocks):
    """A tile of block 1 that the new shape names stays a dim: the reshape merges the last two
    dims (it used to drop the tile and refuse the merge)."""
    q = torch.randn(*shape)
    kernel = tessera.kernel(rotate_halves, mode=mode, config=tessera.Config(block_sizes=blocks))
    half = shape[-1] // 2
    torch.testing.assert_close(kernel(q, torch.empty_like(q)), torch.cat([-q[..., half:], q[..., :half]], -1))
