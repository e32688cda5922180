"""torch's transcendental functions on tile values, written with tl-level primitives (libdevice's
versions do not run in Triton's interpreter): `expm1 log10 atan asin acos atan2 sinh cosh asinh
acosh atanh erfc`.

Each is a numerically sound formula (no cancellation near the points where the naive one loses
digits; overflow only where torch's result overflows), computed in fp32 for 16-bit inputs and
fp64 for fp64. In fp32 they agree with torch to a few ulps (tests/test_ops.py checks 1e-5
relative). `erfc` evaluates in fp64: 1 - erf(x) below 3, a continued fraction of depth 16 above
(relative error below 1e-11 everywhere).
"""
from __future__ import annotations

import math

import torch

from tessera.language.formulas import Ops, formula_primitive, widened
from tessera.trace.proxy import TileValue

T = torch.Tensor
_LN2 = math.log(2.0)
_HUGE = 1e18  # past this, sqrt(x * x + 1) is x in fp64 and x * x may overflow fp32


def _log10(e: Ops, x: TileValue) -> TileValue:
    return e.truediv(e.log(x), math.log(10.0))


def _atan_unit(e: Ops, t: TileValue) -> TileValue:
    """atan(t) for |t| <= 1: two half-angle steps, atan(t) = 2 atan(t / (1 + sqrt(1 + t^2))),
    bring |t| under tan(pi/16) ~ 0.199, where the Taylor series to t^13 is exact to 1e-10."""
    for _ in range(2):
        t = e.truediv(t, e.add(e.sqrt(e.add(e.mul(t, t), 1)), 1))
    square = e.mul(t, t)
    series = 1.0 / 13
    for k in range(5, -1, -1):  # Horner in t^2 of 1 - t^2/3 + t^4/5 - ... + t^12/13
        series = e.sub(1.0 / (2 * k + 1), e.mul(square, series))
    return e.mul(e.mul(t, series), 4)


def _atan(e: Ops, x: TileValue) -> TileValue:
    """Arguments past 1 in magnitude use atan(x) = sign(x) pi/2 - atan(1/x) (1/inf = 0 gives pi/2)."""
    size = e.abs(x)
    large = e.gt(size, 1)
    reduced = _atan_unit(e, e.where(large, e.truediv(1, size), size))
    angle = e.where(large, e.sub(math.pi / 2, reduced), reduced)
    return e.where(e.isnan(x), x, e.copysign(angle, x))


def _asin(e: Ops, x: TileValue) -> TileValue:
    """asin(x) = sign(x) atan(a / sqrt((1 - a)(1 + a))) with a = |x|: 1 - a is exact near 1; a > 1
    is NaN (sqrt). The formula reads |x|, never x itself: the GPU compiler contracts `1 - x` with
    a product that made x (`asin(v * 1e-3)`) into one FMA, which skips the rounding torch gives
    the product, and at x = 1 the unrounded 1 - x is a tiny negative: NaN where torch has pi/2."""
    size = e.abs(x)
    return e.copysign(_atan(e, e.truediv(size, e.sqrt(e.mul(e.sub(1, size), e.add(size, 1))))), x)


def _acos(e: Ops, x: TileValue) -> TileValue:
    """acos(a) = 2 atan(sqrt((1 - a) / (1 + a))) for a = |x| (no cancellation at either end, and
    |x| keeps an FMA from skipping the rounding of x, as in asin); acos(-a) = pi - acos(a)."""
    angle = e.mul(_atan(e, e.sqrt(e.truediv(e.sub(1, e.abs(x)), e.add(e.abs(x), 1)))), 2)
    return e.where(e.lt(x, 0), e.sub(math.pi, angle), angle)


def _atan2(e: Ops, y: TileValue, x: TileValue) -> TileValue:
    """The angle of |y| / |x| in [0, pi/2], reflected by the signs (signed zeros as C's atan2);
    0/0 gives 0 and inf/inf pi/4 as C does."""
    ay, ax = e.abs(y), e.abs(x)
    angle = _atan(e, e.truediv(ay, ax))
    angle = e.where(e.bitwise_and(e.eq(ay, 0), e.eq(ax, 0)), 0.0, angle)
    infinite = e.bitwise_and(e.eq(ay, float("inf")), e.eq(ax, float("inf")))
    angle = e.where(infinite, math.pi / 4, angle)
    angle = e.where(e.signbit(x), e.sub(math.pi, angle), angle)
    return e.where(e.bitwise_or(e.isnan(x), e.isnan(y)), e.add(x, y), e.copysign(angle, y))


def _large_exp_half(e: Ops, size: TileValue) -> TileValue:
    """exp(a) / 2 for large a without overflowing before the result does: (exp(a/2) / 2) exp(a/2)."""
    half = e.exp(e.mul(size, 0.5))
    return e.mul(e.mul(half, 0.5), half)


def _sinh(e: Ops, x: TileValue) -> TileValue:
    """(u + u / (u + 1)) / 2 with u = expm1(|x|): no cancellation near 0."""
    size = e.abs(x)
    u = e.expm1(size)
    small = e.mul(e.add(u, e.truediv(u, e.add(u, 1))), 0.5)
    return e.copysign(e.where(e.gt(size, 20), _large_exp_half(e, size), small), x)


def _cosh(e: Ops, x: TileValue) -> TileValue:
    size = e.abs(x)
    grown = e.exp(size)
    small = e.add(e.mul(grown, 0.5), e.truediv(0.5, grown))
    return e.where(e.gt(size, 20), _large_exp_half(e, size), small)


def _asinh(e: Ops, x: TileValue) -> TileValue:
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))) for a = |x| (exact near 0); log(a) + log 2 for huge a."""
    size = e.abs(x)
    square = e.mul(size, size)
    near = e.log1p(e.add(size, e.truediv(square, e.add(e.sqrt(e.add(square, 1)), 1))))
    far = e.add(e.log(size), _LN2)
    return e.copysign(e.where(e.gt(size, _HUGE), far, near), x)


def _acosh(e: Ops, x: TileValue) -> TileValue:
    """log1p(t + sqrt(t (t + 2))) with t = |x| - 1 (exact near 1); x < 1 is NaN. |x|, not x: the
    GPU compiler would contract `x - 1` with a product that made x into one FMA (as in asin)."""
    t = e.sub(e.abs(x), 1)
    near = e.log1p(e.add(t, e.sqrt(e.mul(t, e.add(t, 2)))))
    result = e.where(e.gt(x, _HUGE), e.add(e.log(x), _LN2), near)
    return e.where(e.lt(x, 1), float("nan"), result)  # (for large negative x the sum cancels to a number)


def _atanh(e: Ops, x: TileValue) -> TileValue:
    """log1p(2a / (1 - a)) / 2 for a = |x|: exact near 0, inf at 1, NaN past 1."""
    size = e.abs(x)
    return e.copysign(e.mul(e.log1p(e.truediv(e.mul(size, 2), e.sub(1, size))), 0.5), x)


def _erfc(e: Ops, x: TileValue) -> TileValue:
    wide = widened(e.tracer, x, torch.float64)
    direct = e.sub(1, e.erf(wide))
    # erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))) for x >= 3
    fraction = wide
    for k in range(16, 0, -1):
        fraction = e.add(wide, e.truediv(k / 2, fraction))
    tail = e.truediv(e.exp(e.neg(e.mul(wide, wide))), e.mul(fraction, math.sqrt(math.pi)))
    result = e.where(e.ge(wide, 3), tail, direct)
    return widened(e.tracer, result, x.dtype)


def _expm1(e: Ops, x: TileValue) -> TileValue:
    return e.expm1(x)


# torch's other spellings of the same functions (`torch.arccos`, `torch.special.erfc`, ...)
_ALIASES = {"atan": ("arctan",), "asin": ("arcsin",), "acos": ("arccos",), "asinh": ("arcsinh",),
            "acosh": ("arccosh",), "atanh": ("arctanh",)}
for _name, _formula in (("expm1", _expm1), ("log10", _log10), ("atan", _atan), ("asin", _asin), ("acos", _acos),
                        ("sinh", _sinh), ("cosh", _cosh), ("asinh", _asinh), ("acosh", _acosh),
                        ("atanh", _atanh), ("erfc", _erfc)):
    _aliases = tuple(f for alias in _ALIASES.get(_name, ()) for f in (getattr(torch, alias), getattr(T, alias)))
    _special = (getattr(torch.special, _name),) if hasattr(torch.special, _name) else ()
    formula_primitive(_name, f"torch.{_name}", (getattr(torch, _name), getattr(T, _name), *_aliases, *_special),
                      _formula)
formula_primitive("atan2", "torch.atan2", (torch.atan2, T.atan2, torch.arctan2, T.arctan2), _atan2, operands=2)
