"""Constant slices and int indices of tile values along whole dims (`v[:, 8:16]`, `v[..., 0]`,
`v[:, ::2]`), and what is built on them: `torch.cat` of any count, `torch.diff`, `F.glu`.

Registers cannot be addressed, so a slice picks lanes: each result lane compares the source lane
it wants (start + step * position) with every lane of the dim and keeps the match (a one-hot
select and sum, as gather.py does). Only whole dims (read with `:`) are sliced: a tile's extent
varies per tile, so a slice of it has no constant size (a located error).
"""
from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.nn.functional as F

from tessera import exc
from tessera.ir.graph import UNIT, AxisKind, Axis, Op
from tessera.ir.primitive import torch_primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch
from tessera.language.reductions import record_reduction
from tessera.language.statistics import only_tile_value
from tessera.language.eager_indexing import is_constant_index, sliced_tile_dim_error
from tessera.language.view import cast, view_axes, view_dtype
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor
_SAME_WIDTH_INTS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
                    torch.bfloat16: torch.int16}


def whole_extent(tracer: Tracer, value: TileValue, dim: int, what: str,
                 error: type[exc.UnsupportedOperationError] = exc.UnsupportedOperationError) -> int:
    """The size of dim `dim` of `value`, which must be a whole dimension held in one block."""
    axis = tracer.canonical_axis(value.axes[dim])
    if axis is UNIT:
        return 1
    extent = sympy.sympify(axis.end)
    if axis.kind is AxisKind.WHOLE and sympy.sympify(axis.begin) == 0:
        if extent.is_Integer:
            return int(extent)
        if extent.free_symbols <= set(tracer.symbols.values):
            size = int(tracer.symbols.evaluate(extent))
            tracer.symbols.guard(sympy.Eq(extent, size), f"dimension {extent} is {size}, sliced by {what}")
            return size
    raise sliced_tile_dim_error(what, dim, "a tile" if axis.is_tile else "a dimension read in chunks (reduction_loops)",
                                error)


def pick_lanes(tracer: Tracer, value: TileValue, dim: int, axis: Axis, wanted: Any) -> TileValue:
    """`value` with dim `dim` replaced by `axis`, whose lane p holds value's lane wanted[p] (0 where
    wanted[p] names no lane). `wanted` is an int32 value of axes (axis,), or an int (axis UNIT)."""
    bits = _SAME_WIDTH_INTS.get(value.dtype)
    if bits is not None:  # a float's lane is picked as its bits: a float sum (+0.0 start) lost a -0.0's sign
        return view_dtype(tracer, pick_lanes(tracer, view_dtype(tracer, value, bits), dim, axis, wanted), value.dtype)
    rank = value.dim()
    lanes_axis = tracer.canonical_axis(value.axes[dim])
    # source: dim moved to a new last position (a unit dim left in its place); wanted spread along dim
    if isinstance(wanted, TileValue):
        spread = [UNIT] * (rank + 1)
        spread[dim] = axis
        wanted = view_axes(tracer, wanted, tuple(spread), "slice lanes wanted")
    order = [*range(dim), *range(dim + 1, rank), dim]
    moved = value if dim == rank - 1 else tracer.emit(
        Op.PERMUTE, [value.node], tuple(value.axes[d] for d in order), value.dtype, order=order)
    source = view_axes(tracer, moved, (*moved.axes[:dim], UNIT, *moved.axes[dim:]), "slice source")
    if lanes_axis is UNIT:
        hit = apply_elementwise(tracer, "eq", wanted, 0)
    else:
        positions = view_axes(tracer, tracer.tile_index(lanes_axis), (UNIT,) * rank + (lanes_axis,), "slice lanes")
        hit = apply_elementwise(tracer, "eq", wanted, positions)
    # the one picked lane is summed in a 32-bit (or wider) dtype: 8- and 16-bit sums compiled for
    # the GPU gave wrong values (int8 off by 256, bf16 rows)
    wide_dtype = source.dtype
    if source.dtype in (torch.bool, torch.int8, torch.uint8, torch.int16):
        wide_dtype = torch.int32
    elif source.dtype.is_floating_point:
        wide_dtype = torch.float32  # fp8: widened, its -0.0 kept by the other lanes' -0.0
    wide = source if source.dtype == wide_dtype else cast(tracer, source, wide_dtype)
    picked = apply_elementwise(tracer, "where", hit, wide, -0.0 if wide_dtype.is_floating_point else 0)
    total = record_reduction(tracer, "sum", picked, rank, False, dtype=wide.dtype)
    return cast(tracer, total, value.dtype) if total.dtype != value.dtype else total


def _lane_numbers(tracer: Tracer, count: int, start: int, step: int) -> tuple[Axis, TileValue]:
    axis = tracer.full_axis(count)
    index = tracer.tile_index(axis)
    if step != 1:
        index = apply_elementwise(tracer, "mul", index, step)
    if start:
        index = apply_elementwise(tracer, "add", index, start)
    return axis, index


def slice_dim(tracer: Tracer, value: TileValue, dim: int, item: slice | int) -> TileValue:
    """`value` sliced (or, for an int, indexed: the dim dropped) along whole dim `dim`."""
    size = whole_extent(tracer, value, dim, f"the tile value index {item!r}")
    if isinstance(item, int):
        if not -size <= item < size:
            raise exc.IndexingError(f"index {item} is out of bounds for a dimension of size {size}",
                                    location=user_location(), hint=f"index with 0 .. {size - 1}")
        picked = pick_lanes(tracer, value, dim, UNIT, item % size) if size > 1 else value
        return view_axes(tracer, picked, tuple(a for d, a in enumerate(picked.axes) if d != dim), "index")
    start, stop, step = item.indices(size)
    if step <= 0:
        raise exc.IndexingError("a slice step must be positive (torch refuses negative steps too)",
                                location=user_location(), hint="use torch.flip on the tensor in memory")
    count = len(range(start, stop, step))
    if count == size:
        return value
    if count == 1:  # one lane: a dim of size 1, as torch's v[:, 2:3]
        return pick_lanes(tracer, value, dim, UNIT, start)
    # count 0 (v[:, 3:3], an empty tensor_split piece): a dim of no lanes (one masked lane), as torch's
    axis, wanted = _lane_numbers(tracer, count, start, step)
    return pick_lanes(tracer, value, dim, axis, wanted)


def constant_picks(tracer: Tracer, value: TileValue, index: Any) -> tuple[TileValue, Any]:
    """`value[index]`'s constant slices and ints of whole dims applied (picked lanes), and the
    index left for the view rules (`:` where a slice was, nothing where an int was)."""
    items = [_size_as_int(tracer, item) for item in (index if isinstance(index, tuple) else [index])]
    if not any(is_constant_index(item) for item in items):
        return value, index
    if Ellipsis in items:
        spot = items.index(Ellipsis)
        explicit = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (value.dim() - explicit)
    dims = []
    dim = 0
    for item in items:
        dims.append(dim)
        dim += item is not None
    for position in range(len(items) - 1, -1, -1):  # the last dim first: an int index drops its dim
        item = items[position]
        if is_constant_index(item):
            if dims[position] >= value.dim():
                break  # too many indices: the view rules say so
            value = slice_dim(tracer, value, dims[position], _constant(item))
            items[position:position + 1] = [] if not isinstance(item, slice) else [slice(None)]
    return value, tuple(items)


def _size_as_int(tracer: Tracer, item: Any) -> Any:
    """An index computed from sizes (`v[:, v.size(1) // 2]`) as this call's int, guarded as the
    sliced dim's size is (eager mode sees the int); anything else unchanged."""
    if isinstance(item, slice):
        parts = [_size_as_int(tracer, part) for part in (item.start, item.stop, item.step)]
        return slice(*parts) if parts != [item.start, item.stop, item.step] else item
    expression = item.number("a tile value index") if hasattr(item, "number") else item
    if isinstance(expression, sympy.Expr) and not expression.is_Integer \
            and expression.free_symbols <= set(tracer.symbols.values):
        return known_int(tracer, expression, "a tile value index")
    return item


def _constant(item: Any) -> Any:
    if isinstance(item, slice):
        return slice(*(None if p is None else int(p) for p in (item.start, item.stop, item.step)))
    return int(item)


def cat_values(tracer: Tracer, values: list[TileValue], dim: int) -> TileValue:
    """torch.cat of any count along a whole dim: lane p of the result takes piece k's lane
    p - offset_k, where offset_k <= p < offset_k + size_k."""
    rank = values[0].dim()
    sizes = [whole_extent(tracer, v, dim, "torch.cat") for v in values]
    axis = tracer.full_axis(sum(sizes))
    lane = tracer.tile_index(axis)
    dtype = values[0].dtype
    for value in values[1:]:
        dtype = torch.promote_types(dtype, value.dtype)
    result: Any = None
    offset = 0
    for value, size in zip(values, sizes):
        piece = pick_lanes(tracer, cast(tracer, value, dtype), dim, axis, apply_elementwise(tracer, "sub", lane, offset))
        inside = apply_elementwise(tracer, "bitwise_and", apply_elementwise(tracer, "ge", lane, offset),
                                   apply_elementwise(tracer, "lt", lane, offset + size))
        spread = [UNIT] * rank
        spread[dim] = axis
        inside = view_axes(tracer, inside, tuple(spread), "cat piece")
        result = piece if result is None else apply_elementwise(tracer, "where", inside, piece, result)
        offset += size
    return result


@torch_primitive("diff", torch.diff, T.diff)
def diff_p(tracer: Tracer, value: Any, n: int = 1, dim: int = -1, prepend: Any = None,
           append: Any = None) -> TileValue:
    value = only_tile_value("torch.diff", value)
    ask_torch("torch.diff", torch.diff, (value,), {"n": n, "dim": dim})
    position = dim % value.dim()
    pieces = [p for p in (prepend, value, append) if p is not None]
    if any(not isinstance(p, TileValue) for p in pieces):
        raise exc.UnsupportedOperationError("torch.diff with a prepend/append that is no tile value",
                                            location=user_location(), hint="pass tile values (or concatenate first)")
    if len(pieces) > 1:
        value = cat_values(tracer, pieces, position)
    for _ in range(n):
        later = slice_dim(tracer, value, position, slice(1, None))
        earlier = slice_dim(tracer, value, position, slice(None, -1))
        value = apply_elementwise(tracer, "ne" if value.dtype == torch.bool else "sub", later, earlier)
    return value


@torch_primitive("glu", F.glu)
def glu_p(tracer: Tracer, value: Any, dim: int = -1) -> TileValue:
    value = only_tile_value("F.glu", value)
    if not value.dtype.is_floating_point:
        raise exc.DtypeError(f"F.glu of a {value.dtype} tile value: torch computes it for floating-point values only",
                             location=user_location(), hint="convert first: v.to(torch.float32)")
    position = dim % value.dim()
    size = whole_extent(tracer, value, position, "F.glu")
    if size % 2:
        raise exc.ShapeMismatchError(f"F.glu halves dim {position}, of odd size {size}", location=user_location(),
                                     hint="torch refuses it too: give that dim an even size")
    half = size // 2
    first = slice_dim(tracer, value, position, slice(0, half))
    second = slice_dim(tracer, value, position, slice(half, 2 * half))
    return apply_elementwise(tracer, "mul", first, apply_elementwise(tracer, "sigmoid", second))


def _pieces(tracer: Tracer, value: TileValue, dim: int, sizes: list[int]) -> tuple[TileValue, ...]:
    pieces, start = [], 0
    for size in sizes:
        pieces.append(slice_dim(tracer, value, dim, slice(start, start + size)))
        start += size
    return tuple(pieces)


def known_int(tracer: Tracer, size: Any, what: str) -> int:
    """A size-like argument (`v.size(1)` of a whole dim included) as this call's int, guarded."""
    size = sympy.sympify(size.number(what) if hasattr(size, "number") else size)
    if size.is_Integer:
        return int(size)
    known = int(tracer.symbols.evaluate(size))
    tracer.symbols.guard(sympy.Eq(size, known), f"{what} argument {size} is {known}")
    return known


@torch_primitive("torch_split", torch.split, T.split)
def torch_split_p(tracer: Tracer, value: Any, split_size_or_sections: Any, dim: int = 0) -> tuple[TileValue, ...]:
    value = only_tile_value("torch.split", value)
    position = dim % value.dim()
    size = whole_extent(tracer, value, position, "torch.split")
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sizes = [min(step, size - start) for start in range(0, size, step)]
    else:
        sizes = [known_int(tracer, s, "torch.split") for s in split_size_or_sections]
        if sum(sizes) != size:
            raise exc.ShapeMismatchError(f"torch.split sections {sizes} do not add up to the dim's size {size}",
                                         location=user_location(), hint="torch refuses them too")
    return _pieces(tracer, value, position, sizes)


@torch_primitive("chunk", torch.chunk, T.chunk)
def chunk_p(tracer: Tracer, value: Any, chunks: int, dim: int = 0) -> tuple[TileValue, ...]:
    value = only_tile_value("torch.chunk", value)
    position = dim % value.dim()
    size = whole_extent(tracer, value, position, "torch.chunk")
    step = -(-size // chunks)  # torch's chunk size: the ceiling, so there may be fewer chunks
    return _pieces(tracer, value, position, [min(step, size - start) for start in range(0, size, step)])


@torch_primitive("unbind", torch.unbind, T.unbind)
def unbind_p(tracer: Tracer, value: Any, dim: int = 0) -> tuple[TileValue, ...]:
    value = only_tile_value("torch.unbind", value)
    position = dim % value.dim()
    size = whole_extent(tracer, value, position, "torch.unbind")
    return tuple(slice_dim(tracer, value, position, k) for k in range(size))
