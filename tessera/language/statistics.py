"""Reductions built from the basic ones: `var std var_mean std_mean logsumexp any all count_nonzero
vector_norm norm` on tile values.

Each is a primitive for its torch functions whose trace rule composes sum/amax/amin and
elementwise ops, with torch's numerics: 16-bit inputs compute in fp32 and round once at the
end; `var`/`std` divide by `max(0, n - correction)` (so one element with the default correction
gives NaN, as in torch); `logsumexp` shifts by the row's max, taken as 0 where that max is
infinite (a row of -inf gives -inf, not NaN); `any`/`all` of uint8 return uint8, as torch does.
What torch refuses for a dtype (`var` of ints) is refused at the user's line.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from tessera import exc
from tessera.ir.primitive import torch_primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch
from tessera.language.reductions import element_count, record_reduction as reduce
from tessera.language.view import cast, normalized_dims
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def only_tile_value(kind: str, value: Any) -> TileValue:
    """`value`, which must be a tile value: the torch reductions here take no tensors or scalars."""
    if not isinstance(value, TileValue):
        spelling = kind if "." in kind else f"torch.{kind}"
        raise exc.UnsupportedOperationError(f"{spelling} of {type(value).__name__} {value!r}: only tile values "
                                            "take it inside a tile loop", location=user_location())
    return value


def _wide(tracer: Tracer, value: TileValue) -> TileValue:
    """16-bit floats compute in fp32, as torch's CPU and GPU kernels do."""
    return cast(tracer, value, torch.float32) if value.dtype in (torch.float16, torch.bfloat16) else value


def _correction(dim: Any, unbiased: Any, correction: Any) -> tuple[Any, float]:
    """torch's spellings: var(x, dim, unbiased, keepdim), var(x, unbiased), var(x, dim, correction=)."""
    if isinstance(dim, bool):  # var(x, False): the old positional `unbiased`
        dim, unbiased = None, dim
    if correction is not None:
        return dim, float(correction)
    return dim, 0.0 if unbiased is False else 1.0


def _mean(tracer: Tracer, wide: TileValue, dim: Any, keepdim: bool, count: Any) -> TileValue:
    """The mean as the sum of `x / n`: a sum of values near the dtype's largest would overflow
    before the division (torch's running mean does not)."""
    return reduce(tracer, "sum", apply_elementwise(tracer, "truediv", wide, count), dim, keepdim)


def variance(tracer: Tracer, value: TileValue, dim: Any, correction: float, keepdim: bool,
             root: bool = False) -> TileValue:
    """The variance, or with `root` the standard deviation. The deviation is taken of the
    deviations divided by their largest magnitude, then scaled back: their squares would
    overflow for values beyond ~1e19, where the deviation itself is finite (as torch computes)."""
    wide = _wide(tracer, value)
    count = element_count(tracer, value, dim, wide.dtype)
    mean = _mean(tracer, wide, dim, True, count)
    centered = apply_elementwise(tracer, "sub", wide, mean)
    scale = None
    if root:
        largest = reduce(tracer, "amax", apply_elementwise(tracer, "abs", centered), dim, True)
        scale = apply_elementwise(tracer, "where", apply_elementwise(tracer, "eq", largest, 0), 1.0, largest)
        centered = apply_elementwise(tracer, "truediv", centered, scale)
    squares = reduce(tracer, "sum", apply_elementwise(tracer, "mul", centered, centered), dim, keepdim)
    integral = int(correction) if float(correction).is_integer() else correction
    if isinstance(count, TileValue):  # over a tile: its valid lanes, counted per program
        denominator = apply_elementwise(tracer, "maximum", apply_elementwise(tracer, "sub", count, integral), 0)
    else:
        denominator = count - integral
        denominator = max(0, denominator) if isinstance(denominator, (int, float)) else sympy.Max(denominator, 0)
    result = apply_elementwise(tracer, "truediv", squares, denominator)
    if scale is None:
        return result
    # the scale without its kept dims when keepdim is False (reducing a dim of size 1 drops it)
    scale = scale if keepdim else reduce(tracer, "amax", scale, dim, False)
    return apply_elementwise(tracer, "mul", apply_elementwise(tracer, "sqrt", result), scale)


def _variance_rule(kind: str) -> Any:
    """`var`/`std`, and `var_mean`/`std_mean`, which also return the mean (torch's pair order)."""
    def rule(tracer: Tracer, value: TileValue, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None, out: Any = None) -> Any:
        value = only_tile_value(kind, value)
        dim, corrected = _correction(dim, unbiased, tracer.pinned_int(correction, f"torch.{kind} correction"))
        ask_torch(f"torch.{kind}", getattr(torch, kind), (value,), {"dim": dim, "correction": corrected})
        result = cast(tracer, variance(tracer, value, dim, corrected, keepdim, kind.startswith("std")), value.dtype)
        if not kind.endswith("_mean"):
            return result
        wide = _wide(tracer, value)
        mean = _mean(tracer, wide, dim, keepdim, element_count(tracer, value, dim, wide.dtype))
        return result, cast(tracer, mean, value.dtype)
    return rule


var_p = torch_primitive("var", torch.var, T.var)(_variance_rule("var"))
std_p = torch_primitive("std", torch.std, T.std)(_variance_rule("std"))
var_mean_p = torch_primitive("var_mean", torch.var_mean)(_variance_rule("var_mean"))
std_mean_p = torch_primitive("std_mean", torch.std_mean)(_variance_rule("std_mean"))


@torch_primitive("logsumexp", torch.logsumexp, T.logsumexp, torch.special.logsumexp)
def logsumexp_p(tracer: Tracer, value: TileValue, dim: Any, keepdim: bool = False, *, out: Any = None) -> TileValue:
    value = only_tile_value("logsumexp", value)
    ask_torch("torch.logsumexp", torch.logsumexp, (value,), {"dim": dim, "keepdim": keepdim})
    result_dtype = value.dtype if value.dtype.is_floating_point else torch.get_default_dtype()
    wide = _wide(tracer, cast(tracer, value, result_dtype))
    peak = reduce(tracer, "amax", wide, dim, True)
    infinite = apply_elementwise(tracer, "eq", apply_elementwise(tracer, "abs", peak), float("inf"))
    shift = apply_elementwise(tracer, "where", infinite, 0.0, peak)
    total = reduce(tracer, "sum", apply_elementwise(tracer, "exp", apply_elementwise(tracer, "sub", wide, shift)),
                   dim, keepdim)
    if not keepdim:
        shift = reduce(tracer, "amax", shift, dim, False)  # drop the kept dims (one value per row)
    return cast(tracer, apply_elementwise(tracer, "add", apply_elementwise(tracer, "log", total), shift), result_dtype)


def _truth_rule(kind: str) -> Any:
    def rule(tracer: Tracer, value: TileValue, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> TileValue:
        value = only_tile_value(kind, value)
        ask_torch(f"torch.{kind}", getattr(torch, kind), (value,),
                  {"dim": dim, "keepdim": keepdim} if dim is not None else {})
        nonzero = apply_elementwise(tracer, "ne", value, 0)
        result = reduce(tracer, "amax" if kind == "any" else "amin", nonzero, dim, keepdim)
        return cast(tracer, result, torch.uint8 if value.dtype == torch.uint8 else torch.bool)
    return rule


any_p = torch_primitive("any", torch.any, T.any)(_truth_rule("any"))
all_p = torch_primitive("all", torch.all, T.all)(_truth_rule("all"))


@torch_primitive("count_nonzero", torch.count_nonzero, T.count_nonzero)
def count_nonzero_p(tracer: Tracer, value: TileValue, dim: Any = None) -> TileValue:
    value = only_tile_value("count_nonzero", value)
    ask_torch("torch.count_nonzero", torch.count_nonzero, (value,), {"dim": dim} if dim is not None else {})
    return reduce(tracer, "sum", apply_elementwise(tracer, "ne", value, 0), dim, False, torch.int64)


def _norm_of(tracer: Tracer, value: TileValue, order: Any, dim: Any, keepdim: bool, dtype: Any) -> TileValue:
    """The `order`-norm of the magnitudes, as torch computes it (no rescaling: a 2-norm past the
    dtype's range is inf in torch too)."""
    ask_torch("torch.linalg.vector_norm", torch.linalg.vector_norm, (value,),
              {"ord": order, "dim": dim, "keepdim": keepdim, "dtype": dtype})
    result_dtype = dtype if dtype is not None else value.dtype
    magnitude = apply_elementwise(tracer, "abs", _wide(tracer, cast(tracer, value, result_dtype)))
    order = float(order)
    if order == float("inf"):
        result = reduce(tracer, "amax", magnitude, dim, keepdim)
    elif order == float("-inf"):
        result = reduce(tracer, "amin", magnitude, dim, keepdim)
    elif order == 0:
        result = cast(tracer, reduce(tracer, "sum", apply_elementwise(tracer, "ne", magnitude, 0), dim, keepdim),
                      magnitude.dtype)
    elif order == 1:
        result = reduce(tracer, "sum", magnitude, dim, keepdim)
    elif order == 2:
        squares = apply_elementwise(tracer, "mul", magnitude, magnitude)
        result = apply_elementwise(tracer, "sqrt", reduce(tracer, "sum", squares, dim, keepdim))
    else:
        powers = apply_elementwise(tracer, "pow", magnitude, order)
        result = apply_elementwise(tracer, "pow", reduce(tracer, "sum", powers, dim, keepdim), 1.0 / order)
    return cast(tracer, result, result_dtype)


@torch_primitive("vector_norm", torch.linalg.vector_norm)
def vector_norm_p(tracer: Tracer, value: TileValue, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                  dtype: Any = None, out: Any = None) -> TileValue:
    return _norm_of(tracer, only_tile_value("linalg.vector_norm", value), ord, dim, keepdim, dtype)


@torch_primitive("norm", torch.norm, T.norm)
def norm_p(tracer: Tracer, value: TileValue, p: Any = "fro", dim: Any = None, keepdim: bool = False, *,
           dtype: Any = None, out: Any = None) -> TileValue:
    value = only_tile_value("norm", value)
    if isinstance(p, str):
        dims = normalized_dims(value, dim)
        if p != "fro" or len(dims) > 2:
            raise exc.UnsupportedOperationError(
                f"torch.norm(p={p!r}) inside a tile loop: only vector norms (a number p, or 'fro') reduce here",
                location=user_location(), hint="use torch.linalg.vector_norm(v, ord, dim) for vector norms")
        p = 2  # the Frobenius norm is the 2-norm of the entries
    return _norm_of(tracer, value, p, dim, keepdim, dtype)
