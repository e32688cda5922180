"""Putting tile values together and apart: `hl.join`, `hl.split`, `torch.stack` and `torch.cat`.

Registers hold power-of-two blocks, so these work where the result is one: `hl.join(a, b)` adds
a last dimension of size 2, `hl.split(v)` takes one apart, `torch.stack` joins two values (more:
a new whole dim whose lanes select among them) and `torch.cat` concatenates two along a dimension they hold whole (not a tile, whose tail would
leave padding in the middle). Anything else is refused, located, with a way around it.

>>> lo, hi = hl.split(pairs)                                          # doctest: +SKIP
>>> both = torch.stack([a, b], dim=0)                                 # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import UNIT, Op
from tessera.ir.primitive import Primitive, defined_primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.slicing import cat_values
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def join(tensor0: Any, tensor1: Any) -> Any:
    """The two values (broadcast together) along a new last dimension of size 2.

    >>> pairs = hl.join(even, odd)                                    # doctest: +SKIP
    """
    return join_p.bind(tensor0, tensor1)


def split(tensor: Any) -> tuple[Any, Any]:
    """`(v[..., 0], v[..., 1])` of a value whose last dimension has size 2.

    >>> lo, hi = hl.split(acc.reshape([tile_m, 2, n // 2]).permute(0, 2, 1))   # doctest: +SKIP
    """
    return split_p.bind(tensor)


def _pair_eager(tensor0: torch.Tensor, tensor1: torch.Tensor) -> torch.Tensor:
    return torch.stack(torch.broadcast_tensors(tensor0, tensor1), dim=-1)


def _split_eager(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if tensor.dim() == 0 or tensor.size(-1) != 2:
        raise exc.ShapeMismatchError(f"hl.split of a value of shape {list(tensor.shape)}: its last dimension "
                                     "must have size 2", location=user_location(), hint="use hl.join's results")
    first, second = torch.unbind(tensor, dim=-1)
    return first, second


def _tile_values(values: Any, what: str) -> list[TileValue]:
    for value in values:
        if not isinstance(value, TileValue):
            raise exc.UnsupportedOperationError(f"{what} of {type(value).__name__} {value!r}: only tile values "
                                                "are joined inside a tile loop", location=user_location(),
                                                hint="make it a tile first, e.g. hl.full([tile], value)")
    return list(values)


def _joined(tracer: Tracer, first: TileValue, second: TileValue, what: str) -> TileValue:
    """One JOIN node: the operands broadcast and promoted together, a new last axis of 2."""
    shape = tracer.broadcast([first.axes, second.axes], what)
    dtype = torch.promote_types(first.dtype, second.dtype)
    return tracer.emit(Op.JOIN, [first.node, second.node], (*shape, tracer.full_axis(2)), dtype)


def _join_trace(tracer: Tracer, tensor0: Any, tensor1: Any) -> TileValue:
    first, second = _tile_values((tensor0, tensor1), "hl.join")
    if first.dtype != second.dtype:
        raise exc.DtypeError(f"hl.join of {first.dtype} and {second.dtype}: both must have one dtype",
                             location=user_location(), hint="convert one with .to(dtype)")
    return _joined(tracer, first, second, "hl.join")


def _split_trace(tracer: Tracer, tensor: Any) -> tuple[TileValue, TileValue]:
    (value,) = _tile_values((tensor,), "hl.split")
    if not value.axes or tracer.exact_extent(value.axes[-1], "hl.split") != 2:
        raise exc.ShapeMismatchError(f"hl.split of a value of shape {list(value.axes)}: its last dimension must "
                                     "have size 2", location=user_location(), hint="use hl.join's results")
    node = tracer.emit(Op.SPLIT, [value.node], value.axes[:-1], None, dtypes=(value.dtype, value.dtype)).node
    return tuple(tracer.emit(Op.ITEM, [node], value.axes[:-1], value.dtype, index=i) for i in range(2))  # type: ignore[return-value]


def _stack_trace(tracer: Tracer, tensors: Any, dim: int = 0, *, out: Any = None) -> TileValue:
    values = _tile_values(tensors, "torch.stack")
    rank = values[0].dim() + 1
    position = dim % rank if isinstance(dim, int) and -rank <= dim < rank else None
    if position is None:
        raise exc.IndexingError(f"torch.stack: dim={dim!r} for values of rank {rank - 1}", location=user_location())
    if len(values) == 1:
        return _move_last(tracer, tracer.emit(Op.VIEW, [values[0].node], (*values[0].axes, UNIT), values[0].dtype,
                                              what="stack of one"), position)
    if len(values) != 2:
        return _move_last(tracer, _selected(tracer, values), position)
    return _move_last(tracer, _joined(tracer, values[0], values[1], "torch.stack"), position)


def _selected(tracer: Tracer, values: list[TileValue]) -> TileValue:
    """`torch.stack(values, dim=-1)` of any count: a new whole last dim of that size whose lane
    k selects values[k] (registers cannot join more than two values directly)."""
    shape = tracer.broadcast([v.axes for v in values], "torch.stack")
    axis = tracer.full_axis(len(values))
    lane = tracer.emit(Op.VIEW, [tracer.tile_index(axis).node], (UNIT,) * len(shape) + (axis,), torch.int32,
                       what="stack lanes")
    dtype = values[0].dtype
    for value in values[1:]:
        dtype = torch.promote_types(dtype, value.dtype)
    spread = [tracer.emit(Op.VIEW, [v.node], (*v.axes, UNIT), v.dtype, what="stack entry") for v in values]
    result = spread[-1]
    for k in range(len(values) - 2, -1, -1):
        result = apply_elementwise(tracer, "where", apply_elementwise(tracer, "eq", lane, k), spread[k], result)
    return result if result.dtype == dtype else tracer.emit(Op.CAST, [result.node], result.axes, dtype)


def _move_last(tracer: Tracer, value: TileValue, position: int) -> TileValue:
    rank = value.dim()
    if position == rank - 1:
        return value
    order = [*range(position), rank - 1, *range(position, rank - 1)]
    return tracer.emit(Op.PERMUTE, [value.node], tuple(value.axes[i] for i in order), value.dtype, order=tuple(order))


def _joins_halves(tracer: Tracer, values: list[TileValue], position: int) -> bool:
    """Two values whose dim is held whole in one power-of-two block of the same size: a join."""
    sizes = [tracer.exact_extent(tracer.canonical_axis(v.axes[position]), "torch.cat") for v in values]
    return len(values) == 2 and sizes[0] is not None and sizes[0] == sizes[1]


def _cat_trace(tracer: Tracer, tensors: Any, dim: int = 0, *, out: Any = None) -> TileValue:
    values = _tile_values(tensors, "torch.cat")
    if len(values) == 1:
        return values[0]
    rank = values[0].dim()
    if all(v.dim() == rank for v in values) and isinstance(dim, int) and -rank <= dim < rank \
            and not _joins_halves(tracer, values, dim % rank):
        return cat_values(tracer, list(values), dim % rank)  # lanes picked one by one (slicing.py)
    first, second = values[0], values[1] if len(values) == 2 else None
    if second is None or second.dim() != rank or not isinstance(dim, int) or not -rank <= dim < rank:
        raise exc.UnsupportedOperationError(
            f"torch.cat of {len(values)} tile values along dim={dim!r}: Tessera concatenates two values of one "
            "rank", location=user_location(), hint="concatenate pairs, or store the pieces separately")
    position = dim % rank
    axis, other = tracer.canonical_axis(first.axes[position]), tracer.canonical_axis(second.axes[position])
    size = axis.block
    if tracer.exact_extent(axis, "torch.cat") != size or tracer.exact_extent(other, "torch.cat") != size:
        raise exc.UnsupportedOperationError(
            f"torch.cat along dimension {position} ({axis.name}): only a dimension held whole, of one power-of-two "
            "size in both values, concatenates in registers (a tile's padding would land in the middle)",
            location=user_location(), hint="store the two pieces into the two halves of the destination instead")
    rest = [a for i, a in enumerate(first.axes) if i != position]
    rest_other = [a for i, a in enumerate(second.axes) if i != position]
    shape = list(tracer.broadcast([tuple(rest), tuple(rest_other)], "torch.cat"))
    shape.insert(position, tracer.full_axis(2 * size))
    dtype = torch.promote_types(first.dtype, second.dtype)
    return tracer.emit(Op.CAT, [first.node, second.node], tuple(shape), dtype, dim=position)


join_p = defined_primitive("join", _pair_eager, _join_trace)
split_p = defined_primitive("split", _split_eager, _split_trace)

stack_p = Primitive("stack", torch_functions=(torch.stack,))
stack_p.def_trace(_stack_trace)

cat_p = Primitive("cat", torch_functions=(torch.cat, torch.concat, torch.concatenate))
cat_p.def_trace(_cat_trace)


def _hstack_trace(tracer: Tracer, tensors: Any, *, out: Any = None) -> TileValue:
    """`torch.hstack`: cat along dim 1 (dim 0 for 1-D values), as torch."""
    values = _tile_values(tensors, "torch.hstack")
    return _cat_trace(tracer, values, 0 if values[0].dim() == 1 else 1)


def _column_stack_trace(tracer: Tracer, tensors: Any, *, out: Any = None) -> TileValue:
    """`torch.column_stack`: 1-D values become columns (a trailing unit dim), then cat along dim 1."""
    values = [tracer.emit(Op.VIEW, [value.node], value.axes + (UNIT,), value.dtype, what="column")
              if value.dim() == 1 else value for value in _tile_values(tensors, "torch.column_stack")]
    return _cat_trace(tracer, values, 1)


hstack_p = Primitive("hstack", torch_functions=(torch.hstack,))
hstack_p.def_trace(_hstack_trace)
column_stack_p = Primitive("column_stack", torch_functions=(torch.column_stack,))
column_stack_p.def_trace(_column_stack_trace)
