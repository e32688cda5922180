"""`torch.gather(src, dim, index)` of tile values held in registers.

`src`'s gathered dim must be a whole dimension (`x[tile, :]`): its lanes are the values an index
picks from. Each result element compares its index with every lane of that dim and keeps the
one that matches (a one-hot select and sum, built from elementwise ops and a reduction, so
every backend runs it). Registers cannot raise: an index outside the dim gives 0, as a gathered
load from memory does; eager mode (torch itself) raises there.
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import UNIT, Op
from tessera.ir.primitive import torch_primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.reductions import record_reduction
from tessera.language.view import cast, permute, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


@torch_primitive("gather", torch.gather, T.gather)
def gather_p(tracer: Tracer, src: Any, dim: int, index: Any, *, sparse_grad: bool = False, out: Any = None) -> TileValue:
    if not (isinstance(src, TileValue) and isinstance(index, TileValue)):
        raise exc.UnsupportedOperationError(
            "torch.gather inside a tile loop takes tile values (src and index)", location=user_location(),
            hint="load both first, e.g. torch.gather(x[tile, :], 1, idx[tile, tile_k])")
    rank = len(src.axes)
    try:  # torch's own dtype rules (int64 and int32 indices), so eager and compiled refuse alike
        torch.gather(torch.zeros(1, dtype=src.dtype), 0, torch.zeros(1, dtype=index.dtype))
    except RuntimeError as error:
        raise exc.DtypeError(f"torch.gather of {src.dtype} by a {index.dtype} index: {error}",
                             location=user_location(), hint="convert the index: index.to(torch.int64)") from None
    if len(index.axes) != rank:
        raise exc.ShapeMismatchError(f"torch.gather: index has {len(index.axes)} dims, src has {rank}",
                                     location=user_location(), hint="give the index as many dims as src")
    dim = dim % max(rank, 1)
    lanes_axis = tracer.canonical_axis(src.axes[dim]) if rank else UNIT
    if lanes_axis is not UNIT and lanes_axis.is_tile:
        raise exc.UnsupportedOperationError(
            f"torch.gather along dim {dim}, which is a tile of src: the values an index picks from must be "
            "a whole dimension", location=user_location(),
            hint="load that dim whole: x[tile, :] instead of x[tile, tile_k]")
    # src with the gathered dim moved last and a unit dim left in its place; index with a last unit dim
    order = [d for d in range(rank) if d != dim] + [dim]
    moved = permute(tracer, src, order) if order != list(range(rank)) else src
    src_lanes = view_axes(tracer, moved, tuple(moved.axes[:dim]) + (UNIT,) + tuple(moved.axes[dim:]), "gather lanes")
    wanted = view_axes(tracer, index, tuple(index.axes) + (UNIT,), "gather index")
    if lanes_axis is UNIT:
        positions: Any = 0
    else:
        position_axes = (UNIT,) * rank + (lanes_axis,)
        positions = view_axes(tracer, tracer.tile_index(lanes_axis), position_axes, "gather positions")
    hit = apply_elementwise(tracer, "eq", wanted, positions)
    wide = src_lanes if src_lanes.dtype != torch.bool else cast(tracer, src_lanes, torch.int32)
    picked = apply_elementwise(tracer, "where", hit, wide, 0)
    total = record_reduction(tracer, "sum", picked, rank, False, dtype=wide.dtype)
    return cast(tracer, total, src.dtype) if total.dtype != src.dtype else total


@torch_primitive("take_along_dim", torch.take_along_dim, T.take_along_dim)
def take_along_dim_p(tracer: Tracer, src: Any, indices: Any, dim: int | None = None, *, out: Any = None) -> TileValue:
    """`torch.take_along_dim(src, indices, dim)`: a gather whose operands broadcast in the other dims
    (the gather's select-and-sum broadcasts them as torch does)."""
    if dim is None:
        raise exc.UnsupportedOperationError(
            "torch.take_along_dim without dim (it flattens the value first)", location=user_location(),
            hint="name the dim: torch.take_along_dim(v, indices, dim=1)")
    if isinstance(src, TileValue) and isinstance(indices, TileValue) and len(src.axes) != len(indices.axes):
        raise exc.ShapeMismatchError(
            f"torch.take_along_dim: indices have {len(indices.axes)} dims, the value {len(src.axes)}",
            location=user_location(), hint="give the indices as many dims as the value (torch requires it)")
    return gather_p.trace_rule(tracer, src, dim, indices)
