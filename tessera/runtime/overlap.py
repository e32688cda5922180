"""Outputs whose elements share memory: refused, as torch refuses in-place writes into them.

`torch.zeros(1, n).expand(m, n)` has m rows at one address: programs storing different rows
race for the same bytes and the result is garbage. Torch raises for an in-place write into such
a tensor ("more than one element of the written-to tensor refers to a single memory location");
a launch that stores (not atomically) into one raises `KernelArgumentError` the same way.

`internal_overlap(sizes, strides)` is exact without enumerating elements in the usual cases:
a dim of size > 1 with stride 0 overlaps; otherwise, with dims sorted by stride, each stride
must step past everything the smaller dims span (then no two elements meet). A layout that
passes neither test (an interleaving `as_strided`, rare) is decided by listing its offsets when
it has at most 2**16 elements, and refused as "may overlap" beyond that. Cost: O(rank log rank)
per distinct (sizes, strides), paid on the keyed path only (call_keys.py remembers it per
layout, and the exact-facts memo repeats the whole decision).

>>> internal_overlap((4, 8), (0, 1))
True
>>> internal_overlap((4, 8), (8, 1))
False
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

_ENUMERATE_LIMIT = 1 << 16


def internal_overlap(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether two different indices of a tensor with this layout address the same element."""
    dims = [(abs(stride), size) for size, stride in zip(sizes, strides) if size > 1]
    if not dims:
        return False
    if any(stride == 0 for stride, _ in dims):
        return True
    dims.sort()
    span = 0  # the largest offset reachable with the dims so far
    for stride, size in dims:
        if stride <= span:
            return _overlap_by_enumeration(dims)
        span += (size - 1) * stride
    return False


def _overlap_by_enumeration(dims: list[tuple[int, int]]) -> bool:
    if math.prod(size for _, size in dims) > _ENUMERATE_LIMIT:
        return True  # may overlap: refused rather than risked
    offsets = [sum(stride * index for (stride, _), index in zip(dims, indices))
               for indices in itertools.product(*(range(size) for _, size in dims))]
    return len(set(offsets)) != len(offsets)
