"""torch's special functions on tile values, written with other primitives: `torch.sinc logit erfinv
ldexp` (and their `torch.special` and Tensor-method spellings), `torch.special.ndtr xlog1py entr`.

`sinc`, `logit`, `ndtr`, `xlog1py` and `entr` evaluate torch's CPU formulas (`sin(pi x) / (pi x)` with 1 at 0; `log(x / (1 - x))`
after the optional clamp to [eps, 1 - eps]). Triton has no erfinv: `erfinv(y)` is `y * P(w)` with
`w = -log((1 - |y|)(1 + |y|))` and P a polynomial, one for w <= 6.25 (|y| <= 0.998) in w and one
beyond in sqrt(w). Both were fitted here (least squares on Chebyshev nodes of mpmath's erfinv;
relative error below 7e-9 and 2.4e-8 up to w = 40, i.e. 1 - |y| down to 2e-18), so fp32 results
are within a few ulps of torch; fp64 inputs take two Newton steps on `erf(x) = |y|`, the residual
read as `erfc(x) - (1 - |y|)` above 0.5 (1 - |y| is exact there: no cancellation), which leaves
them within 1e-12 relative (erfc's own accuracy). +-1 gives +-inf, |y| > 1 NaN.

>>> z = torch.erfinv(2 * x[tile] - 1) * math.sqrt(2)                       # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from tessera.ir.primitive import TORCH_FUNCTIONS
from tessera.language.formulas import Ops, compute_dtype, formula_primitive, horner, widened
from tessera.language.operands import ask_torch
from tessera.language.view import cast
from tessera.trace.proxy import TileValue

T = torch.Tensor

# erfinv(y) / y = P(w - center), coefficients from the constant term up (see the module docstring)
_CENTRAL_LIMIT = 6.25
_CENTRAL_CENTER = 3.125
_CENTRAL = (1.6536545697595262, 0.2401581832246256, -0.006033719184631348, -0.0007407012605835837,
            0.00018678881107046336, -1.3886094323177311e-05, -1.3883837905492869e-06, 4.2553793514455354e-07,
            -2.4670731290010224e-08, -4.602014699861748e-09, 6.582038452176092e-10)
_TAIL_CENTER = 4.41227766016838  # in s = sqrt(w), over [2.5, sqrt(40)]
_TAIL = (4.256136592533853, 1.0101645835452866, 0.0004490094660267362, -0.00048231994777669116,
         0.00016275302326140053, -5.426199311502784e-05, 2.017717874596095e-05, 9.835242689218962e-07,
         -1.856030797930789e-06, -3.899793384760545e-06, 2.2874286904888795e-06, 6.507407827722349e-08,
         -1.5279062961803768e-07)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _sinc(e: Ops, x: TileValue) -> TileValue:
    product = e.mul(x, math.pi)
    return e.where(e.eq(x, 0), 1.0, e.truediv(e.sin(product), product))


def _logit(e: Ops, x: TileValue, eps: float | None = None) -> TileValue:
    """The operand enters in its own dtype: torch's CPU kernel rounds `1 - x` and the ratio to a
    16-bit input's dtype before the log (its CUDA kernel does not; the two differ by an ulp of it)."""
    if not x.dtype.is_floating_point:
        x = cast(e.tracer, x, torch.float32)
    if isinstance(eps, sympy.Basic) and not eps.free_symbols:
        eps = float(eps)
    if isinstance(eps, sympy.Basic):  # a scalar argument's: rounded to x's dtype in the kernel
        low: Any = e.where(e.eq(x, x), eps, eps)
        low = cast(e.tracer, low, x.dtype) if low.dtype != x.dtype else low
        x = e.where(e.lt(x, low), low, e.where(e.gt(x, e.sub(1, low)), e.sub(1, low), x))
    elif eps is not None:  # torch's clamp to [eps, 1 - eps] in x's dtype, which lets a NaN through
        rounded = torch.tensor(eps, dtype=x.dtype)
        high = (1 - rounded).item()
        x = e.where(e.lt(x, rounded.item()), rounded.item(), e.where(e.gt(x, high), high, x))
    ratio = e.truediv(x, e.sub(1, x))
    return e.log(widened(e.tracer, ratio, compute_dtype(x.dtype)))


def _erfinv(e: Ops, y: TileValue) -> TileValue:
    size = e.abs(y)  # |y|, not y: 1 - |y| is exact near 1 and no FMA can fold a product into it
    w = e.neg(e.log(e.mul(e.sub(1, size), e.add(size, 1))))
    central = horner(e, e.sub(w, _CENTRAL_CENTER), _CENTRAL)
    tail = horner(e, e.sub(e.sqrt(w), _TAIL_CENTER), _TAIL)
    x = e.mul(size, e.where(e.le(w, _CENTRAL_LIMIT), central, tail))
    if y.dtype == torch.float64:  # Newton on erf(x) = |y|, its residual read without cancellation
        erfc = TORCH_FUNCTIONS[torch.erfc].trace_rule
        for _ in range(2):
            # |y| - erf(x) near 0, erfc(x) - (1 - |y|) above 0.5 (the same number, each exact where it is used)
            residual = e.where(e.lt(size, 0.5), e.sub(size, e.erf(x)), e.sub(erfc(e.tracer, x), e.sub(1, size)))
            step = e.truediv(residual, e.mul(e.exp(e.neg(e.mul(x, x))), _TWO_OVER_SQRT_PI))
            x = e.where(e.lt(size, 1), e.add(x, step), x)
    x = e.where(e.eq(size, 1), float("inf"), e.where(e.gt(size, 1), float("nan"), x))
    return e.where(e.isnan(y), y, e.copysign(x, y))


def _ndtr(e: Ops, x: TileValue) -> TileValue:
    """torch's: 0.5 + 0.5 erf(t) for |t| < 1 (t = x / sqrt 2), else erfc(|t|) / 2 from the near tail."""
    t = e.mul(x, math.sqrt(0.5))
    tail = e.mul(TORCH_FUNCTIONS[torch.erfc].trace_rule(e.tracer, e.abs(t)), 0.5)
    far = e.where(e.gt(x, 0), e.sub(1, tail), tail)
    return e.where(e.lt(e.abs(t), 1), e.add(e.mul(e.erf(t), 0.5), 0.5), far)


def _result_dtype(function: Any, *operands: Any) -> torch.dtype:
    # (stand-ins for runtime scalars too: a scalar argument would dispatch back into the trace)
    return ask_torch(function.__name__, function, operands, {}).dtype


def _rounded(e: Ops, value: TileValue, dtype: torch.dtype) -> TileValue:
    """`value` rounded to `dtype` and widened back: a step torch's CPU kernel rounds (16-bit math)."""
    return widened(e.tracer, cast(e.tracer, value, dtype), compute_dtype(dtype))


def _xlog1py(e: Ops, x: Any, y: Any) -> TileValue:
    """The operands enter in their own dtypes: torch's CPU kernel rounds log1p(y) to a 16-bit
    result dtype before the product (c10's 16-bit log1p), so here too."""
    dtype = _result_dtype(torch.special.xlog1py, x, y)
    x, y = widened(e.tracer, x, compute_dtype(dtype)), widened(e.tracer, y, compute_dtype(dtype))
    logarithm = _rounded(e, e.log1p(y), dtype)
    if isinstance(x, sympy.Basic) and isinstance(y, TileValue):  # a scalar argument: zero or not per call
        x = e.where(e.eq(y, y), x, x)
    product = e.where(e.eq(x, 0), 0.0, e.mul(x, logarithm)) if isinstance(x, TileValue) else \
        (e.mul(logarithm, x) if x != 0 else e.mul(e.abs(y), 0.0))
    return e.where(e.ne(y, y), y, product) if isinstance(y, TileValue) else product  # a NaN y wins, as torch


def _entr(e: Ops, x: TileValue) -> TileValue:
    """-x log x; 0 at 0 and -inf below it (a NaN stays NaN)."""
    value = e.where(e.eq(x, 0), 0.0, e.neg(e.mul(x, e.log(x))))
    return e.where(e.lt(x, 0), float("-inf"), value)


def _ldexp(e: Ops, x: Any, exponent: Any) -> TileValue:
    """x * 2**exponent, the power rounded to the result dtype first as torch's `x * pow(2, e)`
    (in fp16 2**16 is inf already, so 0 * it is NaN there too)."""
    dtype = _result_dtype(torch.ldexp, x, exponent)
    x = widened(e.tracer, x, compute_dtype(dtype))
    if not isinstance(exponent, (TileValue, sympy.Basic)):
        return e.mul(x, torch.tensor(2.0 ** exponent).to(dtype).item())
    if not isinstance(exponent, TileValue):  # a scalar argument: the power computed in the kernel
        exponent = e.where(e.eq(x, x), exponent, exponent)
    return e.mul(x, _rounded(e, e.exp2(widened(e.tracer, exponent, compute_dtype(dtype))), dtype))


formula_primitive("sinc", "torch.sinc", (torch.sinc, T.sinc, torch.special.sinc), _sinc)
formula_primitive("logit", "torch.logit", (torch.logit, T.logit, torch.special.logit), _logit, widen=False)
formula_primitive("erfinv", "torch.erfinv", (torch.erfinv, T.erfinv, torch.special.erfinv), _erfinv)
formula_primitive("ndtr", "torch.special.ndtr", (torch.special.ndtr,), _ndtr)
formula_primitive("xlog1py", "torch.special.xlog1py", (torch.special.xlog1py,), _xlog1py, operands=2,
                  widen=False)
formula_primitive("entr", "torch.special.entr", (torch.special.entr,), _entr)
formula_primitive("ldexp", "torch.ldexp", (torch.ldexp, T.ldexp), _ldexp, operands=2, widen=False)
