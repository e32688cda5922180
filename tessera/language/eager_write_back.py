"""Eager mode's half of trace/write_back.py: `x[i] = torch.where(keep, new, x[i])` writes only
the `keep` lanes (`~keep` for `where(keep, x[i], new)`), as the trace does.

A load in a tile loop tags its value with where it was read (tensor, index items, the tensor's
version); `torch.where` of a tagged value tags its result with the lanes that write; a store into
the same tensor at the same index items, with no write to that tensor since the read, takes
those lanes as its mask. Lanes that would only write back what they read then cannot race with
a lane that writes the same element (which eager refuses, DuplicateStoreIndicesError).
"""
from __future__ import annotations

from typing import Any

import torch

_READ_AT = "_tessera_read_at"        # on a loaded value: (tensor, index items, tensor's version)
_WRITES_BACK = "_tessera_writes_back"  # on a where's result: (tensor, index items, version, lanes that write)


def note_read(value: torch.Tensor, tensor: torch.Tensor, index: Any) -> None:
    """Remember that `value` was read from `tensor[index]` (unmasked) just now."""
    setattr(value, _READ_AT, (tensor, _items(index), tensor._version))


def note_where(result: Any, condition: Any, taken: Any, other: Any) -> None:
    """Tag `torch.where(condition, taken, other)`'s result when one branch is a tagged read."""
    if not isinstance(result, torch.Tensor) or not isinstance(condition, torch.Tensor):
        return
    for old, kept, keep in ((other, taken, condition), (taken, other, None)):
        read = getattr(old, _READ_AT, None) if isinstance(old, torch.Tensor) else None
        # (as traced: both branches tile values of the result's dtype)
        if read is not None and old.dtype == result.dtype and isinstance(kept, torch.Tensor) \
                and kept.dtype == result.dtype:
            lanes = keep if keep is not None else ~condition
            setattr(result, _WRITES_BACK, (*read, lanes))
            return


def writing_lanes(tensor: torch.Tensor, index: Any, value: Any) -> torch.Tensor | None:
    """The lanes of `value` that write when it is a where() writing back `tensor[index]` in its
    other lanes (broadcast to `value`'s shape); else None."""
    tag = getattr(value, _WRITES_BACK, None) if isinstance(value, torch.Tensor) else None
    if tag is None:
        return None
    source, items, version, lanes = tag
    if source is not tensor or version != tensor._version or not _same_items(items, _items(index)):
        return None
    return torch.broadcast_to(lanes, value.shape)


def _items(index: Any) -> tuple:
    return tuple(index) if isinstance(index, (tuple, list)) else (index,)


def _same_items(first: tuple, second: tuple) -> bool:
    """Index items that are the same objects (tiles, index tensors) or equal ints / int slices."""
    return len(first) == len(second) and all(map(_same_item, first, second))


def _same_item(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is int and type(b) is int:
        return a == b
    if isinstance(a, slice) and isinstance(b, slice):
        return all(x is y or type(x) is int and type(y) is int and x == y
                   for x, y in ((a.start, b.start), (a.stop, b.stop), (a.step, b.step)))
    return False
