"""Memory access: `x[tile]`, `out[tile] = v`, `hl.load`, `hl.store`, `hl.atomic_add/max/min`.

Indexing is the usual way in (`getitem_p`, `setitem_p`: the meaning of `Tensor.__getitem__` /
`__setitem__` inside a kernel); the `hl.` functions add `extra_mask` (lanes where it is False
read 0 and are not written), eviction hints and atomics.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from tessera import exc
from tessera.ir.primitive import Primitive
from tessera.language import eager_indexing
from tessera.language.view import subscript_value
from tessera.location import user_location
from tessera.trace.indexing import tensor_getitem, tensor_setitem, trace_load, trace_store
from tessera.trace.proxy import TensorProxy, TileValue
from tessera.trace.tracer import Tracer

EVICTION_POLICIES = ("evict_first", "evict_last", "evict_normal")
MEMORY_SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")


def load(tensor: torch.Tensor, index: Sequence[Any], extra_mask: Any = None,
         eviction_policy: str | None = None) -> Any:
    """Read `tensor[index]`; with scalar indices the result is a runtime scalar.

    `eviction_policy` ('evict_first', 'evict_last', 'evict_normal') is a cache hint for the
    compiled load; it does not change results.

    >>> m = hl.load(group_sizes, [g * 6])                       # doctest: +SKIP
    >>> v = hl.load(x, [tile, idx], extra_mask=idx < n)          # doctest: +SKIP
    """
    if eviction_policy is not None and eviction_policy not in EVICTION_POLICIES:
        raise exc.TesseraError(f"hl.load: unknown eviction_policy {eviction_policy!r}", location=user_location(),
                               hint=f"use one of {', '.join(EVICTION_POLICIES)}, or None")
    return load_p.bind(tensor, outer_indices(index), extra_mask, eviction_policy=eviction_policy)


def outer_indices(index: Sequence[Any]) -> tuple[Any, ...]:
    """An `hl.load`/`hl.store` index list with Helion's meaning: two or more 1-D tensor indices
    (`[t0.index, t1.index]`) each give the result a dim of its own (an outer product, one dim per
    index, in order), where a subscript `x[a, b]` would pair them up elementwise as torch does.
    Each becomes a view with its own dim (`a[:, None]`, `b[None, :]`), which the usual indexing
    rules broadcast into that shape."""
    index = tuple(index)
    tensors = [i for i, value in enumerate(index) if isinstance(value, (torch.Tensor, TileValue))]
    if len(tensors) < 2 or any(index[i].dim() != 1 for i in tensors):
        return index
    spread = list(index)
    for order, position in enumerate(tensors):
        view = tuple(slice(None) if k == order else None for k in range(len(tensors)))
        spread[position] = index[position][view]
    return tuple(spread)


def store(tensor: torch.Tensor, index: Sequence[Any], value: Any, extra_mask: Any = None) -> None:
    """Write `value` to `tensor[index]`, skipping lanes where `extra_mask` is False.

    >>> hl.store(out, [tile], y, extra_mask=tile.index < n)     # doctest: +SKIP
    """
    store_p.bind(tensor, outer_indices(index), value, extra_mask)


def atomic_add(tensor: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """Atomically add `value` into `tensor[index]`; repeated indices all add. `sem` is the memory
    ordering of the compiled atomic ('relaxed', 'acquire', 'release', 'acq_rel'). Returns the
    values `tensor[index]` held before, as `tl.atomic_add` does (where one call repeats an
    index, eager mode returns the value before the call; the GPU, one before that lane's add).

    >>> old = hl.atomic_add(out, [tile_m, tile_n], partial)    # doctest: +SKIP
    """
    return atomic_p.bind(tensor, outer_indices(index), value, op="add", sem=_checked_sem(sem))


def atomic_max(tensor: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """Atomically store `max(tensor[index], value)`; returns the values before."""
    return atomic_p.bind(tensor, outer_indices(index), value, op="max", sem=_checked_sem(sem))


def atomic_min(tensor: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """Atomically store `min(tensor[index], value)`; returns the values before."""
    return atomic_p.bind(tensor, outer_indices(index), value, op="min", sem=_checked_sem(sem))


def _checked_sem(sem: str) -> str:
    if sem not in MEMORY_SEMANTICS:
        raise exc.TesseraError(f"unknown atomic memory ordering sem={sem!r}", location=user_location(2),
                               hint=f"use one of {', '.join(MEMORY_SEMANTICS)}")
    return sem


# -- hl.load / hl.store / atomics -------------------------------------------------------------
load_p = Primitive("load")


@load_p.def_eager
def _load_eager(tensor: torch.Tensor, index: tuple, mask: Any, *, eviction_policy: str | None) -> torch.Tensor:
    return eager_indexing.load(tensor, index, mask)


@load_p.def_trace
def _load_trace(tracer: Tracer, tensor: Any, index: tuple, mask: Any, *, eviction_policy: str | None) -> Any:
    return trace_load(tracer, tensor, index, mask, eviction_policy)


store_p = Primitive("store")


@store_p.def_eager
def _store_eager(tensor: torch.Tensor, index: tuple, value: Any, mask: Any) -> None:
    eager_indexing.store(tensor, index, value, mask)


@store_p.def_trace
def _store_trace(tracer: Tracer, tensor: Any, index: tuple, value: Any, mask: Any) -> None:
    trace_store(tracer, tensor, index, value, mask)


atomic_p = Primitive("atomic")


@atomic_p.def_eager
def _atomic_eager(tensor: torch.Tensor, index: tuple, value: Any, *, op: str, sem: str) -> torch.Tensor:
    previous = eager_indexing.load(tensor, index).clone()
    if op == "add":
        eager_indexing.store(tensor, index, value, accumulate=True)
    else:
        eager_indexing.store(tensor, index, value, reduce=op)
    return previous


@atomic_p.def_trace
def _atomic_trace(tracer: Tracer, tensor: Any, index: tuple, value: Any, *, op: str, sem: str) -> Any:
    return trace_store(tracer, tensor, index, value, None, atomic=op, sem=sem)


# -- indexing: what `x[...]` and `x[...] = v` mean inside a kernel ---------------------------
def _has_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _getitem_eager(tensor: torch.Tensor, index: Any) -> torch.Tensor:
    if _has_bool_index(index):  # boolean selection is plain PyTorch (no tiles, no bounds to check)
        return torch.Tensor.__getitem__(tensor, index)
    return eager_indexing.load(tensor, index)


def _setitem_eager(tensor: torch.Tensor, index: Any, value: Any) -> None:
    if _has_bool_index(index):
        torch.Tensor.__setitem__(tensor, index, value)
        return
    eager_indexing.store(tensor, index, value)


getitem_p = Primitive("getitem", torch_functions=(torch.Tensor.__getitem__,))
getitem_p.def_eager(_getitem_eager)  # tiles index like slices, with bounds checks


@getitem_p.def_trace
def _getitem_trace(tracer: Tracer, value: Any, index: Any) -> Any:
    if isinstance(value, TileValue):
        return subscript_value(tracer, value, index)
    if isinstance(value, TensorProxy):
        return tensor_getitem(tracer, value, index)
    raise exc.IndexingError(f"cannot index {type(value).__name__} inside a tile loop", location=user_location())


setitem_p = Primitive("setitem", torch_functions=(torch.Tensor.__setitem__,))
setitem_p.def_eager(_setitem_eager)


@setitem_p.def_trace
def _setitem_trace(tracer: Tracer, tensor: Any, index: Any, value: Any) -> None:
    if not isinstance(tensor, TensorProxy):
        raise exc.IndexingError(f"cannot store into {type(tensor).__name__} inside a tile loop",
                                location=user_location(), hint="store into a tensor argument of the kernel")
    tensor_setitem(tracer, tensor, index, value)
