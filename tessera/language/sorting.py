"""`torch.sort`, `torch.argsort` and `torch.topk` of tile values: values and indices, as torch gives them.

Triton sorts only values, along the last dimension. A SORT node sorts one 64-bit key per element:
the value's bits mapped to an order-preserving int32 in the high half and its position in the low
half, so equal values keep their order (a stable sort) and the indices come back with the values.
Lanes past the extent sort to the end. A 64-bit value (int64, float64) does not fit the key: the
lowering sorts its rank among the lanes instead.

>>> values, indices = torch.sort(x[tile, :], dim=1, descending=True)         # doctest: +SKIP
>>> best, where = torch.topk(scores[tile, :], 4)                              # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import UNIT, AxisKind, Op
from tessera.ir.primitive import Primitive
from tessera.language.operands import ask_torch, pinned_int
from tessera.language.view import permute
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor
SORTABLE = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
            torch.int8, torch.uint8, torch.bool)


def sorted_with_indices(tracer: Tracer, value: Any, dim: Any, descending: bool, k: int | None, what: str) -> Any:
    if not isinstance(value, TileValue):
        raise exc.UnsupportedOperationError(f"{what} of {type(value).__name__}: only tile values sort inside a "
                                            "tile loop", location=user_location())
    # torch's dtype rules (topk of bools: torch refuses it; the others sort what torch.sort sorts)
    ask_torch(what, torch.topk if k is not None else torch.sort, (value,),
              {"dim": dim, **({"k": 1} if k is not None else {})})
    if value.dtype not in SORTABLE:
        raise exc.DtypeError(f"{what} of a {value.dtype} value: tile values of this dtype do not sort",
                             location=user_location(), hint="convert to float32, float64, int32 or int64 first")
    if value.dim() == 0:
        raise exc.UnsupportedOperationError(f"{what} of a 0-d value", location=user_location(),
                                            hint="sort a value with a dimension")
    rank = value.dim()
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise exc.IndexingError(f"{what}: dim={dim!r} for a value of rank {rank}", location=user_location())
    position = dim % rank
    order = [*range(position), *range(position + 1, rank), position]  # the sorted dim last: Triton sorts there
    moved = permute(tracer, value, *order) if position != rank - 1 else value
    axis = moved.axes[-1]
    shape = moved.axes
    if k is not None:
        extent = tracer.symbols.evaluate(axis.end) if axis.kind is AxisKind.WHOLE else axis.block
        k = pinned_int(tracer, k, f"{what}'s k")  # an int argument: this call's k, guarded
        # (any k: the selection takes the next power of two of lanes, the axis of k masks the rest)
        if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= axis.block or k > extent:
            raise exc.UnsupportedOperationError(
                f"{what}: k={k!r} of a dimension of {extent} elements held in {axis.block} lanes: k must be an "
                "int from 1 to the dimension's length", location=user_location(),
                hint="pass k as a Python int no larger than the dimension (torch raises too)")
        shape = (*moved.axes[:-1], UNIT if k == 1 else tracer.full_axis(k))
    node = tracer.emit(Op.SORT, [moved.node], shape, None, dtypes=(value.dtype, torch.int64),
                       descending=bool(descending), k=k, axis=axis).node
    values, indices = (tracer.emit(Op.ITEM, [node], shape, dtype, index=i)
                       for i, dtype in enumerate((value.dtype, torch.int64)))
    if position != rank - 1:
        back = [order.index(i) for i in range(rank)]
        values, indices = permute(tracer, values, *back), permute(tracer, indices, *back)
    return values, indices


def _sort_trace(tracer: Tracer, value: Any, dim: Any = -1, descending: bool = False, *, stable: bool = False,
                out: Any = None) -> Any:
    values, indices = sorted_with_indices(tracer, value, dim, descending, None, "torch.sort")
    return torch.return_types.sort((values, indices))


def _topk_trace(tracer: Tracer, value: Any, k: int, dim: Any = -1, largest: bool = True, sorted: bool = True, *,
                out: Any = None) -> Any:
    values, indices = sorted_with_indices(tracer, value, dim, largest, k, "torch.topk")
    return torch.return_types.topk((values, indices))


def _argsort_trace(tracer: Tracer, value: Any, dim: Any = -1, descending: bool = False, *, stable: bool = False,
                   out: Any = None) -> Any:
    return sorted_with_indices(tracer, value, dim, descending, None, "torch.argsort")[1]


def stable_sort(value: torch.Tensor, dim: int = -1, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager mode's sort: stable, as the generated sort (torch's CUDA sort is not, by default),
    with every NaN the largest value. torch's CUDA radix sort puts NaNs whose sign bit is set
    before the numbers (pytorch/pytorch#190781; rows of 33 and more under torch 2.11): the sort
    runs on a key whose NaNs are positive, and the values are read back from `value`."""
    key = value
    if value.is_floating_point():
        key = torch.where(value.isnan(), torch.full((), float("nan"), dtype=value.dtype, device=value.device), value)
    _, indices = torch.sort(key, dim=dim, descending=descending, stable=True)
    values = torch.gather(value, dim, indices) if value.dim() else value.clone()
    return values, indices


def _argsort_eager(value: Any, dim: Any = -1, descending: bool = False, *, stable: bool = False,
                   out: Any = None) -> Any:
    return stable_sort(value, dim, descending)[1]


def _sort_eager(value: Any, dim: Any = -1, descending: bool = False, *, stable: bool = False, out: Any = None) -> Any:
    return torch.return_types.sort(stable_sort(value, dim, descending))


sort_p = Primitive("sort", torch_functions=(torch.sort, T.sort))
sort_p.def_eager(_sort_eager)
sort_p.def_trace(_sort_trace)
def _topk_eager(value: Any, k: int, dim: Any = -1, largest: bool = True, sorted: bool = True, *,
                out: Any = None) -> Any:
    # the first k of the stable sort: torch's topk may name any of tied lanes, the generated one the earliest
    torch.topk(value, k, dim=dim, largest=largest)  # torch's own checks (k too large, bools)
    values, indices = stable_sort(value, dim, largest)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


topk_p = Primitive("topk", torch_functions=(torch.topk, T.topk))
topk_p.def_eager(_topk_eager)
topk_p.def_trace(_topk_trace)
argsort_p = Primitive("argsort", torch_functions=(torch.argsort, T.argsort))
argsort_p.def_eager(_argsort_eager)
argsort_p.def_trace(_argsort_trace)
