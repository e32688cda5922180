"""Reductions (`sum mean amax amin max min argmax argmin`), softmax, casts and views of tiles.

A reduction over an axis whose block may hold lanes past the extent fills those lanes with the
reduction's identity first, so padding never leaks into results.
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.backends.triton.rules import register_triton
from tessera.location import user_location
from tessera.ir.graph import UNIT
from tessera.language.elementwise import apply_elementwise
from tessera.trace.proxy import TileValue, register_torch
from tessera.trace.tracer import Tracer, current_tracer

T = torch.Tensor
# reduction -> Triton function
REDUCTION_FUNCTIONS = {"sum": "tl.sum", "amax": "tl.max", "amin": "tl.min", "argmax": "tl.argmax",
                       "argmin": "tl.argmin"}


def reduction_identity(fn: str, dtype: torch.dtype) -> str:
    """The value masked lanes take so they never win (a Triton expression of `dtype`'s kind)."""
    if fn == "sum":
        return "0"
    largest = fn in ("amin", "argmin")
    if dtype.is_floating_point:
        return "float('inf')" if largest else "float('-inf')"
    if dtype == torch.bool:
        return "1" if largest else "0"
    info = torch.iinfo(dtype)
    return str(info.max if largest else info.min)


def _dims(value: TileValue, dim: Any) -> list[int]:
    if dim is None:
        return list(range(value.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted(d % value.dim() for d in dims)


def reduce(tracer: Tracer, kind: str, value: TileValue, dim: Any, keepdim: bool,
           dtype: torch.dtype | None = None) -> TileValue:
    if not isinstance(value, TileValue):
        raise exc.UnsupportedOperationError(f"{kind} of a non-tile value", location=user_location())
    result = value
    if kind == "sum" and dtype is None and not value.dtype.is_floating_point:
        dtype = torch.int64 if value.dtype != torch.bool else torch.int64
    for d in reversed(_dims(value, dim)):
        axes = list(result.axes)
        out_axes = axes[:d] + ([UNIT] if keepdim else []) + axes[d + 1:]
        if kind in ("argmax", "argmin"):
            out_dtype = torch.int64
        else:
            out_dtype = dtype or result.dtype
        result = tracer.emit("reduce", [result.node], tuple(out_axes), out_dtype, fn=kind, dim=d,
                             keepdim=keepdim, axis=axes[d])
    return result


def _reduction_handler(kind: str) -> Any:
    def handler(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None, out: Any = None) -> Any:
        return reduce(tracer, kind, value, dim, keepdim, dtype)
    return handler


register_torch(torch.sum, T.sum)(_reduction_handler("sum"))
register_torch(torch.amax, T.amax)(_reduction_handler("amax"))
register_torch(torch.amin, T.amin)(_reduction_handler("amin"))
register_torch(torch.argmax, T.argmax)(_reduction_handler("argmax"))
register_torch(torch.argmin, T.argmin)(_reduction_handler("argmin"))


@register_torch(torch.mean, T.mean)
def _mean_trace(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None) -> TileValue:
    total = reduce(tracer, "sum", value, dim, keepdim, dtype)
    count: Any = 1
    for d in _dims(value, dim):
        count = count * value.axes[d].end if value.axes[d] is not UNIT else count
    # the extent of a tile is min(block, remaining); a whole dimension's extent is its size
    for d in _dims(value, dim):
        axis = value.axes[d]
        if axis is not UNIT and axis.name.startswith("t"):
            raise exc.UnsupportedOperationError(
                "mean over a tile dimension (its element count varies per tile)", location=user_location(),
                hint="sum the tile and divide by the true count")
    return apply_elementwise(tracer, "truediv", total, count)


def _max_min(kind: str) -> Any:
    def handler(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> Any:
        if isinstance(dim, TileValue) or not isinstance(dim, (int, type(None))):
            return apply_elementwise(tracer, "maximum" if kind == "max" else "minimum", value, dim)
        if dim is None:
            return reduce(tracer, "amax" if kind == "max" else "amin", value, None, False)
        values = reduce(tracer, "amax" if kind == "max" else "amin", value, dim, keepdim)
        indices = reduce(tracer, "argmax" if kind == "max" else "argmin", value, dim, keepdim)
        return torch.return_types.max((values, indices)) if kind == "max" else torch.return_types.min((values, indices))
    return handler


register_torch(torch.max, T.max)(_max_min("max"))
register_torch(torch.min, T.min)(_max_min("min"))


def _softmax(tracer: Tracer, value: TileValue, dim: int, log: bool, dtype: torch.dtype | None) -> TileValue:
    compute = value if dtype is None else cast(tracer, value, dtype)
    if compute.dtype in (torch.float16, torch.bfloat16):
        compute = cast(tracer, compute, torch.float32)
    shifted = apply_elementwise(tracer, "sub", compute, reduce(tracer, "amax", compute, dim, True))
    exps = apply_elementwise(tracer, "exp", shifted)
    total = reduce(tracer, "sum", exps, dim, True)
    if log:
        result = apply_elementwise(tracer, "sub", shifted, apply_elementwise(tracer, "log", total))
    else:
        result = apply_elementwise(tracer, "truediv", exps, total)
    return cast(tracer, result, dtype or value.dtype)


@register_torch(torch.softmax, T.softmax, torch.nn.functional.softmax)
def _softmax_trace(tracer: Tracer, value: TileValue, dim: int, dtype: torch.dtype | None = None, **_: Any) -> TileValue:
    return _softmax(tracer, value, dim, False, dtype)


@register_torch(torch.log_softmax, T.log_softmax, torch.nn.functional.log_softmax)
def _log_softmax_trace(tracer: Tracer, value: TileValue, dim: int, dtype: torch.dtype | None = None,
                       **_: Any) -> TileValue:
    return _softmax(tracer, value, dim, True, dtype)


def cast(tracer: Tracer, value: TileValue, dtype: torch.dtype) -> TileValue:
    if value.dtype == dtype:
        return value
    return tracer.emit("cast", [value.node], value.axes, dtype)


@register_torch(T.to)
def _to_trace(tracer: Tracer, value: TileValue, *args: Any, **kwargs: Any) -> TileValue:
    dtype = kwargs.get("dtype")
    for arg in args:
        if isinstance(arg, torch.dtype):
            dtype = arg
    return value if dtype is None else cast(tracer, value, dtype)


for _method, _dtype in (("float", torch.float32), ("half", torch.float16), ("bfloat16", torch.bfloat16),
                        ("int", torch.int32), ("long", torch.int64), ("bool", torch.bool), ("double", torch.float64)):
    register_torch(getattr(T, _method))(lambda tracer, value, _d=_dtype, **_: cast(tracer, value, _d))


@register_torch(T.type_as)
def _type_as_trace(tracer: Tracer, value: TileValue, other: Any) -> TileValue:
    return cast(tracer, value, other.dtype)


# -- views ------------------------------------------------------------------------------------
def view_axes(tracer: Tracer, value: TileValue, axes: tuple, what: str) -> TileValue:
    return tracer.emit("view", [value.node], axes, value.dtype, order=None, what=what)


def subscript_value(value: TileValue, index: Any) -> TileValue:
    """`value[:, None]` style views: `:` keeps a dim, `None` adds one, `...` fills."""
    tracer = current_tracer()
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


TileValue.__getitem__ = subscript_value  # type: ignore[attr-defined]


@register_torch(torch.unsqueeze, T.unsqueeze)
def _unsqueeze_trace(tracer: Tracer, value: TileValue, dim: int) -> TileValue:
    axes = list(value.axes)
    axes.insert(dim % (len(axes) + 1), UNIT)
    return view_axes(tracer, value, tuple(axes), "unsqueeze")


@register_torch(torch.squeeze, T.squeeze)
def _squeeze_trace(tracer: Tracer, value: TileValue, dim: Any = None) -> TileValue:
    dims = _dims(value, dim)
    axes = tuple(a for i, a in enumerate(value.axes) if not (i in dims and a is UNIT))
    return view_axes(tracer, value, axes, "squeeze")


@register_torch(torch.permute, T.permute)
def _permute_trace(tracer: Tracer, value: TileValue, *dims: Any) -> TileValue:
    order = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
    order = [d % value.dim() for d in order]
    return tracer.emit("permute", [value.node], tuple(value.axes[d] for d in order), value.dtype, order=order)


@register_torch(torch.transpose, T.transpose)
def _transpose_trace(tracer: Tracer, value: TileValue, dim0: int, dim1: int) -> TileValue:
    order = list(range(value.dim()))
    a, b = dim0 % value.dim(), dim1 % value.dim()
    order[a], order[b] = order[b], order[a]
    return _permute_trace(tracer, value, order)


@register_torch(T.t)
def _t_trace(tracer: Tracer, value: TileValue) -> TileValue:
    return _transpose_trace(tracer, value, 0, 1)


@register_torch(T.expand, T.expand_as, torch.broadcast_to)
def _expand_trace(tracer: Tracer, value: TileValue, *sizes: Any) -> TileValue:
    target = sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], (int,)) else sizes
    if isinstance(target, TileValue):
        axes = tracer.broadcast([value.axes, target.axes], "expand")
    else:
        raise exc.UnsupportedOperationError("expand to explicit sizes; use expand_as(other)", location=user_location())
    return tracer.emit("broadcast", [value.node], axes, value.dtype)


@register_triton("reduce")
def _reduce_triton(emitter: Any, node: Any) -> str:
    function = REDUCTION_FUNCTIONS[node.params["fn"]]
    source = node.inputs[0]
    identity = reduction_identity(node.params["fn"], source.dtype)
    operand = emitter.name_of(source)
    accumulate = sum_accumulator_dtype(node)
    if accumulate is not None and accumulate != source.dtype:
        # 16-bit sums accumulate in fp32 and integer sums in int64, as PyTorch does
        operand = emitter.cast(operand, source.dtype, accumulate)
    axis = node.params["axis"]
    if axis.needs_mask:
        mask = emitter.axis_mask(axis, source.shape)
        operand = f"tl.where({mask}, {operand}, {identity})"
    dim = node.params["dim"]
    keep = ", keep_dims=True" if node.params["keepdim"] else ""
    text = f"{function}({operand}, axis={dim}{keep})"
    return emitter.cast(text, source.dtype if node.params["fn"] not in ("sum",) else node.dtype, node.dtype) \
        if node.params["fn"] not in ("argmax", "argmin") else f"{text}.to(tl.int64)"


def sum_accumulator_dtype(node: Any) -> torch.dtype | None:
    """The dtype a sum adds in (None for other reductions)."""
    if node.params["fn"] != "sum":
        return None
    if node.inputs[0].dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return node.dtype


@register_triton("cast")
def _cast_triton(emitter: Any, node: Any) -> str:
    return emitter.cast(emitter.name_of(node.inputs[0]), node.inputs[0].dtype, node.dtype)


@register_triton("view")
def _view_triton(emitter: Any, node: Any) -> str:
    return emitter.reshape(emitter.name_of(node.inputs[0]), node.inputs[0].shape, node.shape)


@register_triton("permute")
def _permute_triton(emitter: Any, node: Any) -> str:
    order = node.params["order"]
    name = emitter.name_of(node.inputs[0])
    return f"tl.trans({name})" if order == [1, 0] else f"tl.permute({name}, {tuple(order)})"


@register_triton("broadcast")
def _broadcast_triton(emitter: Any, node: Any) -> str:
    return f"tl.broadcast_to({emitter.name_of(node.inputs[0])}, {emitter.block_shape(node.shape)})"
