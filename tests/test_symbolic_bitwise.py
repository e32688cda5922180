"""Bitwise operators on symbolic ints inside tile loops (`tile.begin >> 7`, `row & 31`, a tile's
index combined with them), which sympy has no operators for: shifts by a constant stay symbolic,
the rest are computed on the device. Eager and interpret against PyTorch, incl. a size-1 tile
loop, non-powers of two and tails."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor
MODES = ("eager", "interpret")


def swizzled_gather(table: T, out: T) -> T:
    rows, cols = out.shape
    for tile_r in hl.tile(rows, block_size=1):
        row = tile_r.begin
        for tile_c in hl.tile(cols, block_size=8):
            index = ((row >> 2) + (tile_c.index >> 2)) * 16 + (row & 3) * 4 + ((row >> 1) ^ 1 | 0) % 2 + (tile_c.index & 3)
            out[row, tile_c] = table[index]
    return out


def swizzled_reference(table: T, rows: int, cols: int) -> T:
    r = torch.arange(rows)[:, None]
    c = torch.arange(cols)[None, :]
    return table[((r >> 2) + (c >> 2)) * 16 + (r & 3) * 4 + ((r >> 1) ^ 1 | 0) % 2 + (c & 3)]


def shifted_blocks(x: T) -> T:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0), block_size=4):
        half = (tile.begin << 1) >> 1  # the begin again, through two symbolic shifts
        out[tile] = x[tile] + half
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows, cols", [(1, 1), (6, 13), (9, 32)])
def test_bitwise_on_tile_bounds(mode, rows, cols):
    table = torch.randn(2048)
    out = torch.empty(rows, cols)
    kernel = tessera.kernel(swizzled_gather, mode=mode)
    torch.testing.assert_close(kernel(table, out), swizzled_reference(table, rows, cols))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 7, 16])
def test_symbolic_shifts_stay_exact(mode, size):
    x = torch.randn(size)
    kernel = tessera.kernel(shifted_blocks, mode=mode)
    expected = x + (torch.arange(size) // 4 * 4).float()
    torch.testing.assert_close(kernel(x), expected)
