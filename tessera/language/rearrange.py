"""torch functions that move lanes within whole dims of tile values: `torch.flip`, `torch.roll`,
`Tensor.repeat`, `torch.tile`, `torch.index_select`, `torch.tensor_split`, `Tensor.narrow`,
`Tensor.select`.

Each result lane names the source lane it takes (`n - 1 - p` for a flip, `(p - shift) mod n` for a
roll, `p mod n` for a repeat, the index's value for index_select) and picks it as slicing.py's
constant slices do. Only whole dims (read with `:`) move: a tile's extent varies per tile, so its
lanes have no fixed order to rearrange; every mode refuses a tile dim with the same located error.
An index_select index outside the dim gives 0 in registers (as torch.gather's does, gather.py);
eager mode (torch itself) raises there.

>>> mirrored = torch.flip(x[tile, :], [1])                                       # doctest: +SKIP
>>> shifted = torch.roll(x[tile, :], 3, 1)                                       # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch

from tessera import exc
from tessera.ir.graph import UNIT
from tessera.ir.primitive import defined_primitive
from tessera.language.eager_indexing import refuse_tile_dims
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch
from tessera.language.slicing import known_int, pick_lanes, slice_dim, whole_extent
from tessera.language.statistics import only_tile_value
from tessera.language.view import cast, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def _dims(value: Any, dims: Any, what: str) -> list[int]:
    rank = max(value.dim(), 1)
    listed = [dims] if isinstance(dims, int) else list(dims)
    if any(isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank for d in listed):
        raise exc.IndexingError(f"{what}: dims {dims!r} for a value of rank {value.dim()}", location=user_location(),
                                hint=f"pass ints in [-{rank}, {rank})")
    return [d % rank for d in listed]


def _moved(tracer: Tracer, value: TileValue, dim: int, count: int, source_of: Callable[[Any], Any]) -> TileValue:
    """`value` with dim `dim` replaced by `count` lanes; lane p takes source lane `source_of(p)`."""
    axis = UNIT if count == 1 else tracer.full_axis(count)
    lanes = 0 if axis is UNIT else tracer.tile_index(axis)
    wanted = source_of(lanes)
    if axis is not UNIT and not isinstance(wanted, TileValue):  # one source lane for all: spread over the axis
        wanted = apply_elementwise(tracer, "add", apply_elementwise(tracer, "mul", lanes, 0), wanted)
    return pick_lanes(tracer, value, dim, axis, wanted)


def _eager_on_whole_dims(function: Callable[..., Any], what: str, dims_of: Callable[..., Sequence[int]],
                         error: type[exc.UnsupportedOperationError] = exc.UnsupportedOperationError
                         ) -> Callable[..., Any]:
    """torch's `function` in eager mode, after refusing tile dims as the trace does."""
    def rule(value: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(value, torch.Tensor):
            refuse_tile_dims(value, dims_of(value, *args, **kwargs), what, error)
        return function(value, *args, **kwargs)
    rule.__name__ = f"_{function.__name__}_eager"
    return rule


def _known(tracer: Tracer, value: Any, what: str) -> Any:
    """A size expression (`v.size(1) // 2`, decided in user code or a helper) as this call's int,
    guarded; lists of them item by item; anything else as given (checked by the caller)."""
    if isinstance(value, (list, tuple)):  # torch.Size too
        known = [_known(tracer, item, what) for item in value]
        return known if isinstance(value, list) else tuple(known)
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, sympy.Basic) or hasattr(value, "number"):
        return known_int(tracer, value, what)
    return value


def _spelled_dims(dims: tuple) -> Any:
    """The one dims argument of `torch.flip(v, dims)` / `torch.tile(v, dims)` from the method
    spellings torch also takes: `v.flip(1)`, `v.flip(0, 1)`, `v.tile(1, 2)`, `v.tile(2)`."""
    if len(dims) == 1 and isinstance(dims[0], (list, tuple, torch.Size)):
        return tuple(dims[0])
    return tuple(dims)


# -- torch.flip -----------------------------------------------------------------------------------
def _flip_dims(value: Any, *dims: Any) -> list[int]:
    return _dims(value, _spelled_dims(dims), "torch.flip")


def _flip_eager(value: Any, *dims: Any) -> Any:
    return torch.flip(value, _spelled_dims(dims))


def _flip_trace(tracer: Tracer, value: Any, *dims: Any) -> TileValue:
    value = only_tile_value("torch.flip", value)
    ask_torch("torch.flip", torch.flip, (value, _spelled_dims(dims)), {})
    for dim in _flip_dims(value, *dims):
        size = whole_extent(tracer, value, dim, "torch.flip")
        if size > 1:
            value = _moved(tracer, value, dim, size, lambda p, n=size: apply_elementwise(
                tracer, "add", apply_elementwise(tracer, "mul", p, -1), n - 1))
    return value


# -- torch.roll -----------------------------------------------------------------------------------
def _roll_dims(value: Any, shifts: Any, dims: Any = None) -> list[int]:
    if dims is None:
        if value.dim() > 1:
            raise exc.UnsupportedOperationError(
                "torch.roll without dims (it rolls the flattened value) of a tile value of rank > 1",
                location=user_location(), hint="name the dim to roll: torch.roll(v, shift, dims=1)")
        return [0] if value.dim() else []
    return _dims(value, dims, "torch.roll")


def _roll_trace(tracer: Tracer, value: Any, shifts: Any, dims: Any = None) -> TileValue:
    value = only_tile_value("torch.roll", value)
    shifts = _known(tracer, shifts, "torch.roll")
    positions = _roll_dims(value, shifts, dims)
    amounts = [shifts] if isinstance(shifts, int) else list(shifts)
    if len(amounts) != len(positions) or any(isinstance(s, bool) or not isinstance(s, int) for s in amounts):
        raise exc.UnsupportedOperationError(
            f"torch.roll with shifts {shifts!r} for dims {dims!r}: each named dim takes one constant int shift",
            location=user_location(), hint="pass Python ints, one per dim (torch requires as many too)")
    for dim, shift in zip(positions, amounts):
        size = whole_extent(tracer, value, dim, "torch.roll")
        if shift % size:  # lane p takes lane (p - shift) mod n, written with non-negative operands
            value = _moved(tracer, value, dim, size, lambda p, n=size, s=shift: apply_elementwise(
                tracer, "mod", apply_elementwise(tracer, "add", p, n - s % n), n))
    return value


# -- Tensor.repeat and torch.tile -----------------------------------------------------------------
def _counts(value: Any, sizes: tuple, what: str, padded: bool) -> list[int]:
    counts = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (list, tuple, torch.Size)) else list(sizes)
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise exc.UnsupportedOperationError(f"{what} with counts {counts!r}: each count must be a positive int",
                                            location=user_location(), hint="pass Python ints >= 1")
    if padded and len(counts) < value.dim():  # torch.tile: missing leading counts are 1
        counts = [1] * (value.dim() - len(counts)) + counts
    if len(counts) < value.dim():
        raise exc.ShapeMismatchError(f"{what}: {len(counts)} counts for a value of rank {value.dim()}",
                                     location=user_location(), hint="give at least one count per dim, as torch asks")
    return counts


def _repeated_dims(value: Any, counts: list[int]) -> list[int]:
    extra = len(counts) - value.dim()
    return [d - extra for d, count in enumerate(counts) if count > 1 and d >= extra]


def _repeat(tracer: Tracer, value: Any, sizes: tuple, what: str, padded: bool) -> TileValue:
    value = only_tile_value(what, value)
    sizes = _known(tracer, sizes, what)
    counts = _counts(value, sizes, what, padded)
    extra = len(counts) - value.dim()
    if extra:  # new leading dims, each of size 1 before its count applies
        value = view_axes(tracer, value, (UNIT,) * extra + tuple(value.axes), f"{what} new dims")
    for dim, count in enumerate(counts):
        if count > 1:
            size = whole_extent(tracer, value, dim, what)
            value = _moved(tracer, value, dim, size * count,
                           lambda p, n=size: apply_elementwise(tracer, "mod", p, n))
    return value


def _repeat_trace(tracer: Tracer, value: Any, *sizes: Any) -> TileValue:
    return _repeat(tracer, value, sizes, "Tensor.repeat", False)


def _tile_trace(tracer: Tracer, value: Any, *dims: Any) -> TileValue:
    return _repeat(tracer, value, (_spelled_dims(dims),), "torch.tile", True)


def _tile_eager(value: Any, *dims: Any) -> Any:
    return torch.tile(value, _spelled_dims(dims))


def _repeat_dims(value: Any, *sizes: Any) -> list[int]:
    return _repeated_dims(value, _counts(value, sizes, "Tensor.repeat", False))


def _tile_dims(value: Any, *dims: Any) -> list[int]:
    return _repeated_dims(value, _counts(value, (_spelled_dims(dims),), "torch.tile", True))


# -- torch.index_select ---------------------------------------------------------------------------
def _index_select_dims(value: Any, dim: int, index: Any) -> list[int]:
    return _dims(value, dim, "torch.index_select")


def _index_select_trace(tracer: Tracer, value: Any, dim: int, index: Any) -> TileValue:
    value = only_tile_value("torch.index_select", value)
    return select_lanes(tracer, value, _index_select_dims(value, dim, index)[0], index, "torch.index_select", False)


def select_lanes(tracer: Tracer, value: TileValue, dim: int, index: Any, what: str, wrap: bool) -> TileValue:
    """`value`'s lanes along whole dim `dim` named by a 1-D int index (a tile value or a tensor of
    constants); `wrap`: negative indices count from the end (`v[:, idx]`, not torch.index_select)."""
    size = whole_extent(tracer, value, dim, what)
    if isinstance(index, torch.Tensor) and not isinstance(index, TileValue):
        return _constant_select(tracer, value, dim, size, index, what, wrap)
    if not isinstance(index, TileValue) or index.dim() > 1 or index.dtype not in (torch.int32, torch.int64):
        raise exc.UnsupportedOperationError(
            f"{what} inside a tile loop takes a 1-D int32/int64 index: a tile value, or a tensor of "
            "constants made in the loop", location=user_location(),
            hint="e.g. torch.arange(v.size(1)) in the loop, torch.tensor([2, 0, 1]), or idx[:] loaded from memory")
    if value.dim() == 0:
        return value
    wanted = cast(tracer, index, torch.int32)
    if wrap:
        wanted = apply_elementwise(tracer, "where", apply_elementwise(tracer, "lt", wanted, 0),
                                   apply_elementwise(tracer, "add", wanted, size), wanted)
    return pick_lanes(tracer, value, dim, index.axes[0] if index.dim() else UNIT, wanted)


def tensor_index_position(index: Any) -> int | None:
    """The dim of `v[:, idx]`'s one int tensor index when every other item is `:`; else None."""
    items = index if isinstance(index, tuple) else (index,)
    tensors = [d for d, item in enumerate(items) if isinstance(item, (torch.Tensor, TileValue))]
    if len(tensors) != 1 or any(not isinstance(item, slice) or item != slice(None)
                                for d, item in enumerate(items) if d != tensors[0]):
        return None
    item = items[tensors[0]]
    return tensors[0] if item.dim() == 1 and item.dtype in (torch.int32, torch.int64) else None


MAX_CONSTANT_INDICES = 64
"""Longest constant index_select index: each of its lanes costs one select in the generated code."""


def _constant_select(tracer: Tracer, value: TileValue, dim: int, size: int, index: torch.Tensor, what: str,
                     wrap: bool) -> TileValue:
    """A select by a tensor of constants made in the loop (`torch.tensor([2, 0, 1])`, or what
    `torch.arange(1)` gives while tracing): its values are known now, so they are checked here."""
    if index.dim() > 1 or index.dtype not in (torch.int32, torch.int64) or index.numel() > MAX_CONSTANT_INDICES:
        raise exc.UnsupportedOperationError(
            f"{what} by a constant {index.dtype} tensor of shape {list(index.shape)}: inside a tile "
            f"loop a constant index is 1-D int32/int64 with at most {MAX_CONSTANT_INDICES} entries",
            location=user_location(), hint="load a longer index from memory: idx[:]")
    wanted = [int(i) for i in index.reshape(-1).tolist()]
    if any(not (-size if wrap else 0) <= i < size for i in wanted):
        raise exc.IndexingError(f"{what}: index {wanted} out of range for a dim of size {size}",
                                location=user_location(), hint=f"index with 0 .. {size - 1} (torch refuses it too)")
    wanted = [i % size for i in wanted]
    if index.dim() == 0 or len(wanted) == 1:
        return pick_lanes(tracer, value, dim, UNIT, wanted[0])
    step = wanted[1] - wanted[0]
    if all(b - a == step for a, b in zip(wanted, wanted[1:])):  # a progression: start + step * p
        return _moved(tracer, value, dim, len(wanted), lambda p: apply_elementwise(
            tracer, "add", apply_elementwise(tracer, "mul", p, step), wanted[0]))

    def chosen(lanes: Any) -> Any:  # lane p takes wanted[p]: a chain of selects on p
        picked: Any = apply_elementwise(tracer, "mul", lanes, 0)
        for p, source in enumerate(wanted):
            picked = apply_elementwise(tracer, "where", apply_elementwise(tracer, "eq", lanes, p), source, picked)
        return picked
    return _moved(tracer, value, dim, len(wanted), chosen)


# -- torch.tensor_split ---------------------------------------------------------------------------
def _tensor_split_dims(value: Any, indices_or_sections: Any, dim: int = 0) -> list[int]:
    return _dims(value, dim, "torch.tensor_split")


def _tensor_split_trace(tracer: Tracer, value: Any, indices_or_sections: Any, dim: int = 0) -> tuple[TileValue, ...]:
    value = only_tile_value("torch.tensor_split", value)
    indices_or_sections = _known(tracer, indices_or_sections, "torch.tensor_split")
    position = _tensor_split_dims(value, indices_or_sections, dim)[0]
    size = whole_extent(tracer, value, position, "torch.tensor_split", exc.UnsupportedSplitOperation)
    if isinstance(indices_or_sections, int) and not isinstance(indices_or_sections, bool):
        sections = indices_or_sections
        if sections < 1:
            raise exc.ShapeMismatchError(f"torch.tensor_split into {sections} sections", location=user_location(),
                                         hint="torch asks for at least one section too")
        # torch's sections: the first `size % sections` hold one more element
        lengths = [size // sections + (k < size % sections) for k in range(sections)]
        bounds = [sum(lengths[:k]) for k in range(sections + 1)]
    elif isinstance(indices_or_sections, (list, tuple)) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in indices_or_sections):
        cuts = [min(max(i + size if i < 0 else i, 0), size) for i in indices_or_sections]
        bounds = [0, *cuts, size]
    else:
        raise exc.UnsupportedOperationError(
            f"torch.tensor_split by {indices_or_sections!r}: inside a tile loop it takes an int or a list of ints",
            location=user_location(), hint="pass Python ints")
    pieces = []
    for start, stop in zip(bounds, bounds[1:]):  # a piece may be empty (more pieces than lanes), as torch's
        pieces.append(slice_dim(tracer, value, position, slice(start, max(start, stop))))
    return tuple(pieces)


# -- Tensor.narrow / Tensor.select ----------------------------------------------------------------
def _one_dim(value: Any, dim: int, *rest: Any) -> list[int]:
    return _dims(value, dim, "Tensor.narrow / Tensor.select")


def _narrow_trace(tracer: Tracer, value: Any, dim: int, start: Any, length: Any) -> TileValue:
    value = only_tile_value("Tensor.narrow", value)
    position = _one_dim(value, dim)[0]
    begin, count = known_int(tracer, start, "Tensor.narrow"), known_int(tracer, length, "Tensor.narrow")
    size = whole_extent(tracer, value, position, "Tensor.narrow")
    first = begin + size if begin < 0 else begin  # torch counts a negative start from the end
    if not (0 <= first <= size and 0 <= count <= size - first):
        raise exc.IndexingError(f"Tensor.narrow(dim={dim}, start={begin}, length={count}) of a dim of size {size}",
                                location=user_location(),
                                hint=f"start in [-{size}, {size}] and start + length <= {size} (torch refuses it too)")
    return slice_dim(tracer, value, position, slice(first, first + count))


def _select_trace(tracer: Tracer, value: Any, dim: int, index: Any) -> TileValue:
    value = only_tile_value("Tensor.select", value)
    return slice_dim(tracer, value, _one_dim(value, dim)[0], known_int(tracer, index, "Tensor.select"))


flip_p = defined_primitive("flip", _eager_on_whole_dims(_flip_eager, "torch.flip", _flip_dims), _flip_trace,
                           torch_functions=(torch.flip, T.flip))
roll_p = defined_primitive("roll", _eager_on_whole_dims(torch.roll, "torch.roll", _roll_dims), _roll_trace,
                           torch_functions=(torch.roll, T.roll))
repeat_p = defined_primitive("repeat", _eager_on_whole_dims(T.repeat, "Tensor.repeat", _repeat_dims), _repeat_trace,
                             torch_functions=(T.repeat,))
tile_p = defined_primitive("torch_tile", _eager_on_whole_dims(_tile_eager, "torch.tile", _tile_dims), _tile_trace,
                           torch_functions=(torch.tile, T.tile))
index_select_p = defined_primitive(
    "index_select", _eager_on_whole_dims(torch.index_select, "torch.index_select", _index_select_dims),
    _index_select_trace, torch_functions=(torch.index_select, T.index_select))
narrow_p = defined_primitive("narrow", _eager_on_whole_dims(torch.narrow, "Tensor.narrow", _one_dim), _narrow_trace,
                             torch_functions=(torch.narrow, T.narrow))
select_p = defined_primitive("select", _eager_on_whole_dims(torch.select, "Tensor.select", _one_dim), _select_trace,
                             torch_functions=(torch.select, T.select))
tensor_split_p = defined_primitive(
    "tensor_split", _eager_on_whole_dims(torch.tensor_split, "torch.tensor_split", _tensor_split_dims,
                                         exc.UnsupportedSplitOperation),
    _tensor_split_trace, torch_functions=(torch.tensor_split, T.tensor_split))
