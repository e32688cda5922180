"""Eager mode broadcasts by tile as the trace does (Helion's `a[t0, t1] + b[t0]`).

The trace lines a lower-rank value's tiles up with the same tiles of the other operand
(trace/tile_alignment.py). Eager mode used to keep torch's right alignment, so with square
tiles `b[t0]` silently faced `t1` (b[j] added where the other modes add b[i]). Eager values now
carry which tile each dim runs over (language/eager_lanes.py) and are placed alike; where no
placement exists every mode refuses, located. Each kernel runs in eager and interpret mode.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

MODES = ("eager", "interpret")
SQUARE = tessera.Config(block_sizes=[8, 8])


def add_by_row(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for t0, t1 in hl.tile(a.shape):
        out[t0, t1] = a[t0, t1] + b[t0]
    return out


def add_by_column(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for t0, t1 in hl.tile(a.shape):
        out[t0, t1] = a[t0, t1] + b[t1]
    return out


def store_row_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for t0, t1 in hl.tile(a.shape):
        out[t0, t1] = b[t0]
    return out


def store_column_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Right-aligned already: was an internal Triton error (a store of a lower-rank value)."""
    out = torch.empty_like(a)
    for t0, t1 in hl.tile(a.shape):
        out[t0, t1] = b[t1]
    return out


def subtract_from_whole_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for t0 in hl.tile(a.size(0)):
        out[t0, :] = a[t0, :] - b[t0]
    return out


def where_by_row(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for t0, t1 in hl.tile(a.shape):
        out[t0, t1] = torch.where(b[t0] > 0, a[t0, t1], b[t0])
    return out


def expand_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for t0, t1 in hl.tile(a.shape):
        out[t0, t1] = b[t0].expand_as(a[t0, t1]) * 2
    return out


CASES = {
    "add_by_row": (add_by_row, lambda a, b: a + b[:, None]),
    "add_by_column": (add_by_column, lambda a, b: a + b[None, :]),
    "store_row_values": (store_row_values, lambda a, b: b[:, None].expand_as(a)),
    "store_column_values": (store_column_values, lambda a, b: b[None, :].expand_as(a)),
    "subtract_from_whole_rows": (subtract_from_whole_rows, lambda a, b: a - b[:, None]),
    "expand_rows": (expand_rows, lambda a, b: b[:, None].expand_as(a) * 2),
    "where_by_row": (where_by_row, lambda a, b: torch.where(b[:, None] > 0, a, b[:, None])),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", (1, 5, 8, 16, 19))
@pytest.mark.parametrize("name", CASES)
def test_square_tiles_broadcast_by_tile(name: str, size: int, mode: str) -> None:
    kernel, reference = CASES[name]
    torch.manual_seed(size)
    whole_rows = name == "subtract_from_whole_rows"  # rows as wide as the row tile's block
    a, b = torch.randn(size, 8 if whole_rows else size), torch.randn(size)
    config = tessera.Config(block_sizes=[8]) if whole_rows else SQUARE
    result = tessera.kernel(kernel, config=config, mode=mode)(a, b)
    torch.testing.assert_close(result, reference(a, b))


@pytest.mark.parametrize("mode", MODES)
def test_a_value_from_an_earlier_iteration_keeps_its_tile(mode: str) -> None:
    """A loop-carried value made from an inner tile runs over that loop's lanes in every iteration."""
    def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty([m, 4], dtype=x.dtype, device=x.device)
        block = hl.register_block_size(4, 4)
        for tm in hl.tile(m):
            acc = hl.zeros([tm, block], dtype=torch.float32)
            for tn in hl.tile(n, block_size=block):
                acc = acc + x[tm, tn] * y[tn]
            out[tm, :] = acc
        return out
    x, y = torch.randn(4, 8), torch.randn(8)
    expected = (x * y).reshape(4, 2, 4).sum(1)
    result = tessera.kernel(kernel, config=tessera.Config(block_sizes=[4, 4]), mode=mode)(x, y)
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("mode", MODES)
def test_transposed_tiles_are_refused_in_every_mode(mode: str) -> None:
    def kernel(a: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        for t0, t1 in hl.tile(a.shape):
            out[t0, t1] = a[t0, t1] + a[t1, t0]
        return out
    with pytest.raises(exc.ShapeMismatchError) as info:
        tessera.kernel(kernel, config=SQUARE, mode=mode)(torch.randn(8, 8))
    assert "test_eager_tile_broadcast.py" in str(info.value)

