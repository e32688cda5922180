"""`hl.specialize(x.size(d))` (statement or assignment, and `n = x.size(d); hl.specialize(n)`)
pins the size itself, as Helion does: `x.size(d)` read again inside the tile loop, and the dims of
other tensors unified with it, are compile-time constants usable as register sizes. The pin
lasts one call (the caller's tensor keeps its own `mark_static` marks). Eager and interpret
against PyTorch, at size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.marking import static_dims

T = torch.Tensor
MODES = ("eager", "interpret")
SHAPES = [(1, 1), (33, 5), (16, 24), (7, 70)]


def rows_plus_one_statement(x: T) -> T:
    hl.specialize(x.size(1))
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        acc = hl.zeros([tile, x.size(1)])
        acc += x[tile, :] + 1
        out[tile, :] = acc
    return out


def rows_plus_one_alias(x: T) -> T:
    m, n = x.shape
    hl.specialize(n)
    out = x.new_empty([m, n])  # out's dim 1 is unified with x's inside the loop
    for tile in hl.tile(m):
        acc = hl.full([tile, x.shape[1]], 1.0)
        out[tile, :] = acc + x[tile, :]
    return out


def rows_plus_one_shape_subscript(x: T) -> T:
    width = hl.specialize(x.shape[-1])
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] + hl.full([tile, width], 1.0) + hl.zeros([x.size(1)])
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fn", [rows_plus_one_statement, rows_plus_one_alias, rows_plus_one_shape_subscript])
def test_specialized_size_is_a_register_size(mode, shape, fn):
    kernel = tessera.kernel(fn, mode=mode, config=tessera.Config(block_sizes=[16]))
    x = torch.randn(*shape)
    torch.testing.assert_close(kernel(x), x + 1)


@pytest.mark.parametrize("marked", [None, (0,)])
def test_pin_lasts_one_call(marked):
    kernel = tessera.kernel(rows_plus_one_statement, mode="interpret", config=tessera.Config(block_sizes=[16]))
    x = torch.randn(9, 6)
    if marked is not None:
        tessera.mark_static(x, marked)
    torch.testing.assert_close(kernel(x), x + 1)
    assert static_dims(x) == (marked or ())
    y = torch.randn(9, 11)  # another width: its own variant, still right
    torch.testing.assert_close(kernel(y), y + 1)


def test_unspecialized_size_still_refused_as_register_size():
    def rows(x: T) -> T:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = hl.zeros([tile, x.size(1)]) + x[tile, :]
        return out

    kernel = tessera.kernel(rows, mode="interpret", config=tessera.Config(block_sizes=[16]))
    with pytest.raises(tessera.exc.DynamicAllocationError, match="hl.specialize"):
        kernel(torch.randn(4, 6))


def test_config_spec_lists_reduction_loops():
    def row_sums(x: T) -> T:
        hl.specialize(x.size(1))
        out = x.new_empty([x.size(0)])
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile, :].sum(-1)
        return out

    def copy(x: T) -> T:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile]
        return out

    x = torch.randn(6, 50)
    spec = tessera.kernel(row_sums, mode="interpret").bind((x,)).config_spec
    assert [axis.key for axis in spec.reduction_loops] == ["reduction_loops"]
    flat = x.reshape(-1)  # no whole row to chunk
    assert tessera.kernel(copy, mode="interpret").bind((flat,)).config_spec.reduction_loops == []


def test_rewriting_keeps_the_source_forms_that_pin_sizes():
    kernel = tessera.kernel(rows_plus_one_statement, mode="eager", config=tessera.Config(block_sizes=[16]))
    kernel(torch.randn(3, 5))  # rewrites the kernel
    assert kernel.specialized_arguments == (("x", 1),)
    assert tessera.kernel(rows_plus_one_alias).specialized_arguments == (("x", 1),)
