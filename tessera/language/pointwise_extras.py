"""More torch functions on tile values written with other primitives: `torch.logaddexp logaddexp2
hypot deg2rad rad2deg sgn isclose`, `torch.special.expit`, `F.tanhshrink softshrink hardshrink
threshold softmin`, and the NaN-skipping reductions `torch.nansum nanmean` with `torch.aminmax`.

Each follows the formula torch's CPU kernel evaluates where it is observable: `logaddexp` of equal
operands (two infinities included) adds log 2 exactly, `hypot` scales by the larger magnitude so
it overflows only where torch's result does, and the shrinks keep torch's NaN and -0.0 results.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from tessera.ir.primitive import torch_primitive
from tessera.language.composites import sign_p
from tessera.language.elementwise import apply_elementwise
from tessera.language.formulas import Ops, compute_dtype, formula_primitive, widened
from tessera.language.operands import ask_torch
from tessera.language.reductions import record_reduction, softmax_p
from tessera.language.statistics import only_tile_value
from tessera.language.view import cast, normalized_dims
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def _log_add(e: Ops, a: TileValue, b: TileValue, base: float) -> TileValue:
    """log_base(base**a + base**b): the larger plus log_base(1 + base**-gap); equal operands add 1 in base units."""
    high = e.maximum(a, b)
    gap = e.where(e.eq(a, b), 0.0, e.neg(e.abs(e.sub(a, b))))
    scaled = e.mul(gap, math.log(base))
    return e.add(high, e.truediv(e.log1p(e.exp(scaled)), math.log(base)))


def _logaddexp(e: Ops, a: TileValue, b: TileValue) -> TileValue:
    return _log_add(e, a, b, math.e)


def _logaddexp2(e: Ops, a: TileValue, b: TileValue) -> TileValue:
    return _log_add(e, a, b, 2.0)


def _hypot(e: Ops, a: TileValue, b: TileValue) -> TileValue:
    big, small = e.maximum(e.abs(a), e.abs(b)), e.minimum(e.abs(a), e.abs(b))
    ratio = e.truediv(small, e.where(e.eq(big, 0), 1.0, big))
    scaled = e.mul(big, e.sqrt(e.add(e.mul(ratio, ratio), 1.0)))
    infinite = e.bitwise_or(e.eq(e.abs(a), float("inf")), e.eq(e.abs(b), float("inf")))
    return e.where(infinite, float("inf"), scaled)  # an infinity wins over a NaN, as C's hypot


def _deg2rad(e: Ops, x: TileValue) -> TileValue:
    return e.mul(x, math.pi / 180)


def _rad2deg(e: Ops, x: TileValue) -> TileValue:
    return e.mul(x, 180 / math.pi)


def _expit(e: Ops, x: TileValue) -> TileValue:
    return e.sigmoid(x)


def _tanhshrink(e: Ops, x: TileValue) -> TileValue:
    return e.sub(x, e.tanh(x))


def _softshrink(e: Ops, x: TileValue, lambd: float = 0.5) -> TileValue:
    # torch: x - l above l, x + l below -l, else x * 0 (a NaN stays NaN, a small negative gives -0.0)
    return e.where(e.gt(x, lambd), e.sub(x, lambd), e.where(e.lt(x, -lambd), e.add(x, lambd), e.mul(x, 0)))


def _hardshrink(e: Ops, x: TileValue, lambd: float = 0.5) -> TileValue:
    return e.where(e.bitwise_and(e.ge(x, -lambd), e.le(x, lambd)), 0.0, x)


def _threshold(e: Ops, x: TileValue, threshold: float, value: float, inplace: bool = False) -> TileValue:
    if not x.dtype.is_floating_point:  # torch converts both scalars to the integer dtype first (0.1 -> 0)
        threshold, value = (torch.tensor(v).to(x.dtype).item() for v in (threshold, value))
    return e.where(e.le(x, threshold), value, x)


logaddexp_p = formula_primitive("logaddexp", "torch.logaddexp", (torch.logaddexp, T.logaddexp), _logaddexp, operands=2)
logaddexp2_p = formula_primitive("logaddexp2", "torch.logaddexp2", (torch.logaddexp2, T.logaddexp2), _logaddexp2,
                                 operands=2)
hypot_p = formula_primitive("hypot", "torch.hypot", (torch.hypot, T.hypot), _hypot, operands=2)
deg2rad_p = formula_primitive("deg2rad", "torch.deg2rad", (torch.deg2rad, T.deg2rad), _deg2rad)
rad2deg_p = formula_primitive("rad2deg", "torch.rad2deg", (torch.rad2deg, T.rad2deg), _rad2deg)
expit_p = formula_primitive("expit", "torch.special.expit", (torch.special.expit,), _expit)
tanhshrink_p = formula_primitive("tanhshrink", "F.tanhshrink", (F.tanhshrink,), _tanhshrink)
softshrink_p = formula_primitive("softshrink", "F.softshrink", (F.softshrink,), _softshrink)
hardshrink_p = formula_primitive("hardshrink", "F.hardshrink", (F.hardshrink, torch.hardshrink, T.hardshrink),
                                 _hardshrink)
threshold_p = formula_primitive("threshold", "F.threshold", (F.threshold,), _threshold)
sgn_p = torch_primitive("sgn", torch.sgn, T.sgn)(sign_p.trace_rule)  # sign, for real values


@torch_primitive("isclose", torch.isclose, T.isclose)
def isclose_p(tracer: Tracer, a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8,
              equal_nan: bool = False) -> TileValue:
    ask_torch("torch.isclose", torch.isclose, (a, b), {"rtol": rtol, "atol": atol, "equal_nan": equal_nan})
    e = Ops(tracer)
    dtype = torch.promote_types(*(v.dtype if isinstance(v, TileValue) else torch.tensor(v).dtype for v in (a, b)))
    close = e.eq(a, b)
    if equal_nan and dtype.is_floating_point:
        close = e.bitwise_or(close, e.bitwise_and(e.ne(a, a), e.ne(b, b)))
    numbers = all(isinstance(t, (int, float)) for t in (rtol, atol))
    if numbers and rtol == 0 and atol == 0:  # torch: zero tolerances are an equality test
        return close
    # torch's error terms: floats in their own dtype (an fp16 difference that overflows is inf and
    # never close); integers and bools in the default float dtype, so a difference cannot wrap
    work = dtype if dtype.is_floating_point else torch.get_default_dtype()
    a, b = widened(tracer, a, work), widened(tracer, b, work)
    allowed = e.add(e.abs(e.mul(b, rtol)), atol)
    actual = e.abs(e.sub(a, b))
    finite = e.lt(actual, float("inf"))  # False for inf and NaN (inf - inf, or an infinite b)
    tolerant = e.bitwise_and(finite, e.le(actual, allowed))
    if not numbers:  # tolerances known per call (kernel arguments): the equality test decided per call
        zeros = e.mul(cast(tracer, close, torch.float32), 0.0)
        given = e.bitwise_or(e.ne(e.add(zeros, rtol), 0), e.ne(e.add(zeros, atol), 0))
        tolerant = e.bitwise_and(tolerant, given)
    return e.bitwise_or(close, tolerant)


@torch_primitive("softmin", F.softmin)
def softmin_p(tracer: Tracer, value: Any, dim: Any = None, _stacklevel: int = 3,
              dtype: torch.dtype | None = None) -> TileValue:
    value = only_tile_value("F.softmin", value)
    return softmax_p.trace_rule(tracer, apply_elementwise(tracer, "neg", value), dim, dtype=dtype)


def _nan_skipping(kind: str) -> Any:
    def rule(tracer: Tracer, value: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None,
             out: Any = None) -> TileValue:
        value = only_tile_value(f"torch.{kind}", value)
        asked = {"dim": dim, "keepdim": keepdim, **({"dtype": dtype} if dtype is not None else {})}
        answer = ask_torch(f"torch.{kind}", getattr(torch, kind), (value,), asked).dtype
        if not value.dtype.is_floating_point:  # integers hold no NaN (torch's nanmean refuses them)
            return cast(tracer, record_reduction(tracer, "sum", value, dim, keepdim, dtype=answer), answer)
        wide = cast(tracer, value, compute_dtype(answer))
        present = apply_elementwise(tracer, "eq", wide, wide)
        total = record_reduction(tracer, "sum", apply_elementwise(tracer, "where", present, wide, 0.0), dim, keepdim,
                                 dtype=wide.dtype)
        if kind == "nanmean":  # over the values that are not NaN (0 / 0 gives NaN, as torch)
            count = record_reduction(tracer, "sum", cast(tracer, present, wide.dtype), dim, keepdim, dtype=wide.dtype)
            total = apply_elementwise(tracer, "truediv", total, count)
        return cast(tracer, total, answer)
    rule.__name__ = f"_{kind}_trace"
    return rule


nansum_p = torch_primitive("nansum", torch.nansum, T.nansum)(_nan_skipping("nansum"))
nanmean_p = torch_primitive("nanmean", torch.nanmean, T.nanmean)(_nan_skipping("nanmean"))


@torch_primitive("aminmax", torch.aminmax, T.aminmax)
def aminmax_p(tracer: Tracer, value: Any, *, dim: Any = None, keepdim: bool = False, out: Any = None) -> Any:
    value = only_tile_value("torch.aminmax", value)
    ask_torch("torch.aminmax", torch.aminmax, (value,), {"dim": dim, "keepdim": keepdim})
    dims = normalized_dims(value, dim)
    return torch.return_types.aminmax((record_reduction(tracer, "amin", value, dims, keepdim),
                                       record_reduction(tracer, "amax", value, dims, keepdim)))
