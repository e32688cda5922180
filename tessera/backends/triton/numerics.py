"""Triton code for the ops whose edge values (NaN, inf, -0.0, a zero divisor) need care to match PyTorch.

    reduction_expression("amax", "v4", torch.float32, 1, False, "[8, 16]", "idx_r0[None, :]", interpret)
    FLOAT_FLOORDIV.format("a", "b")      # float `a // b` exactly as torch computes it

Triton's own `tl.max`/`tl.min` drop NaN (GPU: `maxnum`; interpreter: `np.nanmax`) and its
`tl.argmax` never picks a NaN on the GPU, while PyTorch propagates NaN through `amax`/`amin`/
`max(dim)`/`min(dim)` and `argmax`/`argmin` return the first NaN's index. Float `//` and `%` follow
torch's fmod-based formulas (`aten/src/ATen/native/BinaryOps.h`: `div_floor_floating`, and the
remainder kernel), not `floor(a / b)`: `1.0 // 0.1` is 9, `7.0 % inf` is 7. Both need C's exact
fmod: the interpreter's float `%` is `np.fmod`, but on the H100 Triton's `%` computes
`a - b * trunc(a / b)`, which loses the remainder when `a / b` is huge or overflows (a // b then
gave inf where torch gives a finite value). `exact_fmod` is libdevice's fmod in compiled code and
`%` in the interpreter (which has no libdevice); the other helpers use only tl operations.
"""
from __future__ import annotations

import torch

HELPERS: dict[str, list[str]] = {
    "float_floordiv": [
        "",
        "@triton.jit",
        "def float_floordiv(a, b):",
        "    # torch's div_floor_floating: fmod-based, so a // b never exceeds the true quotient",
        "    mod = exact_fmod(a, b)",
        "    div = (a - mod) / b",
        "    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)",
        "    floored = tl.floor(div)",
        "    floored = tl.where(div - floored > 0.5, floored + 1.0, floored)",
        "    zero = (a / b) * 0.0  # copysign(0, a / b): |a| < |b| here, so a / b is finite",
        "    result = tl.where(div != 0, floored, zero)",
        "    return tl.where(b == 0, a / b, result)  # a zero divisor: the IEEE quotient",
        "",
    ],
    "float_remainder": [
        "",
        "@triton.jit",
        "def float_remainder(a, b):",
        "    # torch's remainder: fmod, moved into the divisor's sign",
        "    mod = exact_fmod(a, b)",
        "    mod = tl.where(mod == 0, a * 0.0, mod)  # a zero keeps the dividend's sign (the H100's % gave +0.0)",
        "    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)",
        "",
    ],
    # C's fmod (exact; fmod(a, +-inf) is a), one helper per mode under the same name
    "exact_fmod": [
        "",
        "@triton.jit",
        "def exact_fmod(a, b):",
        "    if a.dtype == tl.float64:",
        "        return libdevice.fmod(a, b)",
        "    # exact in fp32, and the remainder of 16-bit operands is a 16-bit value again",
        "    return libdevice.fmod(a.to(tl.float32), b.to(tl.float32)).to(a.dtype)",
        "",
    ],
    "exact_fmod_interpreted": [
        "",
        "@triton.jit",
        "def exact_fmod(a, b):",
        "    return a % b  # the interpreter's float % is np.fmod",
        "",
    ],
    "max_propagating_nan": [
        "",
        "@triton.jit",
        "def max_propagating_nan(a, b):",
        "    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)",
        "",
    ],
    "min_propagating_nan": [
        "",
        "@triton.jit",
        "def min_propagating_nan(a, b):",
        "    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)",
        "",
    ],
    "argmax_propagating_nan": [
        "",
        "@triton.jit",
        "def argmax_propagating_nan(value1, index1, value2, index2):",
        "    # NaN is larger than every number; ties (NaN with NaN included) keep the first index",
        "    nan1 = value1 != value1",
        "    nan2 = value2 != value2",
        "    larger = (value1 > value2) | (nan1 & ~nan2)",
        "    equal = (value1 == value2) | (nan1 & nan2)",
        "    first = larger | (equal & (index1 < index2))",
        "    return tl.where(first, value1, value2), tl.where(first, index1, index2)",
        "",
    ],
    "argmin_propagating_nan": [
        "",
        "@triton.jit",
        "def argmin_propagating_nan(value1, index1, value2, index2):",
        "    # NaN is smaller than every number here too: torch's argmin also returns the first NaN",
        "    nan1 = value1 != value1",
        "    nan2 = value2 != value2",
        "    smaller = (value1 < value2) | (nan1 & ~nan2)",
        "    equal = (value1 == value2) | (nan1 & nan2)",
        "    first = smaller | (equal & (index1 < index2))",
        "    return tl.where(first, value1, value2), tl.where(first, index1, index2)",
        "",
    ],
}

FLOAT_FLOORDIV = "float_floordiv({0}, {1})"
FLOAT_REMAINDER = "float_remainder({0}, {1})"
# integer floor division and modulo round toward -inf, as Python and PyTorch do (Triton's `//` and
# `%` truncate toward zero)
INT_FLOORDIV = "({0} // {1} - (({0} % {1} != 0) & (({0} < 0) != ({1} < 0))).to({0}.dtype))"
INT_REMAINDER = "({0} % {1} + tl.where(({0} % {1} != 0) & (({0} % {1} < 0) != ({1} < 0)), {1}, 0))"


_NAN_COMBINE = {"amax": "max_propagating_nan", "amin": "min_propagating_nan",
                "argmax": "argmax_propagating_nan", "argmin": "argmin_propagating_nan"}


_PLAIN_REDUCTIONS = {"sum": "tl.sum", "amax": "tl.max", "amin": "tl.min", "argmax": "tl.argmax", "argmin": "tl.argmin"}
# In Triton's interpreter `tl.sum`/`tl.max`/`tl.min` are library functions, and each call re-patches
# the language (about 7 ms); `tl.reduce` with the library's own combine function is the same
# vectorized numpy reduction without that call. The operand is already in its accumulate dtype,
# so the promotion `tl.sum` would add does nothing.
_INTERPRETED_COMBINES = {"sum": "_sum_combine", "amax": "_elementwise_max", "amin": "_elementwise_min"}


def reduction_expression(fn: str, operand: str, dtype: torch.dtype, dim: int, keepdim: bool,
                         block_shape: str, index: str, interpret: bool) -> tuple[str, tuple[str, ...]]:
    """(Triton expression reducing `operand` over `dim`, helper functions it calls), as torch reduces.

    `operand` is a block of `dtype` (masked lanes already hold the reduction's identity), of block
    shape `block_shape` (`"[8, 16]"`); `index` is the reduced axis's lane number placed in that
    shape (`"tl.arange(0, 16)[None, :]"`), used by the NaN-aware argmax. Float amax/amin/argmax/
    argmin propagate NaN: on the GPU through `tl.reduce` with a NaN-propagating combine function;
    in the interpreter (whose `tl.reduce` with a Python combine function walks every element) by
    the vectorized `tl.max`/`tl.argmax` plus a NaN test, since there `tl.argmax` is `np.argmax`,
    which already returns the first NaN.
    """
    keep = ", keep_dims=True" if keepdim else ""
    if interpret and fn in _INTERPRETED_COMBINES:
        def plain_reduction(fn: str, operand: str) -> str:
            return f"tl.reduce({operand}, {dim}, tl.standard.{_INTERPRETED_COMBINES[fn]}{keep})"
    else:
        def plain_reduction(fn: str, operand: str) -> str:
            return f"{_PLAIN_REDUCTIONS[fn]}({operand}, axis={dim}{keep})"
    if fn == "sum" or not dtype.is_floating_point:
        return plain_reduction(fn, operand), ()
    if interpret:
        if fn in ("argmax", "argmin"):
            return plain_reduction(fn, operand), ()
        has_nan = f"{plain_reduction('amax', f'({operand} != {operand}).to(tl.int8)')} > 0"
        return f"tl.where({has_nan}, float('nan'), {plain_reduction(fn, operand)})", ()
    helper = _NAN_COMBINE[fn]
    if fn in ("argmax", "argmin"):
        lanes = f"tl.broadcast_to({index}, {block_shape})"
        return f"tl.reduce(({operand}, {lanes}), {dim}, {helper}{keep})[1]", (helper,)
    return f"tl.reduce({operand}, {dim}, {helper}{keep})", (helper,)
