"""Copies and masks of tile values: `clone contiguous detach flatten tril triu`.

A tile value already is a copy in registers, so `clone`/`contiguous`/`detach` return it as is
(eager mode runs torch's, on a tensor that holds a copy too). `tril`/`triu` compare each lane's
row and column index within the value (the last two dims, counted from 0 as torch counts them in
the block eager mode holds), so they work on tile dims and whole dims alike.
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import UNIT
from tessera.ir.primitive import torch_primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch
from tessera.language.statistics import only_tile_value
from tessera.language.view import reshape_value, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def _copy(name: str) -> Any:
    def rule(tracer: Tracer, value: Any, *args: Any, **kwargs: Any) -> TileValue:
        return only_tile_value(f"Tensor.{name}", value)
    rule.__name__ = f"_{name}_trace"
    return rule


torch_primitive("clone", T.clone, torch.clone)(_copy("clone"))
torch_primitive("contiguous", T.contiguous)(_copy("contiguous"))
torch_primitive("detach", T.detach, torch.detach)(_copy("detach"))


@torch_primitive("flatten", T.flatten, torch.flatten, torch.ravel, T.ravel)
def flatten_p(tracer: Tracer, value: Any, start_dim: int = 0, end_dim: int = -1) -> TileValue:
    value = only_tile_value("torch.flatten", value)
    if value.dim() == 0:
        return view_axes(tracer, value, (UNIT,), "flatten")
    first, last = start_dim % value.dim(), end_dim % value.dim()
    if first >= last:
        return value
    shape = list(value.shape)
    merged = shape[first:last + 1]
    size: Any = 1
    for item in merged:  # whole dims merge to their product; a tile among them leaves it to -1
        if isinstance(item, int):
            continue  # a unit dim
        size = -1 if size == -1 or item.axis.is_tile else size * item.axis.end
    return reshape_value(tracer, value, tuple(shape[:first] + [size] + shape[last + 1:]))


def local_index(tracer: Tracer, value: TileValue, dim: int) -> Any:
    """Lane numbers of dim `dim` counted from the value's first lane (as eager's block counts them)."""
    axis = tracer.canonical_axis(value.axes[dim])
    if axis is UNIT:
        return 0
    index = tracer.tile_index(axis)
    return apply_elementwise(tracer, "sub", index, axis.begin) if axis.is_tile else index


def _triangle(name: str, keep: str) -> Any:
    def rule(tracer: Tracer, value: Any, diagonal: int = 0, *, out: Any = None) -> TileValue:
        value = only_tile_value(f"torch.{name}", value)
        ask_torch(f"torch.{name}", getattr(torch, name), (value,), {"diagonal": diagonal})
        if value.dim() < 2:
            raise exc.ShapeMismatchError(f"torch.{name} of a {value.dim()}-dim tile value", location=user_location(),
                                         hint="torch takes matrices (2 or more dims) too")
        rank = value.dim()
        rows, columns = local_index(tracer, value, rank - 2), local_index(tracer, value, rank - 1)
        if isinstance(rows, TileValue):
            rows = view_axes(tracer, rows, (*rows.axes, UNIT), f"{name} rows")
        if isinstance(columns, TileValue) or isinstance(rows, TileValue):
            keep_mask = apply_elementwise(tracer, keep, apply_elementwise(tracer, "sub", columns, rows), diagonal)
        else:  # 1 x 1 matrices: every lane is on the diagonal; a mask of the value's shape, all one way
            kept = 0 <= diagonal if keep == "le" else 0 >= diagonal
            keep_mask = apply_elementwise(tracer, "bitwise_or" if kept else "bitwise_and",
                                          apply_elementwise(tracer, "ne", value, value), kept)
        empty = False if value.dtype == torch.bool else 0
        return apply_elementwise(tracer, "where", keep_mask, value, empty)
    rule.__name__ = f"_{name}_trace"
    return rule


torch_primitive("tril", torch.tril, T.tril)(_triangle("tril", "le"))
torch_primitive("triu", torch.triu, T.triu)(_triangle("triu", "ge"))
