"""Reductions (`sum mean amax amin max min argmax argmin`) and softmax on tile values.

Each is a primitive standing for its torch functions. A reduction records an `Op.REDUCE` node
with the dtype it accumulates in; backends fill lanes past the extent with the reduction's
identity first, so padding never leaks into results.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from tessera import exc
from tessera.ir.graph import UNIT, Op
from tessera.ir.primitive import torch_primitive
from tessera.language.eager_lanes import reduction_identity
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch
from tessera.language.view import cast, normalized_dims
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor
REDUCTIONS = ("sum", "amax", "amin", "argmax", "argmin")
"""The reduction functions an `Op.REDUCE` node names (mean, max, min and softmax build on them)."""


def _accumulator(fn: str, source: torch.dtype, result: torch.dtype) -> torch.dtype:
    """The dtype a reduction combines in: 16-bit float sums in fp32 and integer sums in int64, as
    PyTorch does; the others compare in the source dtype."""
    if fn != "sum":
        return source
    if source in (torch.float16, torch.bfloat16):
        return torch.float32
    return result


def record_reduction(tracer: Tracer, kind: str, value: TileValue, dim: Any, keepdim: bool,
           dtype: torch.dtype | None = None) -> TileValue:
    if not isinstance(value, TileValue):
        raise exc.UnsupportedOperationError(f"{kind} of a non-tile value", location=user_location())
    result = value
    if kind == "sum" and dtype is None and not value.dtype.is_floating_point:
        dtype = torch.int64 if value.dtype != torch.bool else torch.int64
    for d in reversed(normalized_dims(value, dim)):
        if kind in _EXTREMES:
            _refuse_empty_dim(tracer, kind, result, d)
        result = _outside_jagged_ends(tracer, kind, result, d)
        axes = list(result.axes)
        out_axes = axes[:d] + ([UNIT] if keepdim else []) + axes[d + 1:]
        if kind in ("argmax", "argmin"):
            out_dtype = torch.int64
        else:
            out_dtype = dtype or result.dtype
        result = tracer.emit(Op.REDUCE, [result.node], tuple(out_axes), out_dtype, fn=kind, dim=d,
                             keepdim=keepdim, axis=axes[d], accumulate=_accumulator(kind, result.dtype, out_dtype))
    return result


_EXTREMES = frozenset({"amax", "amin", "argmax", "argmin"})


def _refuse_empty_dim(tracer: Tracer, kind: str, value: TileValue, dim: int) -> None:
    """torch refuses an extreme over a dim of no elements (an empty tensor_split piece, a size-0
    dim read whole); the masked reduction gave -inf. A one-lane block holds sizes 0 and 1, so
    which one this variant was traced for is guarded."""
    axis = tracer.canonical_axis(value.axes[dim])
    if axis is UNIT or axis.is_tile or axis.block != 1:
        return
    extent = tracer.symbols.canonical(sympy.sympify(axis.end))
    if extent.is_Integer:
        empty = int(extent) == 0
    elif extent.free_symbols <= set(tracer.symbols.values):
        empty = tracer.symbols.evaluate(extent) == 0
        tracer.symbols.guard(sympy.Eq(extent, 0) if empty else sympy.Ge(extent, 1),
                             f"dimension {extent} is {'' if empty else 'not '}empty, reduced by {kind}")
    else:
        return
    if empty:
        raise exc.TorchOperationError(f"torch.{kind} over dim {dim}, which has no elements: torch refuses it",
                                      location=user_location(), hint="reduce a dim of at least one element")


def _outside_jagged_ends(tracer: Tracer, kind: str, value: TileValue, dim: int) -> TileValue:
    """A reduction over an hl.jagged_tile axis: lanes past their end take the identity."""
    if tracer.canonical_axis(value.axes[dim]) not in tracer.jagged_ends:
        return value
    inside = tracer.jagged_mask(tuple(map(tracer.canonical_axis, value.axes)), f"a {kind} reduction")
    return apply_elementwise(tracer, "where", inside, value, reduction_identity(kind, value.dtype))


def _asked(kind: str, value: Any, **kwargs: Any) -> None:
    """Refuse (located) what torch refuses: argmax of bools, mean of ints, softmax of ints."""
    if not isinstance(value, TileValue):
        raise exc.UnsupportedOperationError(f"torch.{kind} of {type(value).__name__} {value!r}: only tile values "
                                            "reduce inside a tile loop", location=user_location())
    ask_torch(f"torch.{kind}", getattr(torch, kind), (value,), {k: v for k, v in kwargs.items() if v is not None})


def _reduction_handler(kind: str) -> Any:
    def handler(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None, out: Any = None) -> Any:
        _asked(kind, value, dim=dim, keepdim=keepdim if dim is not None else None, dtype=dtype)
        return record_reduction(tracer, kind, value, dim, keepdim, dtype)
    return handler


sum_p = torch_primitive("sum", torch.sum, T.sum)(_reduction_handler("sum"))
amax_p = torch_primitive("amax", torch.amax, T.amax)(_reduction_handler("amax"))
amin_p = torch_primitive("amin", torch.amin, T.amin)(_reduction_handler("amin"))
argmax_p = torch_primitive("argmax", torch.argmax, T.argmax)(_reduction_handler("argmax"))
argmin_p = torch_primitive("argmin", torch.argmin, T.argmin)(_reduction_handler("argmin"))


@torch_primitive("mean", torch.mean, T.mean)
def mean_p(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None) -> TileValue:
    _asked("mean", value, dim=dim, keepdim=keepdim if dim is not None else None, dtype=dtype)
    result_dtype = dtype or value.dtype
    # torch divides the fp32 sum of 16-bit values before rounding: rounding the sum first overflows
    # (fp16 [65504, 21840] has a mean but no sum)
    wide = torch.float32 if result_dtype in (torch.float16, torch.bfloat16) else result_dtype
    total = record_reduction(tracer, "sum", value, dim, keepdim, wide)
    count = element_count(tracer, value, dim, wide if wide.is_floating_point else torch.float32)
    return cast(tracer, apply_elementwise(tracer, "truediv", total, count), result_dtype)


def element_count(tracer: Tracer, value: TileValue, dim: Any, dtype: torch.dtype) -> Any:
    """How many elements a reduction of `value` over `dim` combines: a number (or size) for whole
    dims; over a tile, a 0-d value of `dtype` counted per program."""
    count: Any = 1
    tiles = []
    for d in normalized_dims(value, dim):
        axis = value.axes[d]
        if axis.is_tile:
            tiles.append(axis)
        elif axis is not UNIT:
            count = count * axis.end
    if tiles:
        # a tile's extent is min(block, remaining), known per program: count its valid lanes (the
        # masked sum of ones), as eager mode's slice of the tail tile holds only those
        ones = tracer.emit(Op.FULL, [1], tuple(tiles), dtype)
        count = apply_elementwise(tracer, "mul", record_reduction(tracer, "sum", ones, None, False), count)
    return count


def _max_min(kind: str) -> Any:
    def handler(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> Any:
        if isinstance(dim, TileValue) or not isinstance(dim, (int, type(None))):
            return apply_elementwise(tracer, "maximum" if kind == "max" else "minimum", value, dim)
        if isinstance(dim, TileValue) or not isinstance(dim, (int, type(None))):
            ask_torch(f"torch.{kind}", getattr(torch, kind), (value, dim), {})
            return apply_elementwise(tracer, "maximum" if kind == "max" else "minimum", value, dim)
        _asked(kind, value, dim=dim, keepdim=keepdim if dim is not None else None)
        if dim is None:
            return record_reduction(tracer, "amax" if kind == "max" else "amin", value, None, False)
        values = record_reduction(tracer, "amax" if kind == "max" else "amin", value, dim, keepdim)
        indices = record_reduction(tracer, "argmax" if kind == "max" else "argmin", value, dim, keepdim)
        return torch.return_types.max((values, indices)) if kind == "max" else torch.return_types.min((values, indices))
    return handler


max_p = torch_primitive("max", torch.max, T.max)(_max_min("max"))
min_p = torch_primitive("min", torch.min, T.min)(_max_min("min"))


def _softmax(tracer: Tracer, value: TileValue, dim: int, log: bool, dtype: torch.dtype | None) -> TileValue:
    _asked("log_softmax" if log else "softmax", value, dim=dim, dtype=dtype)
    compute = value if dtype is None else cast(tracer, value, dtype)
    if compute.dtype in (torch.float16, torch.bfloat16):
        compute = cast(tracer, compute, torch.float32)
    shifted = apply_elementwise(tracer, "sub", compute, record_reduction(tracer, "amax", compute, dim, True))
    exps = apply_elementwise(tracer, "exp", shifted)
    total = record_reduction(tracer, "sum", exps, dim, True)
    if log:
        result = apply_elementwise(tracer, "sub", shifted, apply_elementwise(tracer, "log", total))
    else:
        result = apply_elementwise(tracer, "truediv", exps, total)
    return cast(tracer, result, dtype or value.dtype)


@torch_primitive("softmax", torch.softmax, T.softmax, torch.nn.functional.softmax, torch.special.softmax)
def softmax_p(tracer: Tracer, value: TileValue, dim: int, dtype: torch.dtype | None = None, **_: Any) -> TileValue:
    return _softmax(tracer, value, dim, False, dtype)


@torch_primitive("log_softmax", torch.log_softmax, T.log_softmax, torch.nn.functional.log_softmax,
                 torch.special.log_softmax)
def log_softmax_p(tracer: Tracer, value: TileValue, dim: int, dtype: torch.dtype | None = None,
                       **_: Any) -> TileValue:
    return _softmax(tracer, value, dim, True, dtype)


