"""torch functions on tile values written with other primitives: `masked_fill tan sign isnan isinf
isfinite isposinf isneginf positive softplus F.layer_norm F.rms_norm`.

Each keeps torch's numerics where they are observable: `sign` is `(x > 0) - (x < 0)` (NaN and -0.0
give 0, as torch gives), `softplus` switches to `x` above `threshold / beta` as torch does, and the
norms compute 16-bit inputs in fp32 with the biased variance, rounding once at the end.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.nn.functional as F

from tessera import exc
from tessera.ir.primitive import torch_primitive
from tessera.language.elementwise import apply_elementwise, scalar_tensor_value
from tessera.language.operands import ask_torch
from tessera.language.reductions import record_reduction as reduce
from tessera.language.statistics import only_tile_value, variance
from tessera.language.view import cast
from tessera.location import user_location
from tessera.trace.proxy import AxisSize, TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


@torch_primitive("masked_fill", torch.masked_fill, T.masked_fill)
def masked_fill_p(tracer: Tracer, value: TileValue, mask: Any, fill: Any) -> TileValue:
    value = only_tile_value("torch.masked_fill", value)
    fill = scalar_tensor_value(tracer, fill)  # a 0-d tensor argument: its value, as eager reads it
    answer = ask_torch("torch.masked_fill", torch.masked_fill, (value, mask, fill), {})
    # torch converts the fill to the tensor's dtype first (-1.5 into int64 is -1); a select in a
    # wider dtype would round large int64 values
    if isinstance(fill, TileValue):
        fill = cast(tracer, fill, value.dtype)
    elif isinstance(fill, (bool, int, float)):
        fill = torch.tensor(fill).to(value.dtype).item()
    filled = apply_elementwise(tracer, "where", mask, fill, value)
    return filled if filled.dtype == answer.dtype else cast(tracer, filled, answer.dtype)


@torch_primitive("tan", torch.tan, T.tan)
def tan_p(tracer: Tracer, value: TileValue) -> TileValue:
    answer = ask_torch("torch.tan", torch.tan, (only_tile_value("torch.tan", value),), {})
    wide = cast(tracer, value, torch.float32) if value.dtype != torch.float64 else value
    ratio = apply_elementwise(tracer, "truediv", apply_elementwise(tracer, "sin", wide),
                              apply_elementwise(tracer, "cos", wide))
    return cast(tracer, ratio, answer.dtype)


@torch_primitive("sign", torch.sign, T.sign)
def sign_p(tracer: Tracer, value: TileValue) -> TileValue:
    answer = ask_torch("torch.sign", torch.sign, (only_tile_value("torch.sign", value),), {})
    if value.dtype == torch.bool:
        return value
    positive = cast(tracer, apply_elementwise(tracer, "gt", value, 0), answer.dtype)
    negative = cast(tracer, apply_elementwise(tracer, "lt", value, 0), answer.dtype)
    return apply_elementwise(tracer, "sub", positive, negative)


_SIGNED_INFINITY = {"isposinf": float("inf"), "isneginf": float("-inf")}


def _finiteness(kind: str) -> Any:
    def rule(tracer: Tracer, value: TileValue) -> TileValue:
        ask_torch(f"torch.{kind}", getattr(torch, kind), (only_tile_value(f"torch.{kind}", value),), {})
        if not value.dtype.is_floating_point:  # integers are never NaN or infinite
            nothing = apply_elementwise(tracer, "ne", value, value)
            return nothing if kind != "isfinite" else apply_elementwise(tracer, "eq", value, value)
        if kind in _SIGNED_INFINITY:
            return apply_elementwise(tracer, "eq", value, _SIGNED_INFINITY[kind])
        nan = apply_elementwise(tracer, "ne", value, value)
        infinite = apply_elementwise(tracer, "eq", apply_elementwise(tracer, "abs", value), float("inf"))
        if kind == "isnan":
            return nan
        if kind == "isinf":
            return infinite
        return apply_elementwise(tracer, "invert", apply_elementwise(tracer, "bitwise_or", nan, infinite))
    return rule


isnan_p = torch_primitive("isnan", torch.isnan, T.isnan)(_finiteness("isnan"))
isinf_p = torch_primitive("isinf", torch.isinf, T.isinf)(_finiteness("isinf"))
isfinite_p = torch_primitive("isfinite", torch.isfinite, T.isfinite)(_finiteness("isfinite"))
isposinf_p = torch_primitive("isposinf", torch.isposinf, T.isposinf)(_finiteness("isposinf"))
isneginf_p = torch_primitive("isneginf", torch.isneginf, T.isneginf)(_finiteness("isneginf"))


@torch_primitive("positive", torch.positive, T.positive)
def positive_p(tracer: Tracer, value: TileValue) -> TileValue:
    """`+v` is `v` (torch refuses bool, as here)."""
    ask_torch("torch.positive", torch.positive, (only_tile_value("torch.positive", value),), {})
    return value


@torch_primitive("softplus", F.softplus)
def softplus_p(tracer: Tracer, value: TileValue, beta: float = 1.0, threshold: float = 20.0) -> TileValue:
    answer = ask_torch("F.softplus", F.softplus, (only_tile_value("F.softplus", value),),
                       {"beta": beta, "threshold": threshold})
    wide = cast(tracer, value, torch.float32) if value.dtype != torch.float64 else value
    scaled = apply_elementwise(tracer, "mul", wide, beta)
    smooth = apply_elementwise(tracer, "truediv", apply_elementwise(
        tracer, "log1p", apply_elementwise(tracer, "exp", scaled)), beta)
    return cast(tracer, apply_elementwise(tracer, "where", apply_elementwise(tracer, "gt", scaled, threshold),
                                          wide, smooth), answer.dtype)


def _floating(kind: str, value: Any) -> TileValue:
    value = only_tile_value(kind, value)
    if not value.dtype.is_floating_point:
        raise exc.DtypeError(f"{kind} of a {str(value.dtype).replace('torch.', '')} tile value: torch normalizes "
                             "floating-point values only", location=user_location(),
                             hint="convert first: x.to(torch.float32)")
    return value


def _same_size(tracer: Tracer, axis: Any, size: Any) -> bool:
    """Whether whole dim `axis` has `size` elements: a host size naming it (`x.size(1)`) included,
    also where the dim is the unit axis (x.size(1) == 1: its end is 1, the size a symbol)."""
    if isinstance(size, AxisSize):
        return size.axis == axis
    end, size = tracer.symbols.canonical(sympy.sympify(axis.end)), tracer.symbols.canonical(sympy.sympify(size))
    if end == size:
        return True
    known = set(tracer.symbols.values)
    if not (end.free_symbols | size.free_symbols) <= known or tracer.symbols.evaluate(end) != tracer.symbols.evaluate(size):
        return False
    tracer.symbols.guard_equal(end, size, "a normalized dim's size")
    return True


def _normalized_dims(tracer: Tracer, kind: str, value: TileValue, shape: Any) -> list[int]:
    """The trailing dims `normalized_shape` names; each must be a whole dimension of that size."""
    sizes = [shape] if isinstance(shape, int) else list(shape)
    dims = list(range(value.dim() - len(sizes), value.dim()))
    for d, size in zip(dims, sizes):
        axis = value.axes[d]
        same = not axis.is_tile and _same_size(tracer, axis, size)
        if axis.is_tile or not same:
            raise exc.UnsupportedOperationError(
                f"{kind} over a dimension that is {'a tile' if axis.is_tile else 'not of that size'} "
                f"(normalized_shape={list(sizes)})", location=user_location(),
                hint="normalize over whole trailing dimensions read with `:` (x[tile, :]) and pass their sizes")
    return dims


def _affine(tracer: Tracer, normalized: TileValue, weight: Any, bias: Any) -> TileValue:
    if weight is not None:
        normalized = apply_elementwise(tracer, "mul", normalized, weight)
    if bias is not None:
        normalized = apply_elementwise(tracer, "add", normalized, bias)
    return normalized


@torch_primitive("layer_norm", F.layer_norm)
def layer_norm_p(tracer: Tracer, value: TileValue, normalized_shape: Any, weight: Any = None, bias: Any = None,
                 eps: float = 1e-5) -> TileValue:
    value = _floating("F.layer_norm", value)
    dims = _normalized_dims(tracer, "F.layer_norm", value, normalized_shape)
    wide = cast(tracer, value, torch.float32) if value.dtype != torch.float64 else value
    count = 1
    for d in dims:
        count = count * value.axes[d].end
    mean = reduce(tracer, "sum", apply_elementwise(tracer, "truediv", wide, count), dims, True)
    spread = variance(tracer, wide, dims, 0.0, True)
    scale = apply_elementwise(tracer, "rsqrt", apply_elementwise(tracer, "add", spread, eps))
    normalized = apply_elementwise(tracer, "mul", apply_elementwise(tracer, "sub", wide, mean), scale)
    return cast(tracer, _affine(tracer, normalized, weight, bias), value.dtype)


@torch_primitive("rms_norm", F.rms_norm)
def rms_norm_p(tracer: Tracer, value: TileValue, normalized_shape: Any, weight: Any = None,
               eps: float | None = None) -> TileValue:
    value = _floating("F.rms_norm", value)
    dims = _normalized_dims(tracer, "F.rms_norm", value, normalized_shape)
    wide = cast(tracer, value, torch.float32) if value.dtype != torch.float64 else value
    if eps is None:  # torch's default: the machine epsilon of the dtype it computes in (fp32 for
        eps = torch.finfo(wide.dtype).eps  # 16-bit inputs; bf16's was 6e4 times too large)
    count = 1
    for d in dims:
        count = count * value.axes[d].end
    squares = apply_elementwise(tracer, "mul", wide, wide)
    mean_square = reduce(tracer, "sum", apply_elementwise(tracer, "truediv", squares, count), dims, True)
    scale = apply_elementwise(tracer, "rsqrt", apply_elementwise(tracer, "add", mean_square, eps))
    return cast(tracer, _affine(tracer, apply_elementwise(tracer, "mul", wide, scale), weight, None), value.dtype)
