"""The log-gamma and digamma functions on tile values: `torch.lgamma digamma` (and their
`torch.special.gammaln / digamma / psi` and Tensor-method spellings), `torch.mvlgamma`.

Triton has neither, so both are written with other primitives, in fp64 for every input dtype
(rounded once to torch's dtype): the argument is moved up to z >= 8 by the recurrences
`lgamma(x) = lgamma(x + n) - log(x (x+1) ... (x+n-1))` and `psi(x) = psi(x + n) - sum 1/(x+k)`,
then the asymptotic (Stirling) series is summed to the 1/z^9 (lgamma) or 1/z^10 (digamma) term,
whose error at z = 8 is below 1e-12. Arguments <= 0 use the reflection formulas
`lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)` and `psi(x) = psi(1 - x) - pi / tan(pi x)`.
Poles and infinities give torch's values: lgamma is +inf at 0, the negative integers and +-inf;
digamma is -inf at +0, +inf at -0, NaN at the negative integers and -inf, +inf at +inf.

>>> nll = torch.lgamma(k[tile] + 1) - k[tile] * torch.log(rate[tile]) + rate[tile]   # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Any

import torch

from tessera.language.formulas import Ops, formula_primitive, horner, widened
from tessera.trace.proxy import TileValue

T = torch.Tensor

_SHIFT = 8  # steps of the recurrence: z >= 8 before the series
# Stirling's series for lgamma: B_2k / (2k (2k - 1) z^(2k-1)), k = 1..5
_LGAMMA_SERIES = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188)
# digamma's: -B_2k / (2k z^2k), k = 1..5
_DIGAMMA_SERIES = (-1 / 12, 1 / 120, -1 / 252, 1 / 240, -1 / 132)


def _shifted(e: Ops, z: TileValue, step: Any) -> tuple[TileValue, Any]:
    """z moved up to >= _SHIFT, and the recurrence's correction accumulated by `step(e, z, acc, moved)`."""
    correction: Any = None
    for _ in range(_SHIFT):
        moved = e.lt(z, _SHIFT)
        correction = step(e, z, correction, moved)
        z = e.where(moved, e.add(z, 1.0), z)
    return z, correction


def _lgamma_positive(e: Ops, x: TileValue) -> TileValue:
    def product(e: Ops, z: TileValue, acc: Any, moved: TileValue) -> TileValue:
        factor = e.where(moved, z, 1.0)
        return factor if acc is None else e.mul(acc, factor)
    z, factors = _shifted(e, x, product)
    inverse = e.reciprocal(z)
    stirling = e.add(e.sub(e.mul(e.sub(z, 0.5), e.log(z)), z), 0.5 * math.log(2 * math.pi))
    series = e.mul(horner(e, e.mul(inverse, inverse), _LGAMMA_SERIES), inverse)
    return e.sub(e.add(stirling, series), e.log(factors))


def _sin_cos_pi(e: Ops, x: TileValue) -> tuple[TileValue, TileValue]:
    """sin(pi x) and cos(pi x) with x reduced exactly to [-1/2, 1/2] first (so no multiple of pi is
    rounded into the argument: sin(pi x) of a tiny or integral x is exact)."""
    reduced = e.sub(x, e.mul(e.floor(e.add(e.mul(x, 0.5), 0.5)), 2.0))  # in [-1, 1)
    high, low = e.gt(reduced, 0.5), e.lt(reduced, -0.5)
    folded = e.where(high, e.sub(1.0, reduced), e.where(low, e.sub(-1.0, reduced), reduced))
    angle = e.mul(folded, math.pi)
    cosine = e.cos(angle)
    return e.sin(angle), e.where(e.bitwise_or(high, low), e.neg(cosine), cosine)


def _lgamma(e: Ops, x: TileValue) -> TileValue:
    wide = widened(e.tracer, x, torch.float64)
    reflect = e.le(wide, 0.0)
    positive = _lgamma_positive(e, e.where(reflect, e.sub(1.0, wide), wide))
    reflected = e.sub(e.log(e.truediv(math.pi, e.abs(_sin_cos_pi(e, wide)[0]))), positive)
    result = e.where(reflect, reflected, positive)
    return e.where(e.eq(e.abs(wide), float("inf")), float("inf"), result)


def _digamma_positive(e: Ops, x: TileValue) -> TileValue:
    def reciprocal_sum(e: Ops, z: TileValue, acc: Any, moved: TileValue) -> TileValue:
        term = e.where(moved, e.reciprocal(z), 0.0)
        return term if acc is None else e.add(acc, term)
    z, shift = _shifted(e, x, reciprocal_sum)
    inverse = e.reciprocal(z)
    inverse_square = e.mul(inverse, inverse)
    asymptotic = e.add(e.sub(e.log(z), e.mul(inverse, 0.5)), e.mul(horner(e, inverse_square, _DIGAMMA_SERIES),
                                                                  inverse_square))
    return e.sub(asymptotic, shift)


def _digamma(e: Ops, x: TileValue) -> TileValue:
    wide = widened(e.tracer, x, torch.float64)
    reflect = e.le(wide, 0.0)
    positive = _digamma_positive(e, e.where(reflect, e.sub(1.0, wide), wide))
    sine, cosine = _sin_cos_pi(e, wide)
    reflected = e.sub(positive, e.truediv(e.mul(cosine, math.pi), sine))
    result = e.where(reflect, reflected, positive)
    zero = e.eq(wide, 0.0)
    signed_zero = e.where(e.signbit(wide), float("inf"), float("-inf"))
    pole = e.bitwise_and(e.lt(wide, 0.0), e.eq(wide, e.floor(wide)))  # -1, -2, ... and -inf
    result = e.where(pole, float("nan"), e.where(zero, signed_zero, result))
    return e.where(e.eq(wide, float("inf")), float("inf"), result)


def _mvlgamma(e: Ops, x: TileValue, p: int) -> TileValue:
    """log of the multivariate gamma function: sum_j lgamma(x - j/2) + p (p - 1) / 4 log(pi)."""
    total: Any = p * (p - 1) / 4 * math.log(math.pi)
    for j in range(p):
        total = e.add(_lgamma(e, e.sub(x, j / 2)), total)
    return total


formula_primitive("lgamma", "torch.lgamma", (torch.lgamma, T.lgamma, torch.special.gammaln), _lgamma)
formula_primitive("digamma", "torch.digamma", (torch.digamma, T.digamma, torch.special.digamma, torch.special.psi),
                  _digamma)
formula_primitive("mvlgamma", "torch.mvlgamma", (torch.mvlgamma, T.mvlgamma, torch.special.multigammaln), _mvlgamma)
