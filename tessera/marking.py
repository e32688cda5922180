"""`tessera.mark_static`: pin some dims of one tensor argument for one call."""
from __future__ import annotations

from typing import Sequence

import torch

# The attribute a mark lives in; cache keys read it directly (a hot path).
STATIC_DIMS_ATTRIBUTE = "_tessera_static_dims"


def mark_static(tensor: torch.Tensor, dims: Sequence[int] | None = None) -> torch.Tensor:
    """Return `tensor`, marked so that the listed dims (all if None) are compile-time constants.

    The mark is recorded on the tensor object (an attribute); interpret and compiled modes read
    it when they build their cache key. Eager mode ignores it (a constant cannot change eager
    results).

    >>> x = tessera.mark_static(torch.empty(8, 4), dims=[1])   # doctest: +SKIP
    """
    rank = tensor.dim()
    chosen = tuple(range(rank)) if dims is None else tuple(d % rank if rank else d for d in dims)
    setattr(tensor, STATIC_DIMS_ATTRIBUTE, chosen)
    return tensor


def static_dims(tensor: torch.Tensor) -> tuple[int, ...]:
    """The dims `mark_static` pinned on this tensor (empty if none)."""
    return getattr(tensor, STATIC_DIMS_ATTRIBUTE, ())
