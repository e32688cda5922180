"""torch's arithmetic functions on tile values, written with other primitives: `rsub addcmul addcdiv
square fmax fmin copysign signbit heaviside xlogy float_power round frac clamp_min clamp_max`.

`round` rounds half to even as torch does (`floor`, then the tie goes to the even neighbour; with
`decimals=` it scales by 10^decimals first, as torch's kernel); `signbit` and `copysign` read the
sign bit (so -0.0 counts as negative); `float_power` computes and returns fp64, as torch does.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from tessera.language.formulas import Ops, formula_primitive
from tessera.trace.proxy import TileValue

T = torch.Tensor


def _rsub(e: Ops, x: Any, other: Any, alpha: Any = 1) -> TileValue:
    return e.sub(other, x if alpha == 1 else e.mul(x, alpha))


def _addcmul(e: Ops, x: Any, first: Any, second: Any, value: Any = 1) -> TileValue:
    if not x.dtype.is_floating_point and isinstance(value, float):
        value = int(value)  # torch truncates the scale for integer tensors (value=0.5 scales by 0)
    return e.add(x, e.mul(e.mul(first, value), second))


def _addcdiv(e: Ops, x: Any, first: Any, second: Any, value: Any = 1) -> TileValue:
    # torch's CPU kernel scales the numerator first, `x + value * first / second` (inf * 0 /
    # second is NaN there, where (first / second) * 0 would not be)
    return e.add(x, e.truediv(e.mul(first, value), second))


def _nan_ignoring(name: str) -> Any:
    def formula(e: Ops, a: Any, b: Any) -> TileValue:
        both = getattr(e, name)(a, b)
        if not (isinstance(a, TileValue) and a.dtype.is_floating_point
                or isinstance(b, TileValue) and b.dtype.is_floating_point):
            return both  # integers hold no NaN
        return e.where(e.isnan(a), b, e.where(e.isnan(b), a, both))
    return formula


def _copysign(e: Ops, magnitude: Any, sign: Any) -> TileValue:
    if not isinstance(sign, TileValue):  # a scalar sign: its own sign bit, known now
        negative = math.copysign(1.0, sign) < 0
        return e.neg(e.abs(magnitude)) if negative else e.abs(magnitude)
    return e.copysign(magnitude, sign)  # (torch takes no scalar magnitude)


def _signbit(e: Ops, x: TileValue) -> TileValue:
    return e.signbit(x)


def _heaviside(e: Ops, x: TileValue, values: Any) -> TileValue:
    return e.where(e.eq(x, 0), values, e.where(e.gt(x, 0), 1, 0))


def _xlogy(e: Ops, x: Any, y: Any) -> TileValue:
    if not isinstance(x, TileValue):  # a scalar x: its zero test is known now
        product = e.mul(e.log(y), x) if x != 0 else e.mul(e.abs(y), 0.0)
    else:
        product = e.where(e.eq(x, 0), 0.0, e.mul(x, e.log(y)))
    return e.where(e.ne(y, y), y, product) if isinstance(y, TileValue) else product


def _float_power(e: Ops, x: Any, exponent: Any) -> TileValue:
    return e.pow(x, exponent)


def _half_to_even(e: Ops, x: TileValue) -> TileValue:
    """Rounds |x| and gives the result x's sign (rounding is symmetric; -0.0 and round(-0.3) keep
    their sign). |x|, not x: the GPU compiler would contract `x - floor(x)` with a product that made
    x (`round(v * 10)`) into one FMA, whose unrounded excess can fall on the other side of 0.5."""
    size = e.abs(x)
    below = e.floor(size)
    excess = e.sub(size, below)  # exact: |x| and floor(|x|) share their leading bits
    half = e.mul(below, 0.5)
    odd = e.ne(e.floor(half), half)
    tie = e.where(odd, e.add(below, 1), below)
    rounded = e.where(e.gt(excess, 0.5), e.add(below, 1), e.where(e.lt(excess, 0.5), below, tie))
    return e.copysign(rounded, x)


def _round(e: Ops, x: TileValue, decimals: int = 0) -> TileValue:
    if not x.dtype.is_floating_point:
        return x
    if decimals == 0:
        return _half_to_even(e, x)
    scale = 10.0 ** abs(decimals)
    if decimals > 0:
        return e.truediv(_half_to_even(e, e.mul(x, scale)), scale)
    return e.mul(_half_to_even(e, e.truediv(x, scale)), scale)


def _frac(e: Ops, x: TileValue) -> TileValue:
    """sign(x) (a - floor(a)) with a = |x|: the subtraction reads |x|, so the GPU compiler cannot
    contract it with a product that made x (`frac(v * 7)`) into one FMA, which would subtract
    from the unrounded product (torch rounds it first) and change the fraction's low digits. A
    zero fraction is +0.0 as torch's x - trunc(x) (`0.0 - f`, not `-f`)."""
    size = e.abs(x)
    fraction = e.sub(size, e.floor(size))
    return e.where(e.lt(x, 0), e.sub(0.0, fraction), fraction)


def _square(e: Ops, x: TileValue) -> TileValue:
    return e.mul(x, x)


def _clamp_min(e: Ops, x: TileValue, low: Any) -> TileValue:
    return e.maximum(x, low)


def _clamp_max(e: Ops, x: TileValue, high: Any) -> TileValue:
    return e.minimum(x, high)


formula_primitive("rsub", "torch.rsub", (torch.rsub,), _rsub, operands=2, integers_as_is=True)
formula_primitive("addcmul", "torch.addcmul", (torch.addcmul, T.addcmul), _addcmul, operands=3, integers_as_is=True)
formula_primitive("addcdiv", "torch.addcdiv", (torch.addcdiv, T.addcdiv), _addcdiv, operands=3)
formula_primitive("fmax", "torch.fmax", (torch.fmax, T.fmax), _nan_ignoring("maximum"), operands=2,
                  integers_as_is=True)
formula_primitive("fmin", "torch.fmin", (torch.fmin, T.fmin), _nan_ignoring("minimum"), operands=2,
                  integers_as_is=True)
formula_primitive("copysign", "torch.copysign", (torch.copysign, T.copysign), _copysign, operands=2)
formula_primitive("signbit", "torch.signbit", (torch.signbit, T.signbit), _signbit, widen=False)
formula_primitive("heaviside", "torch.heaviside", (torch.heaviside, T.heaviside), _heaviside, operands=2,
                  integers_as_is=True)
formula_primitive("xlogy", "torch.xlogy", (torch.xlogy, T.xlogy, torch.special.xlogy), _xlogy, operands=2)
formula_primitive("float_power", "torch.float_power", (torch.float_power, T.float_power), _float_power, operands=2)
formula_primitive("round", "torch.round", (torch.round, T.round, torch.special.round), _round, integers_as_is=True)
formula_primitive("frac", "torch.frac", (torch.frac, T.frac), _frac)
formula_primitive("clamp_min", "torch.clamp_min", (torch.clamp_min, T.clamp_min), _clamp_min, integers_as_is=True)
formula_primitive("clamp_max", "torch.clamp_max", (torch.clamp_max, T.clamp_max), _clamp_max, integers_as_is=True)
formula_primitive("square", "torch.square", (torch.square, T.square), _square, integers_as_is=True)
