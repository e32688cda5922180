"""Helion holds a whole row of n lanes padded to next_power_of_2(n): an allocation of exactly that
many lanes (`hl.zeros([tile, next_power_of_2(n)])`) combines lane for lane with the row, and
stores into it, the lanes past n dropped (masked when compiled). A reduction of the allocation
alone still counts all its lanes. Eager and interpret against PyTorch, at size 1, non-powers of
two (where the padding exists) and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor
MODES = ("eager", "interpret")
SHAPES = [(1, 3), (33, 5), (9, 16), (7, 100)]


def padded_accumulator(x: T) -> T:
    hl.specialize(x.size(1))
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        acc = hl.zeros([tile, tessera.next_power_of_2(x.size(1))])
        acc += x[tile, :] + 1
        out[tile, :] = acc
    return out


def padded_product(x: T) -> T:
    hl.specialize(x.size(1))
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        width = tessera.next_power_of_2(x.size(1))
        acc = hl.full([tile, width], 1.0 / width)
        ones = hl.full([width, width], 1.0)
        acc = x[tile, :] + torch.matmul(acc, ones) + 1  # each padded lane of the product is 1
        out[tile, :] = acc
    return out


def padded_sums(x: T) -> T:
    hl.specialize(x.size(1))
    out = torch.empty([x.size(0)], device=x.device)
    for tile in hl.tile(x.size(0)):
        width = tessera.next_power_of_2(x.size(1))
        ones = hl.full([tile, width], 1.0)
        out[tile] = (x[tile, :] * ones).sum(-1) + ones.sum(-1)  # the allocation's own sum: all lanes
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_padded_allocation_accumulates_a_row(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(padded_accumulator, mode=mode, config=tessera.Config(block_sizes=[16]))
    torch.testing.assert_close(kernel(x), x + 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_padded_allocation_through_a_product(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(padded_product, mode=mode, config=tessera.Config(block_sizes=[16]))
    torch.testing.assert_close(kernel(x), x + 2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_padded_allocation_reductions(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(padded_sums, mode=mode, config=tessera.Config(block_sizes=[16]))
    expected = x.sum(-1) + tessera.next_power_of_2(shape[1])
    torch.testing.assert_close(kernel(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_a_wider_allocation_than_the_padding_is_refused(mode):
    def too_wide(x: T) -> T:
        hl.specialize(x.size(1))
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = hl.zeros([tile, 16]) + x[tile, :]  # 5 lanes pad to 8, not 16
        return out

    kernel = tessera.kernel(too_wide, mode=mode, config=tessera.Config(block_sizes=[16]))
    with pytest.raises(tessera.exc.ShapeMismatchError):
        kernel(torch.randn(4, 5))
