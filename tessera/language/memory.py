"""Memory access: `x[tile]`, `out[tile] = v`, `hl.load`, `hl.store`, `hl.atomic_*`.

Indexing is the usual way in (`getitem_p`, `setitem_p`: the meaning of `Tensor.__getitem__` /
`__setitem__` inside a kernel); the `hl.` functions add `extra_mask` (lanes where it is False
read 0 and are not written), eviction hints and atomics.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from tessera import exc
from tessera.ir.primitive import Primitive
from tessera.language import eager_indexing, eager_lanes
from tessera.language.stack import StackTensor
from tessera.language.tile import Tile
from tessera.language.rearrange import select_lanes, tensor_index_position
from tessera.language.slicing import constant_picks
from tessera.language.view import subscript_value
from tessera.location import user_location
from tessera.trace.indexing import tensor_getitem, tensor_setitem, trace_load, trace_store
from tessera.trace.proxy import TensorProxy, TileValue, tile_value_assignment_error
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
    if isinstance(tensor, StackTensor):
        return _stack_access("hl.load", tensor, index, extra_mask)
    return load_p.bind(tensor, outer_indices(index), extra_mask, eviction_policy=eviction_policy)


def _tiles_of_index_tensors(index: Sequence[Any]) -> list[Any] | None:
    """The tile each 1-D index tensor of a subscript runs over (its traced axis, or the Tile an
    eager value's lanes follow), or None where one runs over no tile or is not 1-D."""
    tiles = []
    for value in index:
        if isinstance(value, TileValue):
            if value.dim() != 1 or not value.axes[0].is_tile:
                return None
            tiles.append(value.axes[0])
        elif isinstance(value, torch.Tensor):
            lanes = eager_lanes.lanes_of(value)
            if value.dim() != 1 or lanes == eager_lanes.LOST or not isinstance(lanes[0], Tile):
                return None
            tiles.append(lanes[0])
    return tiles


def crossed_indices(index: Any) -> Any:
    """A subscript's index with Helion's meaning where torch's has none: 1-D index tensors over
    different tiles (`out[tile_m.index, tile_n.index]`, `x[rows[t0], cols[t1]]`) each give the
    result a dim of its own, as in `hl.load` (`outer_indices`). Torch pairs index tensors up
    elementwise, which different tiles cannot be (the trace's dims differ; in eager mode equal
    sizes would silently pair lanes of unrelated tiles); index tensors over one tile still pair."""
    if not isinstance(index, tuple):
        return index
    tiles = _tiles_of_index_tensors(index)
    if not tiles or len(tiles) < 2:
        return index
    distinct = all(not _same_tile(a, b) for i, a in enumerate(tiles) for b in tiles[i + 1:])
    return outer_indices(index) if distinct else index


def _same_tile(a: Any, b: Any) -> bool:
    return a is b if not isinstance(a, Tile) else eager_lanes.same_tile(a, b)


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
    if isinstance(tensor, StackTensor):
        _stack_access("hl.store", tensor, index, extra_mask)[tuple(index)] = value
        return
    store_p.bind(tensor, outer_indices(index), value, extra_mask)


def _stack_access(what: str, stack: StackTensor, index: Sequence[Any], extra_mask: Any) -> Any:
    """`hl.load(stack, index)` reads `stack[index]`; `hl.store` goes through the stack too."""
    if extra_mask is not None:
        raise exc.UnsupportedOperationError(f"{what} on an hl.StackTensor with extra_mask", location=user_location(3),
                                            hint="index the stack with tiles (their tails are masked already)")
    return stack if what == "hl.store" else stack[tuple(index)]


def atomic_add(target: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """Atomically add `value` into `target[index]`; repeated indices all add. `sem` is the memory
    ordering of the compiled atomic ('relaxed', 'acquire', 'release', 'acq_rel'). Returns the
    values `target[index]` held before, as `tl.atomic_add` does (where one call repeats an
    index, eager mode returns the value before the call; the GPU, one before that lane's add).

    >>> old = hl.atomic_add(out, [tile_m, tile_n], partial)    # doctest: +SKIP
    """
    return atomic_p.bind(target, outer_indices(index), value, op="add", sem=_checked("add", target, sem))


def _read_modify_write(op: str, meaning: str) -> Any:
    """The public `hl.atomic_<op>`: atomically store `meaning`, returning the values before."""
    def atomic(target: torch.Tensor, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
        return atomic_p.bind(target, outer_indices(index), value, op=op, sem=_checked(op, target, sem))
    name = f"atomic_{op}"
    atomic.__name__ = atomic.__qualname__ = name
    atomic.__code__ = atomic.__code__.replace(co_name=name)  # errors name the hl. function by its frame
    atomic.__doc__ = (f"Atomically store {meaning} into `target[index]`; returns the values it held before.\n\n"
                      f"    >>> old = hl.{name}(target, [tile], value)    # doctest: +SKIP\n    ")
    return atomic


atomic_max = _read_modify_write("max", "`max(target[index], value)`")
atomic_min = _read_modify_write("min", "`min(target[index], value)`")
atomic_and = _read_modify_write("and", "`target[index] & value` (integer tensors)")
atomic_or = _read_modify_write("or", "`target[index] | value` (integer tensors)")
atomic_xor = _read_modify_write("xor", "`target[index] ^ value` (integer tensors)")
atomic_xchg = _read_modify_write("xchg", "`value` (an exchange)")


def atomic_cas(target: torch.Tensor, index: Sequence[Any], expected: Any, value: Any, sem: str = "relaxed") -> Any:
    """Atomically store `value` where `target[index]` equals `expected` (compare and swap);
    returns the values before (equal to `expected` where the swap happened).

    >>> seen = hl.atomic_cas(lock, [0], 0, 1, sem="acquire")    # doctest: +SKIP
    """
    return atomic_p.bind(target, outer_indices(index), value, op="cas", sem=_checked("cas", target, sem),
                         expected=expected)


def _checked(op: str, tensor: Any, sem: str) -> str:
    """`sem` after checking it and the atomic's target (called by the public hl.atomic_* functions)."""
    if isinstance(tensor, TileValue) or eager_indexing.is_tile_value(tensor):
        raise exc.AtomicOnDeviceTensor(
            f"hl.atomic_{op}() on a tile value: it lives in registers of one program, and atomics update "
            "memory that programs share", location=user_location(2),
            hint="apply the atomic to a tensor argument (or one allocated before the tile loop); combine "
                 "tile values with ordinary ops")
    if sem not in MEMORY_SEMANTICS:
        raise exc.InvalidMemorySemantic(
            f"Invalid memory semantic {sem!r}: hl.atomic_{op}(sem={sem!r}) is no memory ordering",
            location=user_location(2), hint=f"use one of {', '.join(MEMORY_SEMANTICS)}")
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


# read-modify-write atomics in eager mode: the new value of an element from its old value
_UPDATES: dict[str, Any] = {
    "and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor,
    "xchg": lambda old, new: new.expand_as(old).clone(),
    "cas": lambda old, new, expected: torch.where(old == expected, new, old),
}
_INTEGER_ONLY = ("and", "or", "xor")


@atomic_p.def_eager
def _atomic_eager(tensor: torch.Tensor, index: tuple, value: Any, *, op: str, sem: str,
                  expected: Any = None) -> torch.Tensor:
    _check_atomic_dtype(op, tensor.dtype)
    previous = eager_indexing.load(tensor, index).clone()
    if op == "add":
        eager_indexing.store(tensor, index, value, accumulate=True)
    elif op in ("max", "min"):
        eager_indexing.store(tensor, index, value, reduce=op)
    else:
        eager_indexing.read_modify_write(tensor, index, _UPDATES[op], value,
                                         *((expected,) if op == "cas" else ()))
    return previous


@atomic_p.def_trace
def _atomic_trace(tracer: Tracer, tensor: Any, index: tuple, value: Any, *, op: str, sem: str,
                  expected: Any = None) -> Any:
    if isinstance(tensor, TensorProxy):
        _check_atomic_dtype(op, tensor.dtype)
    return trace_store(tracer, tensor, index, value, None, atomic=op, sem=sem, expected=expected)


def _check_atomic_dtype(op: str, dtype: torch.dtype) -> None:
    """Bitwise atomics need an integer tensor (the GPU has no bitwise atomics on floats or bools);
    no atomic works on bools or 8-bit types there."""
    small = dtype in (torch.bool, torch.int8, torch.uint8)
    if small or (op in _INTEGER_ONLY and dtype.is_floating_point):
        raise exc.DtypeError(f"hl.atomic_{op} on a {dtype} tensor: the GPU has no such atomic",
                             location=user_location(), hint="use an int32 or int64 tensor")


# -- indexing: what `x[...]` and `x[...] = v` mean inside a kernel ---------------------------
def _has_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _getitem_eager(tensor: torch.Tensor, index: Any) -> torch.Tensor:
    if eager_indexing.is_tile_value(tensor):  # registers, not memory: views only, as when traced
        position = tensor_index_position(index)
        if position is not None:  # `v[:, idx]` of a whole dim, as the trace picks lanes
            eager_indexing.refuse_tile_dims(tensor, [position], "indexing a tile value with a tensor")
            return torch.Tensor.__getitem__(tensor, index)
        eager_indexing.check_tile_value_index(index)
        eager_indexing.refuse_constant_index_of_tile_dims(tensor, index)
        return torch.Tensor.__getitem__(tensor, index)
    if _has_bool_index(index):  # boolean selection is plain PyTorch (no tiles, no bounds to check)
        return torch.Tensor.__getitem__(tensor, index)
    return eager_indexing.load(tensor, crossed_indices(index))


def _setitem_eager(tensor: torch.Tensor, index: Any, value: Any) -> None:
    if eager_indexing.is_tile_value(tensor):  # as when traced: registers are not assigned into
        raise tile_value_assignment_error()
    if _has_bool_index(index):
        torch.Tensor.__setitem__(tensor, index, value)
        return
    eager_indexing.store(tensor, crossed_indices(index), value)


getitem_p = Primitive("getitem", torch_functions=(torch.Tensor.__getitem__,))
getitem_p.def_eager(_getitem_eager)  # tiles index like slices, with bounds checks


@getitem_p.def_trace
def _getitem_trace(tracer: Tracer, value: Any, index: Any) -> Any:
    if isinstance(value, TileValue):
        position = tensor_index_position(index)
        if position is not None:  # `v[:, idx]`: lanes of a whole dim picked by an int index
            return select_lanes(tracer, value, position, index[position] if isinstance(index, tuple) else index,
                                "indexing a tile value with a tensor", True)
        return subscript_value(tracer, *constant_picks(tracer, value, index))
    if isinstance(value, TensorProxy):
        return tensor_getitem(tracer, value, crossed_indices(index))
    raise exc.IndexingError(f"cannot index {type(value).__name__} inside a tile loop", location=user_location())


setitem_p = Primitive("setitem", torch_functions=(torch.Tensor.__setitem__,))
setitem_p.def_eager(_setitem_eager)


@setitem_p.def_trace
def _setitem_trace(tracer: Tracer, tensor: Any, index: Any, value: Any) -> None:
    if not isinstance(tensor, TensorProxy):
        raise exc.IndexingError(f"cannot store into {type(tensor).__name__} inside a tile loop",
                                location=user_location(), hint="store into a tensor argument of the kernel")
    tensor_setitem(tracer, tensor, crossed_indices(index), value)
