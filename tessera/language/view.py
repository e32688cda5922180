"""Casts and views of tile values: `.to(dtype)` and friends, `v[:, None]`, `unsqueeze squeeze
permute transpose t expand`; and views of tensor arguments (`t.reshape(m, k)`).

A view of a tile value only renames its axes (unit axes come and go, axes are reordered or
broadcast); a view of a tensor argument is pointer metadata (trace/views.py).
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import UNIT, Op
from tessera.ir.primitive import torch_primitive
from tessera.language.operands import check_dtype
from tessera.location import user_location
from tessera.trace.proxy import TensorProxy, TileValue
from tessera.trace.tracer import Tracer
from tessera.trace.views import reshape_view

T = torch.Tensor


def normalized_dims(value: TileValue, dim: Any) -> list[int]:
    """The dims `dim` (None: all, an int, or a list) names, non-negative and sorted."""
    if dim is None:
        return list(range(value.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted(d % value.dim() for d in dims)


def cast(tracer: Tracer, value: TileValue, dtype: torch.dtype) -> TileValue:
    check_dtype(dtype, f"the conversion .to({dtype})")
    if value.dtype == dtype:
        return value
    return tracer.emit(Op.CAST, [value.node], value.axes, dtype)


@torch_primitive("to", T.to)
def to_p(tracer: Tracer, value: TileValue, *args: Any, **kwargs: Any) -> TileValue:
    dtype = kwargs.get("dtype")
    for arg in args:
        if isinstance(arg, torch.dtype):
            dtype = arg
    return value if dtype is None else cast(tracer, value, dtype)


def _cast_rule(dtype: torch.dtype) -> Any:
    def rule(tracer: Tracer, value: TileValue, **_: Any) -> TileValue:
        return cast(tracer, value, dtype)
    return rule


for _method, _dtype in (("float", torch.float32), ("half", torch.float16), ("bfloat16", torch.bfloat16),
                        ("int", torch.int32), ("long", torch.int64), ("bool", torch.bool), ("double", torch.float64)):
    torch_primitive(_method, getattr(T, _method))(_cast_rule(_dtype))


@torch_primitive("type_as", T.type_as)
def type_as_p(tracer: Tracer, value: TileValue, other: Any) -> TileValue:
    return cast(tracer, value, other.dtype)


# -- views ------------------------------------------------------------------------------------
def view_axes(tracer: Tracer, value: TileValue, axes: tuple, what: str) -> TileValue:
    return tracer.emit(Op.VIEW, [value.node], axes, value.dtype, what=what)


def subscript_value(tracer: Tracer, value: TileValue, index: Any) -> TileValue:
    """`value[:, None]` style views: `:` keeps a dim, `None` adds one, `...` fills."""
    items = list(index) if isinstance(index, tuple) else [index]
    if Ellipsis in items:
        spot = items.index(Ellipsis)
        explicit = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (value.dim() - explicit)
    axes, source = [], list(value.axes)
    for item in items:
        if item is None:
            axes.append(UNIT)
        elif isinstance(item, slice) and item == slice(None):
            if not source:
                raise exc.IndexingError("too many indices for a tile value", location=user_location())
            axes.append(source.pop(0))
        else:
            raise exc.IndexingError(
                f"indexing a tile value with {item!r} is not supported", location=user_location(),
                hint="index the tensor in memory instead (x[tile, i]), or use `:` and None on tile values")
    axes.extend(source)
    return view_axes(tracer, value, tuple(axes), "index")



@torch_primitive("unsqueeze", torch.unsqueeze, T.unsqueeze)
def unsqueeze_p(tracer: Tracer, value: TileValue, dim: int) -> TileValue:
    axes = list(value.axes)
    axes.insert(dim % (len(axes) + 1), UNIT)
    return view_axes(tracer, value, tuple(axes), "unsqueeze")


@torch_primitive("squeeze", torch.squeeze, T.squeeze)
def squeeze_p(tracer: Tracer, value: TileValue, dim: Any = None) -> TileValue:
    dims = normalized_dims(value, dim)
    axes = tuple(a for i, a in enumerate(value.axes) if not (i in dims and a is UNIT))
    return view_axes(tracer, value, axes, "squeeze")


def permute(tracer: Tracer, value: TileValue, *dims: Any) -> TileValue:
    order = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
    order = [d % value.dim() for d in order]
    return tracer.emit(Op.PERMUTE, [value.node], tuple(value.axes[d] for d in order), value.dtype, order=order)


permute_p = torch_primitive("permute", torch.permute, T.permute)(permute)


@torch_primitive("transpose", torch.transpose, T.transpose)
def transpose_p(tracer: Tracer, value: TileValue, dim0: int, dim1: int) -> TileValue:
    order = list(range(value.dim()))
    a, b = dim0 % value.dim(), dim1 % value.dim()
    order[a], order[b] = order[b], order[a]
    return permute(tracer, value, order)


@torch_primitive("t", T.t)
def t_p(tracer: Tracer, value: TileValue) -> TileValue:
    return permute(tracer, value, [1, 0] if value.dim() == 2 else [0])


@torch_primitive("expand", T.expand, T.expand_as, torch.broadcast_to)
def expand_p(tracer: Tracer, value: TileValue, *sizes: Any) -> TileValue:
    target = sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], (int,)) else sizes
    if isinstance(target, TileValue):
        axes = tracer.broadcast([value.axes, target.axes], "expand")
    else:
        raise exc.UnsupportedOperationError("expand to explicit sizes; use expand_as(other)", location=user_location())
    return tracer.emit(Op.BROADCAST, [value.node], axes, value.dtype)


@torch_primitive("reshape", T.reshape, T.view)
def reshape_p(tracer: Tracer, tensor: Any, *shape: Any) -> TensorProxy:
    if not isinstance(tensor, TensorProxy):
        raise exc.UnsupportedOperationError(
            "reshape of a tile value inside a compiled tile loop", location=user_location(),
            hint="index with None / unsqueeze / squeeze to add or drop unit dims, or reshape the tensor argument")
    return reshape_view(tracer, tensor, shape)
