"""Explicit memory access: `hl.load`, `hl.store`, `hl.atomic_add` / `atomic_max` / `atomic_min`.

`x[tile]` and `out[tile] = v` are the usual way in; these functions add `extra_mask` (lanes
where it is False read 0 and are not written) and atomics.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from tessera.ir.primitive import Primitive
from tessera.runtime import eager_indexing


def load(tensor: torch.Tensor, index: Sequence[Any], extra_mask: Any = None,
         eviction_policy: str | None = None) -> Any:
    """Read `tensor[index]`; with scalar indices the result is a runtime scalar.

    >>> m = hl.load(group_sizes, [g * 6])                       # doctest: +SKIP
    >>> v = hl.load(x, [tile, idx], extra_mask=idx < n)          # doctest: +SKIP
    """
    return load_p.bind(tensor, tuple(index), extra_mask)


def store(tensor: torch.Tensor, index: Sequence[Any], value: Any, extra_mask: Any = None) -> None:
    """Write `value` to `tensor[index]`, skipping lanes where `extra_mask` is False.

    >>> hl.store(out, [tile], y, extra_mask=tile.index < n)     # doctest: +SKIP
    """
    store_p.bind(tensor, tuple(index), value, extra_mask)


def atomic_add(tensor: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> None:
    """Atomically add `value` into `tensor[index]`; repeated indices all add.

    >>> hl.atomic_add(out, [tile_m, tile_n], partial)          # doctest: +SKIP
    """
    atomic_p.bind(tensor, tuple(index), value, op="add")


def atomic_max(tensor: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> None:
    """Atomically store `max(tensor[index], value)`."""
    atomic_p.bind(tensor, tuple(index), value, op="max")


def atomic_min(tensor: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> None:
    """Atomically store `min(tensor[index], value)`."""
    atomic_p.bind(tensor, tuple(index), value, op="min")


load_p = Primitive("load")


@load_p.def_eager
def _load_eager(tensor: torch.Tensor, index: tuple, mask: Any) -> torch.Tensor:
    return eager_indexing.load(tensor, index, mask)


store_p = Primitive("store")


@store_p.def_eager
def _store_eager(tensor: torch.Tensor, index: tuple, value: Any, mask: Any) -> None:
    eager_indexing.store(tensor, index, value, mask)


atomic_p = Primitive("atomic")


@atomic_p.def_eager
def _atomic_eager(tensor: torch.Tensor, index: tuple, value: Any, *, op: str) -> None:
    if op == "add":
        eager_indexing.store(tensor, index, value, accumulate=True)
    else:
        eager_indexing.store(tensor, index, value, reduce=op)


def _load_trace(tracer: Any, tensor: Any, index: tuple, mask: Any) -> Any:
    from tessera.trace.indexing import trace_load
    return trace_load(tracer, tensor, index, mask)


def _store_trace(tracer: Any, tensor: Any, index: tuple, value: Any, mask: Any) -> None:
    from tessera.trace.indexing import trace_store
    trace_store(tracer, tensor, index, value, mask)


def _atomic_trace(tracer: Any, tensor: Any, index: tuple, value: Any, *, op: str) -> None:
    from tessera.trace.indexing import trace_store
    trace_store(tracer, tensor, index, value, None, atomic=op)


load_p.def_trace(_load_trace)
store_p.def_trace(_store_trace)
atomic_p.def_trace(_atomic_trace)
