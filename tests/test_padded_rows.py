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
from tests.test_specialize_pins_sizes import MODES, T

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


CASES = [
    (padded_accumulator, lambda x: x + 1),
    (padded_product, lambda x: x + 2),
    (padded_sums, lambda x: x.sum(-1) + tessera.next_power_of_2(x.size(1))),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fn, reference", CASES, ids=[case[0].__name__ for case in CASES])
def test_padded_allocation_combines_with_its_row(mode, shape, fn, reference):
    x = torch.randn(*shape)
    kernel = tessera.kernel(fn, mode=mode, config=tessera.Config(block_sizes=[16]))
    torch.testing.assert_close(kernel(x), reference(x), atol=1e-5, rtol=1e-5)


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
