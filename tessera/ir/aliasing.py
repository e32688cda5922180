"""Whether two tensors share some memory without being the same view (torch's "partial overlap").

A launch that stores into `out` while reading `x`, where `out` is `x` shifted by a column (two
views of one storage), races: a program's store lands on elements another program still reads,
and the result depends on the order programs run. Torch refuses an out-of-place op in that
case ("some elements of the input tensor and the written-to tensor refer to a single memory
location"); the same view passed twice, or one contiguous block under two shapes (full overlap),
is an in-place op and allowed.

`partial_overlap(a, b)` is exact: disjoint byte ranges answer at once; intersecting ones list
both tensors' element offsets when each has at most `_ENUMERATE_LIMIT` elements, and say "may
overlap" (True) beyond that.

>>> base = torch.zeros(4, 9)
>>> partial_overlap(base[:, :8], base[:, 1:])
True
>>> partial_overlap(base[:, ::2], base[:, 1::2])  # interleaved, never the same element
False
"""
from __future__ import annotations

import torch

from tessera import exc
from tessera.location import SourceLocation

_ENUMERATE_LIMIT = 1 << 20


def _byte_range(tensor: torch.Tensor) -> tuple[int, int]:
    """[first, last) bytes the tensor's elements occupy."""
    low = high = 0
    for size, stride in zip(tensor.shape, tensor.stride()):
        reach = (size - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    start, item = tensor.data_ptr(), tensor.element_size()
    return start + low * item, start + (high + 1) * item


def _offsets(tensor: torch.Tensor) -> torch.Tensor:
    """The element offsets (from the storage's start) of each element, on the CPU."""
    offsets = torch.tensor(tensor.storage_offset(), dtype=torch.int64)
    for size, stride in zip(tensor.shape, tensor.stride()):
        offsets = offsets.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride
    return offsets.reshape(-1)


def partial_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` and `b` share an element without being the same view of it."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    a_start, a_end = _byte_range(a)
    b_start, b_end = _byte_range(b)
    if a_end <= b_start or b_end <= a_start:
        return False
    if (a_start, a_end) == (b_start, b_end) and (a.shape == b.shape and a.stride() == b.stride()
                                                 or a.is_contiguous() and b.is_contiguous()):
        return False  # the same elements (a view, or one contiguous block seen reshaped): an in-place op
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False  # two allocations (their byte ranges meet only in a pointer view, not checked)
    if a.element_size() != b.element_size() or max(a.numel(), b.numel()) > _ENUMERATE_LIMIT:
        return True
    return bool(torch.isin(_offsets(a), _offsets(b)).any())


def overlap_error(written: str, other: str, location: SourceLocation | None) -> exc.KernelArgumentError:
    """The located refusal of a launch that writes `written` while accessing `other` over it."""
    return exc.KernelArgumentError(
        f"{location.function + ': ' if location is not None and location.function else ''}"
        f"this tile loop writes {written!r}, which shares memory with {other!r} without being the same view "
        "(overlapping slices, a transpose of it, ...): programs would race on the shared elements",
        location=location,
        hint="write into a tensor of its own (torch.empty_like(...)) or .clone() the other operand first; "
             "torch refuses such partially overlapping operands too")


class AccessLog:
    """The tensor arguments one launch has read and written so far, for eager mode: a write that
    partially overlaps another access (or an access a write), in any order, is refused as the
    compiled launch is. Views made inside the kernel are not arguments: as in compiled code,
    where a view is its argument at an offset, they are never compared with their own base."""

    def __init__(self, arguments: dict[int, tuple[str, torch.Tensor]]) -> None:
        self.arguments = arguments  # id -> (name, tensor) of the call's tensor arguments
        self.accessed: dict[int, bool] = {}  # id -> written

    def note(self, tensor: torch.Tensor, writes: bool, location: SourceLocation | None) -> None:
        key = id(tensor)
        if key not in self.arguments or key in self.accessed and (self.accessed[key] or not writes):
            return
        name = self.arguments[key][0]
        for other, other_writes in self.accessed.items():
            other_name, other_tensor = self.arguments[other]
            if (writes or other_writes) and other != key and partial_overlap(tensor, other_tensor):
                raise overlap_error(*((name, other_name) if writes else (other_name, name)), location)
        self.accessed[key] = writes or self.accessed.get(key, False)
