"""Lanes past an inner loop's tail tile never count as data (language/tail_fill.py).

A `register_block_size` accumulator combines an inner tile's values lane for lane; on the tail
tile the lanes past the end hold no element. They used to join the accumulator as 0, so a max
of negative values, a min of positive ones or a product read 0 (a silent wrong answer in every
mode). Loads that gather by offsets computed from tile indices carry the same tail (eager used
to broadcast a one-lane tail over the allocation). Each test runs in eager and interpret mode
against PyTorch, at widths with and without a tail and of size 1.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")
WIDTHS = (1, 3, 7, 8, 13)
CONFIG = tessera.Config(block_sizes=[4, 2])  # register block 4, row tile 2 (rows have tails too)


def accumulate(update: Callable[[Any, Any], Any], init: float, reduce: str, dtype: torch.dtype) -> Callable[..., Any]:
    def kernel(x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty([m], dtype=dtype, device=x.device)
        block = hl.register_block_size(n)
        for tile_m in hl.tile(m):
            acc = hl.full([tile_m, block], init, dtype=dtype)
            for tile_n in hl.tile(n, block_size=block):
                acc = update(acc, x[tile_m, tile_n])
            out[tile_m] = getattr(acc, reduce)(-1)
        return out
    return kernel


CASES = {
    "maximum": (lambda acc, v: torch.maximum(acc, v), float("-inf"), "amax", lambda x: x.amax(-1)),
    "max_of_scaled": (lambda acc, v: torch.maximum(acc, v * 2 - 1), float("-inf"), "amax",
                      lambda x: (x * 2 - 1).amax(-1)),
    "minimum": (lambda acc, v: torch.minimum(acc, v), float("inf"), "amin", lambda x: x.amin(-1)),
    "product": (lambda acc, v: acc * v, 1.0, "prod", lambda x: x.prod(-1)),
    "where": (lambda acc, v: torch.where(v > acc, v, acc), float("-inf"), "amax", lambda x: x.amax(-1)),
    "where_method": (lambda acc, v: v.where(v > acc, acc), float("-inf"), "amax", lambda x: x.amax(-1)),
    "sum": (lambda acc, v: acc + v, 0.0, "sum", lambda x: x.sum(-1)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", CASES)
def test_tail_lanes_leave_the_accumulator_unchanged(name: str, width: int, mode: str) -> None:
    update, init, reduce, reference = CASES[name]
    torch.manual_seed(width)
    # all negative (a max reading padding gets 0), or all above 1 for min and product
    x = -torch.rand(5, width) - 0.5 if reduce == "amax" else torch.rand(5, width) + 1.0
    kernel = tessera.kernel(accumulate(update, init, reduce, torch.float32), config=CONFIG, mode=mode)
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", (torch.int32, torch.int64))
def test_integer_max_accumulator_takes_the_dtypes_lowest(dtype: torch.dtype, mode: str) -> None:
    low = torch.iinfo(dtype).min
    kernel = tessera.kernel(accumulate(lambda acc, v: torch.maximum(acc, v), low, "amax", dtype),
                            config=CONFIG, mode=mode)
    x = -torch.randint(1, 100, (3, 7), dtype=dtype)
    torch.testing.assert_close(kernel(x), x.amax(-1))


@pytest.mark.parametrize("mode", MODES)
def test_bool_all_accumulator_ignores_tail_lanes(mode: str) -> None:
    kernel = tessera.kernel(accumulate(lambda acc, v: torch.logical_and(acc, v > 0), True, "all", torch.bool),
                            config=CONFIG, mode=mode)
    x = torch.rand(3, 6) + 0.1
    x[1, 5] = -1.0
    torch.testing.assert_close(kernel(x), (x > 0).all(-1))


@pytest.mark.parametrize("mode", MODES)
def test_tail_of_a_difference_still_reads_zero(mode: str) -> None:
    """`v - acc` has no identity for `v`: its tail lanes join as 0, in every mode alike."""
    kernel = tessera.kernel(accumulate(lambda acc, v: v - acc, 0.0, "sum", torch.float32), config=CONFIG, mode=mode)
    x = torch.ones(2, 6)
    # block 4, width 6: lanes 0-1 get 1 - (1 - 0) = 0, lanes 2-3 get 0 - (1 - 0) = -1
    torch.testing.assert_close(kernel(x), torch.full((2,), -2.0))


@pytest.mark.parametrize("mode", MODES)
def test_where_method_takes_the_value_first(mode: str) -> None:
    def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile].where(x[tile] > 0, y[tile])
        return out
    x, y = torch.randn(7), torch.randn(7)
    torch.testing.assert_close(tessera.kernel(kernel, mode=mode)(x, y), x.where(x > 0, y))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("width", (1, 5, 8))
def test_variance_over_a_tile_counts_its_own_lanes(kind: str, width: int, mode: str) -> None:
    """var/std over a tile's dim (the tail tile has fewer lanes): was refused in interpret mode only."""
    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros([x.size(0), 2], dtype=x.dtype, device=x.device)
        for tm, tn in hl.tile(x.shape, block_size=[None, 4]):
            result = getattr(torch, kind)(x[tm, tn], dim=1, correction=0)
            spread = result[0] if kind.endswith("_mean") else result
            out[tm, tn.id] = spread
        return out
    x = torch.randn(3, width) * 3 + 1
    chunks = [x[:, i:i + 4] for i in range(0, width, 4)]
    spreads = [getattr(torch, kind)(chunk, dim=1, correction=0) for chunk in chunks]
    expected = torch.zeros(3, 2)
    for i, spread in enumerate(spreads):
        expected[:, i] = spread[0] if kind.endswith("_mean") else spread
    result = tessera.kernel(kernel, config=tessera.Config(block_sizes=[2]), mode=mode)(x)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def gathered_dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Row-wise dot products whose loads gather by offsets computed from tile indices (no tile
    indexes the tensors), accumulated in a register_block_size allocation."""
    m, n = x.shape
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    block = hl.register_block_size(n)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, block], dtype=x.dtype)
        for tile_n in hl.tile(n, block_size=block):
            offsets = tile_m.index[:, None] * n + tile_n.index[None, :]
            v = hl.load(x.view(-1), [offsets], extra_mask=(tile_n.index < n)[None, :])
            w = y.view(-1)[tile_n.index * 1]
            acc = acc + v * w[None, :]
        out[tile_m] = acc.sum(-1)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width", (1, 5, 8, 13))
@pytest.mark.parametrize("blocks", ([4, 2], [8, 8], [16, 4]))
def test_gathered_tail_lanes_fit_the_allocation(blocks: list[int], width: int, mode: str) -> None:
    # eager read the tail of a gather as a plain tensor: a one-lane tail broadcast over the
    # allocation's block (a silent wrong sum) and a longer one cut the allocation or raised a
    # shape error; its lanes now mark it as a tail as a load by the tile is
    torch.manual_seed(width)
    x, y = torch.randn(5, width), torch.randn(width)
    kernel = tessera.kernel(gathered_dot, config=tessera.Config(block_sizes=blocks), mode=mode)
    torch.testing.assert_close(kernel(x, y), (x * y).sum(-1), rtol=1e-5, atol=1e-5)
