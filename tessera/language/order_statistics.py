"""Running extremes and order statistics of tile values: `torch.cummax`, `torch.cummin` (values and
indices), `torch.logcumsumexp`, `torch.kthvalue` and `torch.median` (torch's lower median).

`cummax`/`cummin` scan (value, index) pairs with a combine that keeps the later lane on ties and
lets a NaN win (torch's rule: `isnan(x) or x >= running`); the index counts lanes within the value
(within the block for a tile dim, as eager's block counts them). `logcumsumexp` scans with
log-add-exp in fp32 (fp64 for fp64), exact for equal and infinite operands. `kthvalue` and `median`
take one lane of the stable sort (sorting.py), so they need whole dims; a NaN in a row makes its
median NaN at the first NaN's index, as torch gives. Ties pick the earliest index in every mode
(eager runs the same stable rule; torch's own kthvalue may name another tied index).

>>> best, where = torch.cummax(x[tile, :], dim=1)                                 # doctest: +SKIP
>>> middle = x[tile, :].median(dim=1).values                                     # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable

import sympy
import torch

from tessera import exc
from tessera.ir.graph import UNIT
from tessera.ir.primitive import defined_primitive
from tessera.language.copies import local_index
from tessera.language.eager_indexing import refuse_tile_dims
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch
from tessera.language.reductions import record_reduction
from tessera.language.scans import scan_trace
from tessera.language.slicing import known_int, slice_dim, whole_extent
from tessera.language.sorting import sorted_with_indices, stable_sort
from tessera.language.statistics import only_tile_value
from tessera.language.view import cast, reshape_value, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def _dim(value: TileValue, dim: Any, what: str) -> int:
    rank = max(value.dim(), 1)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise exc.IndexingError(f"{what}: dim={dim!r} for a value of rank {value.dim()}", location=user_location(),
                                hint=f"pass an int in [-{rank}, {rank})")
    return dim % rank


# -- torch.cummax / torch.cummin ------------------------------------------------------------------
def _running_extreme(kind: str) -> Callable[..., Any]:
    keeps = "ge" if kind == "cummax" else "le"
    result_type = getattr(torch.return_types, kind)

    def rule(tracer: Tracer, value: Any, dim: int, *, out: Any = None) -> Any:
        value = only_tile_value(f"torch.{kind}", value)
        ask_torch(f"torch.{kind}", getattr(torch, kind), (value,), {"dim": dim})
        if value.dim() == 0:
            return result_type((value, cast(tracer, apply_elementwise(tracer, "mul", value, 0), torch.int64)))
        d = _dim(value, dim, f"torch.{kind}")
        lanes = local_index(tracer, value, d)
        spread = [UNIT] * value.dim()
        spread[d] = value.axes[d]
        index = cast(tracer, view_axes(tracer, lanes, tuple(spread), f"{kind} lanes"), torch.int64) \
            if isinstance(lanes, TileValue) else cast(tracer, apply_elementwise(tracer, "mul", value, 0), torch.int64)

        def later_wins(a: Any, a_index: Any, b: Any, b_index: Any) -> tuple[Any, Any]:
            # b is the later run: it wins ties and when it is NaN; a NaN a wins over a number b
            take = apply_elementwise(tracer, "bitwise_or", apply_elementwise(tracer, keeps, b, a),
                                     apply_elementwise(tracer, "ne", b, b))
            return (apply_elementwise(tracer, "where", take, b, a),
                    apply_elementwise(tracer, "where", take, b_index, a_index))
        later_wins.__name__ = f"{kind}_combine"
        values, indices = scan_trace(tracer, later_wins, (value, index), d, reverse=False)
        return result_type((values, indices))
    rule.__name__ = f"_{kind}_trace"
    return rule


# -- torch.logcumsumexp ---------------------------------------------------------------------------
def _logcumsumexp_trace(tracer: Tracer, value: Any, dim: int, *, out: Any = None) -> TileValue:
    value = only_tile_value("torch.logcumsumexp", value)
    answer = ask_torch("torch.logcumsumexp", torch.logcumsumexp, (value,), {"dim": dim}).dtype
    if value.dim() == 0:
        return value
    d = _dim(value, dim, "torch.logcumsumexp")
    wide = cast(tracer, value, torch.float64 if answer == torch.float64 else torch.float32)

    def log_add_exp(a: Any, b: Any) -> Any:
        # max + log1p(exp(-|a - b|)); equal operands (two infinities included) add log(2) exactly
        high = apply_elementwise(tracer, "maximum", a, b)
        gap = apply_elementwise(tracer, "neg", apply_elementwise(tracer, "abs", apply_elementwise(tracer, "sub", a, b)))
        gap = apply_elementwise(tracer, "where", apply_elementwise(tracer, "eq", a, b), 0.0, gap)
        return apply_elementwise(tracer, "add", high, apply_elementwise(
            tracer, "log1p", apply_elementwise(tracer, "exp", gap)))
    log_add_exp.__name__ = "log_add_exp"
    return cast(tracer, scan_trace(tracer, log_add_exp, wide, d, reverse=False), answer)


# -- torch.kthvalue / torch.median ----------------------------------------------------------------
def _kth(tracer: Tracer, value: TileValue, k: Any, dim: int, keepdim: bool, what: str) -> tuple[TileValue, TileValue]:
    """The k-th smallest lane along whole dim `dim` (1-based) and its index, from the stable sort."""
    size = whole_extent(tracer, value, dim, what)
    if not isinstance(k, bool) and (hasattr(k, "number") or isinstance(k, sympy.Expr)):  # k=v.size(1)
        k = known_int(tracer, k, what)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= size:
        raise exc.IndexingError(f"{what}: k={k!r} for a dim of size {size}", location=user_location(),
                                hint=f"pass an int in 1 .. {size} (torch refuses it too)")
    values, indices = sorted_with_indices(tracer, value, dim, False, None, what)
    pick = slice(k - 1, k) if keepdim else k - 1
    return slice_dim(tracer, values, dim, pick), slice_dim(tracer, indices, dim, pick)


def _kthvalue_trace(tracer: Tracer, value: Any, k: Any, dim: int = -1, keepdim: bool = False, *,
                    out: Any = None) -> Any:
    value = only_tile_value("torch.kthvalue", value)
    ask_torch("torch.kthvalue", torch.kthvalue, (value, 1), {})  # torch's dtype rules (no bools)
    if value.dim() == 0:
        value = view_axes(tracer, value, (UNIT,), "kthvalue")
        found = _kth(tracer, value, k, 0, False, "torch.kthvalue")
    else:
        found = _kth(tracer, value, k, _dim(value, dim, "torch.kthvalue"), bool(keepdim), "torch.kthvalue")
    return torch.return_types.kthvalue(found)


def _median_trace(tracer: Tracer, value: Any, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> Any:
    value = only_tile_value("torch.median", value)
    ask_torch("torch.median", torch.median, (value,), {})  # torch's dtype rules (no bools)
    if dim is None:  # of every element: one value, no index
        count = 1
        for d in range(value.dim()):
            count *= whole_extent(tracer, value, d, "torch.median of every element")
        flat = reshape_value(tracer, value, (count,)) if value.dim() != 1 else value
        return _median_along(tracer, flat if flat.dim() else view_axes(tracer, flat, (UNIT,), "median"), 0, False)[0]
    if value.dim() == 0:
        return torch.return_types.median(_median_along(tracer, view_axes(tracer, value, (UNIT,), "median"), 0, False))
    return torch.return_types.median(_median_along(tracer, value, _dim(value, dim, "torch.median"), bool(keepdim)))


def _median_along(tracer: Tracer, value: TileValue, dim: int, keepdim: bool) -> tuple[TileValue, TileValue]:
    size = whole_extent(tracer, value, dim, "torch.median")
    middle, where = _kth(tracer, value, (size - 1) // 2 + 1, dim, keepdim, "torch.median")
    if not value.dtype.is_floating_point:
        return middle, where
    # a NaN sorts last, but torch's median of a row holding one is NaN, at the first NaN's index
    nan = cast(tracer, apply_elementwise(tracer, "ne", value, value), torch.int32)
    any_nan = apply_elementwise(tracer, "gt", record_reduction(tracer, "amax", nan, dim, keepdim), 0)
    first_nan = record_reduction(tracer, "argmax", nan, dim, keepdim)
    return (apply_elementwise(tracer, "where", any_nan, float("nan"), middle),
            apply_elementwise(tracer, "where", any_nan, first_nan, where))


# -- eager rules: torch's, with the trace's stable tie rule and its refusal of tile dims ----------
def _kthvalue_eager(value: Any, k: int, dim: int = -1, keepdim: bool = False, *, out: Any = None) -> Any:
    torch.kthvalue(value.reshape(-1)[:1], 1)  # torch's own dtype checks (no bools), as the trace asks
    if value.dim():
        refuse_tile_dims(value, [dim % value.dim()], "torch.kthvalue")
    values, indices = stable_sort(value, dim)
    take = torch.full((1,), k - 1, dtype=torch.int64, device=value.device) if value.dim() else None
    if take is None:
        return torch.return_types.kthvalue((values, indices))
    picked = (values.index_select(dim, take), indices.index_select(dim, take))
    return torch.return_types.kthvalue(tuple(p if keepdim else p.squeeze(dim) for p in picked))


def _median_eager(value: Any, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> Any:
    torch.median(value.reshape(-1)[:1])  # torch's own dtype checks (no bools), as the trace asks
    if dim is None:
        refuse_tile_dims(value, range(value.dim()), "torch.median of every element")
        return _median_eager(value.reshape(-1), 0)[0]
    if value.dim():
        refuse_tile_dims(value, [dim % value.dim()], "torch.median")
    flat = value if value.dim() else value.reshape(1)
    position = dim % flat.dim()
    middle, where = _kthvalue_eager(flat, (flat.size(position) - 1) // 2 + 1, position, keepdim)
    if value.is_floating_point():
        nan = torch.isnan(flat)
        any_nan = nan.any(position, keepdim=keepdim)
        middle = torch.where(any_nan, torch.full_like(middle, float("nan")), middle)
        where = torch.where(any_nan, nan.to(torch.uint8).argmax(position, keepdim=keepdim), where)
    if not value.dim():
        middle, where = middle.reshape(()), where.reshape(())
    return torch.return_types.median((middle, where))


def _cumulative_eager(function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(value: Any, dim: int, *, out: Any = None) -> Any:
        return function(value, dim)
    rule.__name__ = f"_{function.__name__}_eager"
    return rule


cummax_p = defined_primitive("cummax", _cumulative_eager(torch.cummax), _running_extreme("cummax"),
                             torch_functions=(torch.cummax, T.cummax))
cummin_p = defined_primitive("cummin", _cumulative_eager(torch.cummin), _running_extreme("cummin"),
                             torch_functions=(torch.cummin, T.cummin))
logcumsumexp_p = defined_primitive("logcumsumexp", _cumulative_eager(torch.logcumsumexp), _logcumsumexp_trace,
                                   torch_functions=(torch.logcumsumexp, T.logcumsumexp))
kthvalue_p = defined_primitive("kthvalue", _kthvalue_eager, _kthvalue_trace, torch_functions=(torch.kthvalue, T.kthvalue))
median_p = defined_primitive("median", _median_eager, _median_trace, torch_functions=(torch.median, T.median))
