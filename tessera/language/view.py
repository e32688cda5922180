"""Casts and views of tile values: `.to(dtype)` and friends, `v[:, None]`, `unsqueeze squeeze
permute transpose t expand`; and views of tensor arguments (`t.reshape(m, k)`).

A view of a tile value only renames its axes (unit axes come and go, axes are reordered or
broadcast); a view of a tensor argument is pointer metadata (trace/views.py).
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from tessera import exc
from tessera.ir.graph import UNIT, Op
from tessera.ir.primitive import defined_primitive, torch_primitive
from tessera.language.constexpr import BlockSizeInt
from tessera.language.eager_indexing import check_tile_value_index
from tessera.language.operands import check_dtype
from tessera.location import user_location
from tessera.trace.proxy import TensorProxy, TileValue
from tessera.trace.tile_alignment import align_to
from tessera.trace.tracer import Tracer
from tessera.trace.views import reshape_view

T = torch.Tensor


def normalized_dims(value: TileValue, dim: Any) -> list[int]:
    """The dims `dim` (None: all, an int, or a list) names, non-negative and sorted."""
    if dim is None:
        return list(range(value.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted(d % value.dim() for d in dims)


# AMD's fp8 formats: Triton has them on AMD GPUs only (neither NVIDIA nor its interpreter)
_AMD_ONLY = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def cast(tracer: Tracer, value: TileValue, dtype: torch.dtype) -> TileValue:
    check_dtype(dtype, f"the conversion .to({dtype})")
    if value.dtype == dtype:
        return value
    if torch.float4_e2m1fn_x2 in (dtype, value.dtype):  # torch converts no values to or from packed fp4
        raise exc.DtypeError(
            f"a conversion between {value.dtype} and {dtype}: PyTorch converts no values to or from packed fp4",
            location=user_location(),
            hint="unpack with hl.float4_e2m1fn_x2_to_float32(v), or read the bytes with v.view(torch.uint8)")
    if dtype in _AMD_ONLY or value.dtype in _AMD_ONLY:
        raise exc.DtypeError(
            f"a cast between {value.dtype} and {dtype}: Triton supports {dtype if dtype in _AMD_ONLY else value.dtype} "
            "only on AMD GPUs", location=user_location(),
            hint="use torch.float8_e4m3fn or torch.float8_e5m2 (NVIDIA's fp8), or run the kernel with mode='eager'")
    return tracer.emit(Op.CAST, [value.node], value.axes, dtype)


@torch_primitive("to", T.to)
def to_p(tracer: Tracer, value: TileValue, *args: Any, **kwargs: Any) -> TileValue:
    dtype = kwargs.get("dtype")
    for arg in args:
        if isinstance(arg, torch.dtype):
            dtype = arg
    return value if dtype is None else cast(tracer, value, dtype)


def _cast_rule(dtype: torch.dtype) -> Any:
    def rule(tracer: Tracer, value: TileValue, **_: Any) -> TileValue:
        return cast(tracer, value, dtype)
    return rule


for _method, _dtype in (("float", torch.float32), ("half", torch.float16), ("bfloat16", torch.bfloat16),
                        ("int", torch.int32), ("long", torch.int64), ("bool", torch.bool), ("double", torch.float64),
                        ("short", torch.int16), ("char", torch.int8), ("byte", torch.uint8)):
    torch_primitive(_method, getattr(T, _method))(_cast_rule(_dtype))


@torch_primitive("type", T.type)
def type_p(tracer: Tracer, value: TileValue, dtype: Any = None, **kwargs: Any) -> Any:
    """`v.type(torch.float16)` converts; `v.type()` names the type as torch does ('torch.FloatTensor')."""
    dtype = kwargs.get("dtype", dtype)
    if dtype is None:
        return torch.empty(0, dtype=value.dtype).type()
    if not isinstance(dtype, torch.dtype):
        raise exc.DtypeError(f"Tensor.type({dtype!r}) inside a tile loop: only a torch.dtype is understood",
                             location=user_location(), hint="write v.type(torch.float16) or v.to(torch.float16)")
    return cast(tracer, value, dtype)


@torch_primitive("type_as", T.type_as)
def type_as_p(tracer: Tracer, value: TileValue, other: Any) -> TileValue:
    return cast(tracer, value, other.dtype)


# -- views ------------------------------------------------------------------------------------
def view_axes(tracer: Tracer, value: TileValue, axes: tuple, what: str) -> TileValue:
    return tracer.emit(Op.VIEW, [value.node], axes, value.dtype, what=what)


def subscript_value(tracer: Tracer, value: TileValue, index: Any) -> TileValue:
    """`value[:, None]` style views: `:` keeps a dim, `None` adds one, `...` fills."""
    items = list(index) if isinstance(index, tuple) else [index]
    if Ellipsis in items:
        spot = items.index(Ellipsis)
        explicit = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (value.dim() - explicit)
    check_tile_value_index(tuple(items))
    axes, source = [], list(value.axes)
    for item in items:
        if item is None:
            axes.append(UNIT)
        else:
            if not source:
                raise exc.RankMismatch("too many indices for a tile value", location=user_location())
            axes.append(source.pop(0))
    axes.extend(source)
    return view_axes(tracer, value, tuple(axes), "index")



def subscript(tensor: Any, index: Any) -> Any:
    """`tensor[index]` (Helion's spelling), e.g. `hl.subscript(v, [None, slice(None)])` is `v[None, :]`."""
    return tensor[tuple(index) if isinstance(index, list) else index]


@torch_primitive("unsqueeze", torch.unsqueeze, T.unsqueeze)
def unsqueeze_p(tracer: Tracer, value: TileValue, dim: int) -> TileValue:
    axes = list(value.axes)
    axes.insert(dim % (len(axes) + 1), UNIT)
    return view_axes(tracer, value, tuple(axes), "unsqueeze")


@torch_primitive("squeeze", torch.squeeze, T.squeeze)
def squeeze_p(tracer: Tracer, value: TileValue, dim: Any = None) -> TileValue:
    dims = normalized_dims(value, dim)
    axes = tuple(a for i, a in enumerate(value.axes) if not (i in dims and a is UNIT))
    return view_axes(tracer, value, axes, "squeeze")


def permute(tracer: Tracer, value: TileValue, *dims: Any) -> TileValue:
    order = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
    order = [d % value.dim() for d in order]
    return tracer.emit(Op.PERMUTE, [value.node], tuple(value.axes[d] for d in order), value.dtype, order=order)


permute_p = torch_primitive("permute", torch.permute, T.permute)(permute)


@torch_primitive("transpose", torch.transpose, T.transpose, torch.swapaxes, T.swapaxes, torch.swapdims, T.swapdims)
def transpose_p(tracer: Tracer, value: TileValue, dim0: int, dim1: int) -> TileValue:
    order = list(range(value.dim()))
    a, b = dim0 % value.dim(), dim1 % value.dim()
    order[a], order[b] = order[b], order[a]
    return permute(tracer, value, order)


def _movedim_trace(tracer: Tracer, value: TileValue, source: Any, destination: Any) -> TileValue:
    """torch.movedim: each source dim lands at its destination, the others keep their order."""
    rank = value.dim()
    sources = [d % rank for d in ([source] if isinstance(source, int) else source)]
    destinations = [d % rank for d in ([destination] if isinstance(destination, int) else destination)]
    if len(sources) != len(destinations) or len(set(sources)) != len(sources) or len(set(destinations)) != len(sources):
        raise exc.IndexingError(f"torch.movedim from {source!r} to {destination!r}: give as many distinct dims each",
                                location=user_location(), hint="torch refuses it too")
    order: list[Any] = [None] * rank
    for s, d in zip(sources, destinations):
        order[d] = s
    rest = iter(d for d in range(rank) if d not in sources)
    return permute(tracer, value, [d if d is not None else next(rest) for d in order])


def _view_as_eager(value: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return value.reshape(other.shape)  # an eager block may not be contiguous: view_as could refuse it


def _view_as_trace(tracer: Tracer, value: TileValue, other: Any) -> TileValue:
    if isinstance(other, TileValue) and other.dim() == value.dim() \
            and all((mine is UNIT) == (theirs is UNIT) for mine, theirs in zip(value.axes, other.axes)):
        # `x.view_as(y)` of two values over equal dims (y's rows read from another tensor): the same
        # layout, its dims made equal (a guard), not a regrouping
        try:
            axes = tuple(tracer.unify_axes(mine, theirs, "v.view_as(w)") for mine, theirs in zip(value.axes, other.axes))
        except exc.ShapeMismatchError:
            pass
        else:
            return view_axes(tracer, value, axes, "view_as")
    return reshape_value(tracer, value, tuple(other.shape))


def _unflatten_trace(tracer: Tracer, value: TileValue, dim: int, sizes: Any) -> TileValue:
    shape = list(value.shape)
    position = dim % max(value.dim(), 1)
    return reshape_value(tracer, value, tuple(shape[:position] + list(sizes) + shape[position + 1:]))


movedim_p = defined_primitive("movedim", torch.movedim, _movedim_trace,
                              torch_functions=(torch.movedim, T.movedim, torch.moveaxis, T.moveaxis))
view_as_p = defined_primitive("view_as", _view_as_eager, _view_as_trace, torch_functions=(T.view_as, T.reshape_as))
unflatten_p = defined_primitive("unflatten", torch.unflatten, _unflatten_trace,
                                torch_functions=(torch.unflatten, T.unflatten))


@torch_primitive("t", T.t)
def t_p(tracer: Tracer, value: TileValue) -> TileValue:
    return permute(tracer, value, [1, 0] if value.dim() == 2 else [0])


@torch_primitive("expand", T.expand, T.expand_as, torch.broadcast_to)
def expand_p(tracer: Tracer, value: TileValue, *sizes: Any) -> TileValue:
    target = sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], (int,)) else sizes
    if isinstance(target, TileValue):
        value = align_to(tracer, value, target.axes)
        axes = tracer.broadcast([value.axes, target.axes], "expand")
    else:
        axes = _expanded_axes(tracer, value, list(target))
    return tracer.emit(Op.BROADCAST, [value.node], axes, value.dtype)


def _expanded_axes(tracer: Tracer, value: TileValue, sizes: list[Any]) -> tuple[Any, ...]:
    """The axes of `value.expand(*sizes)`: -1 (or the dim's own size) keeps a dim; a size-1 dim
    takes the axis its new size names (`v.size(d)`, a tile, a block size from `acc.size()`), or a
    whole dim of a compile-time size."""
    if len(sizes) < value.dim():
        raise exc.ShapeMismatchError(f"expand to {sizes}: fewer sizes than the value's {value.dim()} dims",
                                     location=user_location(), hint="give one size per dim (-1 keeps one)")
    source = [UNIT] * (len(sizes) - value.dim()) + list(value.axes)
    axes = []
    for axis, size in zip(source, sizes):
        if _is_minus_one(size) or (axis is not UNIT and _names_axis(tracer, size, axis)):
            axes.append(axis)
        elif axis is UNIT and _is_one(size):
            axes.append(UNIT)
        elif axis is UNIT and getattr(size, "axis", None) is not None:
            axes.append(tracer.canonical_axis(size.axis))
        elif axis is UNIT and isinstance(size, (int, sympy.Integer)):
            axes.append(tracer.full_axis(size))
        else:
            raise exc.ShapeMismatchError(
                f"expand of a tile value of shape {list(value.axes)} to {sizes}: size {size} does not fit dim "
                f"{axis.name if axis is not UNIT else 1}", location=user_location(),
                hint="only size-1 dims expand; name a dim by a size of a tile value (v.size(d)), a tile, or -1")
    return tuple(axes)


@torch_primitive("reshape", T.reshape, T.view, torch.reshape)
def reshape_p(tracer: Tracer, tensor: Any, *shape: Any, dtype: torch.dtype | None = None) -> Any:
    if dtype is not None and not shape:  # `v.view(dtype=torch.int16)`
        shape = (dtype,)
    if isinstance(tensor, TileValue) and len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return view_dtype(tracer, tensor, shape[0])
    if isinstance(tensor, TileValue):
        return reshape_value(tracer, tensor, shape)
    return reshape_view(tracer, tensor, shape)


# `v.view(dtype)` reinterprets bits; backends hold packed fp4 as its bytes, so this pair is a no-op
_SAME_BITS = frozenset({(torch.float4_e2m1fn_x2, torch.uint8), (torch.uint8, torch.float4_e2m1fn_x2)})


def view_dtype(tracer: Tracer, value: TileValue, dtype: torch.dtype) -> TileValue:
    """`v.view(dtype)`: the same bits as another dtype of the same size (a bitcast: bf16 <-> int16,
    fp32 <-> int32, ...; packed fp4 <-> its uint8 bytes)."""
    if value.dtype == dtype:
        return value
    check_dtype(dtype, f"the result of v.view({dtype})")
    if (value.dtype, dtype) in _SAME_BITS:
        return tracer.emit(Op.CAST, [value.node], value.axes, dtype)
    if value.dtype.itemsize != dtype.itemsize or torch.bool in (value.dtype, dtype) \
            or torch.float4_e2m1fn_x2 in (value.dtype, dtype):
        raise exc.UnsupportedOperationError(
            f"v.view({dtype}) of a {value.dtype} tile value: inside a tile loop a view reinterprets the bits "
            "of each element as a dtype of the same size", location=user_location(),
            hint="convert values with v.to(dtype), or view the tensor argument as another dtype on the host")
    return tracer.emit(Op.CAST, [value.node], value.axes, dtype, bitcast=True)


def reshape_value(tracer: Tracer, value: TileValue, shape: tuple) -> TileValue:
    """`v.view(...)`/`v.reshape(...)` of a tile value: registers can only rename axes, so the new
    shape must keep the value's non-unit axes in order and may only add or drop size-1 dims.
    Each kept dim is named by the value's own size (`v.size(0)`, `v.shape[1]`), its tile, a
    compile-time int equal to a whole dim's size, or `-1` (at most one)."""
    sizes = list(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else list(shape)
    source = [axis for axis in value.axes if axis is not UNIT]
    wanted = [size for size in sizes if not _is_one(size)]
    if len(wanted) < len(source):  # a tile of block 1 named by its size 1 (`[tile.block_size, n]`): a unit dim
        # (a tile the new shape names itself stays: `[tile_b, h, tile_t, 2 * half]` with tile_b's
        # block 1 merges the last two dims, it does not drop tile_b)
        source = [axis for axis in source if not (axis.is_tile and axis.block == 1
                                                  and not any(_names_axis(tracer, size, axis) for size in wanted))
                  ] or source

    def refuse(why: str) -> exc.UnsupportedOperationError:
        return exc.UnsupportedOperationError(
            f"reshape of a tile value of shape {list(value.axes)} to {sizes}: {why}", location=user_location(),
            hint="a tile value lives in registers: a reshape may only add or drop size-1 dims (or use "
                 "unsqueeze/squeeze/v[:, None]); to regroup elements, reshape the tensor argument before "
                 "indexing it (x.reshape(m, k)[tile, :])")

    if sum(1 for size in sizes if _is_minus_one(size)) > 1:
        raise refuse("only one dimension can be -1")
    if len(wanted) != len(source) or not all(_is_minus_one(size) or _names_axis(tracer, size, axis)
                                             for axis, size in zip(source, wanted)):
        regrouped = _regroup(tracer, source, wanted)
        if regrouped is None:
            raise refuse("it changes how elements are grouped into dims other than whole, power-of-two ones "
                         "(or tiles merged with them)")
        kept = iter(regrouped[0])
        axes = tuple(UNIT if _is_one(size) else next(kept) for size in sizes)
        return tracer.emit(Op.RESHAPE, [tracer.zero_past_tile_ends(value, regrouped[1]).node], axes, value.dtype)
    for axis, size in zip(source, wanted):
        if not (_is_minus_one(size) or _names_axis(tracer, size, axis)):
            raise refuse(f"dim {axis.name} (size {axis.end - axis.begin if axis.is_tile else axis.end}) "
                         f"does not match {size}")
    kept = iter(source)
    axes = tuple(UNIT if _is_one(size) else next(kept) for size in sizes)
    return view_axes(tracer, value, axes, "reshape")


def _regroup(tracer: Tracer, source: list[Any], wanted: list[Any]) -> tuple[list[Any], list[Any]] | None:
    """(the axes of `wanted`, the tiles whose tail lanes must read 0) when the sizes split or
    merge dimensions held exactly, or None when they do not. Exact means no padding lanes:
    whole power-of-two dims, and in a merge also tiles (`[tile, 2, n] -> [2 * tile.block_size, n]`,
    Helion's int4 unpacking), whose lanes past the loop's end become zeros of the merged dim.
    Row-major order then survives tl.reshape; every other tile stays where it is."""
    wanted = _resolve_minus_one(tracer, source, wanted)
    if wanted is None:
        return None
    result: list[Any] = []
    zeroed: list[Any] = []
    i = j = 0
    while j < len(wanted):
        if i == len(source) or _static_size(tracer, wanted[j]) == 1:  # a size-1 dim: a unit axis
            if _static_size(tracer, wanted[j]) != 1:
                return None
            result.append(UNIT)
            j += 1
            continue
        axis, size = source[i], wanted[j]
        if _names_axis(tracer, size, axis) or (axis.is_tile and _static_size(tracer, size) == axis.block):
            result.append(axis)  # a tile named by `tile.block_size` is that tile
            i, j = i + 1, j + 1
            continue
        have, want = _merge_extent(tracer, axis), _static_size(tracer, size)
        if have is None or want is None:
            return None
        pieces = [want]
        while have != _product(pieces) and j + len(pieces) < len(wanted) and _product(pieces) < have:
            pieces.append(_static_size(tracer, wanted[j + len(pieces)]))  # split one dim into several
            if pieces[-1] is None:
                return None
        merged = [have]
        while want != _product(merged) and i + len(merged) < len(source) and _product(merged) < want:
            extent = _merge_extent(tracer, source[i + len(merged)])  # merge several into one
            if extent is None:
                return None
            merged.append(extent)
        if _product(pieces) == have:
            if any(piece & (piece - 1) for piece in pieces):
                return None
            if axis.is_tile:  # a tile split into whole dims (`v.view(tile.block_size // 2, 2)`)
                zeroed.append(axis)
            result += [UNIT if piece == 1 else _split_axis(tracer, wanted[j + k], piece)
                       for k, piece in enumerate(pieces)]
            i, j = i + 1, j + len(pieces)
        elif _product(merged) == want:
            group = source[i:i + len(merged)]
            zeroed += [a for a in group if a.is_tile]
            result.append(_split_axis(tracer, size, want))  # a register_block_size merge: that block's axis
            i, j = i + len(merged), j + 1
        else:
            return None
    return (result, zeroed) if i == len(source) and j == len(wanted) else None


def _resolve_minus_one(tracer: Tracer, source: list[Any], wanted: list[Any]) -> list[Any] | None:
    """`wanted` with its -1 (if any) as the lanes the other sizes leave (`v.reshape(tile0, -1)` of
    [tile0, tile1, tile2] merges the last two tiles' blocks), or None when they cannot be counted."""
    if not any(_is_minus_one(size) for size in wanted):
        return wanted
    extents = [_merge_extent(tracer, axis) for axis in source]
    known = []
    for size in wanted:
        if _is_minus_one(size):
            continue
        named = getattr(size, "axis", None)
        known.append(_merge_extent(tracer, tracer.canonical_axis(named)) if named is not None
                     else _static_size(tracer, size))
    if None in extents or None in known or _product(extents) % _product(known):  # type: ignore[arg-type]
        return None
    rest = _product(extents) // _product(known)  # type: ignore[arg-type]
    return [rest if _is_minus_one(size) else size for size in wanted]


def _split_axis(tracer: Tracer, size: Any, extent: int) -> Any:
    """A dim split off a whole one, or merged from several: sized by a register_block_size value, it combines lane for lane
    with the tiles of that block (as `hl.zeros([block])` does); else a whole dim of its own."""
    if isinstance(size, BlockSizeInt):
        return tracer.block_size_axis(extent)
    return _named_whole_axis(tracer, size, extent) or tracer.full_axis(extent)


def _merge_extent(tracer: Tracer, axis: Any) -> int | None:
    """The lanes `axis` brings to a split or merge: a whole dim's exact size, or a tile's block."""
    return axis.block if axis.is_tile else tracer.exact_extent(axis, "a reshape")


def _named_whole_axis(tracer: Tracer, size: Any, extent: int) -> Any:
    """The whole dim `size` names (`acc.size(1)`) when it holds `extent` lanes exactly: a merge
    back into it gives that dim, so a loop-carried value keeps its axes."""
    named = getattr(size, "axis", None)
    if named is None or named.is_tile:
        return None
    named = tracer.canonical_axis(named)
    return named if tracer.exact_extent(named, "a reshape") == extent else None


def _static_size(tracer: Tracer, size: Any) -> int | None:
    """A wanted size as an int (a host size is guarded to its value; a whole dim's size `v.size(d)`
    its exact extent), or None."""
    named = getattr(size, "axis", None)
    if named is not None:
        return None if named.is_tile else tracer.exact_extent(tracer.canonical_axis(named), "a reshape")
    if isinstance(size, bool) or isinstance(size, (TileValue, TensorProxy)):
        return None
    expr = tracer.symbols.canonical(size)
    if isinstance(expr, int):
        return expr if expr > 0 else None
    if not isinstance(expr, sympy.Basic) or not expr.free_symbols <= set(tracer.symbols.values):
        return None
    value = int(tracer.symbols.evaluate(expr))
    if not expr.is_Integer:
        tracer.symbols.guard(sympy.Eq(expr, value), f"reshape size {expr} is {value}")
    return value if value > 0 else None


def _product(values: list[int]) -> int:
    total = 1
    for value in values:
        total *= value
    return total


def _is_one(size: Any) -> bool:
    return isinstance(size, int) and not isinstance(size, bool) and size == 1


def _is_minus_one(size: Any) -> bool:
    return isinstance(size, int) and not isinstance(size, bool) and size == -1


def _names_axis(tracer: Tracer, size: Any, axis: Any) -> bool:
    named = getattr(size, "axis", None)  # AxisSize (v.size(d)) or a tile (TileProxy)
    if named is not None:
        return tracer.canonical_axis(named) is tracer.canonical_axis(axis)
    if axis.is_tile or isinstance(size, (TileValue, TensorProxy)):
        return False
    try:  # a whole dim named by its size: an int, or the symbol of a tensor's size
        return bool(sympy.simplify(tracer.symbols.canonical(size) - tracer.symbols.canonical(axis.end)) == 0)
    except (TypeError, sympy.SympifyError):
        return False
