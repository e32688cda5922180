"""Loads and stores while tracing: what each index item means for a tensor argument.

Per tensor dimension an index item is a tile (its axis), `:` (a whole-dimension axis), a scalar
(a symbolic int), or a tile value of indices (a gather/scatter). `None` adds a unit dimension.
The result dims follow PyTorch: basic items in order, index tensors broadcast together.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy
import torch

from tessera import exc
from tessera.location import user_location
from tessera.ir.graph import UNIT, AccessKind, Axis, DimAccess, Node, Op
from tessera.trace.proxy import TensorProxy, TileProxy, TileValue, refuse_value_list
from tessera.trace.bounds import lower_bound
from tessera.trace.tile_alignment import align_to
from tessera.trace.views import Window, is_whole_slice, split_view
from tessera.trace.write_back import written_lanes

if TYPE_CHECKING:
    from tessera.trace.tracer import Tracer


def resolve_index(tracer: Tracer, tensor: TensorProxy, index: Any,
                  masked: bool = False, reading: bool = False) -> tuple[list[DimAccess], tuple[Axis, ...]]:
    """Per dim the access and the result's axes. `masked`: the access has an extra_mask, so a
    tile may run past its dimension where that mask covers the lanes past the end. `reading`:
    a load, where an int index, or a tile longer than 1, into a dimension of size 1 broadcasts."""
    items = list(index) if isinstance(index, (tuple, list)) else [index]
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    # Identity checks only: `in` / `.index` would call a tile value's `__eq__`.
    spots = [position for position, item in enumerate(items) if item is Ellipsis]
    if len(spots) > 1:
        raise exc.IndexingError(f"an index can only have a single ellipsis ('...'), {tensor.name} has {len(spots)}",
                                location=user_location(), hint="keep one `...`")
    if consumed > tensor.dim():
        raise exc.RankMismatch(
            f"too many indices for tensor of dimension {tensor.dim()}: {tensor.name} is indexed with {consumed}",
            location=user_location(), hint="give at most one index per dimension")
    # as in torch, `...` (or the end of the index) stands for `:` over the dims not indexed
    spot = spots[0] if spots else len(items)
    items[spot:spot + 1 if spots else spot] = [slice(None)] * (tensor.dim() - consumed)
    if any(getattr(item, "dtype", None) == torch.bool for item in items):
        raise exc.DataDependentOutputShapeNotSupported(
            f"indexing {tensor.name} with a boolean mask: the result's shape would depend on the data",
            location=user_location(), hint="keep the shape and select with torch.where(mask, value, 0)")
    accesses: list[DimAccess] = []
    result: list[Axis] = []
    gathered: list[tuple[Axis, ...]] = []
    gather_position: int | None = None
    dim = 0
    for item in items:
        if item is None:
            result.append(UNIT)
            continue
        size = tracer.symbols.canonical(tensor.sizes[dim])
        if isinstance(item, TileProxy) and reading and _tile_broadcasts(tracer, item.axis, size):
            # a read of a dimension of size 1 with a longer tile broadcasts its one element (Helion)
            accesses.append(DimAccess(AccessKind.SCALAR, scalar=sympy.Integer(0)))
            result.append(UNIT)
        elif isinstance(item, TileProxy):
            bound, user_masked = _tile_bound(tracer, item.axis, size, tensor, dim, masked)
            accesses.append(DimAccess(AccessKind.AXIS, axis=item.axis, bound=bound, user_masked=user_masked,
                                      check_negative=_tile_may_begin_below_zero(tracer, item.axis, tensor, dim)))
            result.append(item.axis)
        elif reading and is_whole_slice(item) and _is_one(tracer, size):
            # a load's `:` of a dimension of size 1 (a host size: guarded) is a unit dim, which
            # broadcasts as in torch (`rsqrt[tile, :]` of an [m, 1] tensor times an [m, n] tile)
            accesses.append(DimAccess(AccessKind.SCALAR, scalar=sympy.Integer(0)))
            result.append(UNIT)
        elif is_whole_slice(item):
            if tracer.symbols.on_device(size):
                raise exc.DynamicAllocationError(
                    f"`:` reads dimension {dim} of {tensor.name} whole into registers, but its size {size} is "
                    "only known at run time (it comes from values loaded inside the kernel)",
                    location=user_location(),
                    hint=f"tile that dimension instead: `for t in hl.tile({size}): ... {tensor.name}[..., t, ...]`")
            axis = tracer.full_axis(size)
            accesses.append(DimAccess(AccessKind.AXIS, axis=axis))
            result.append(axis)
        elif isinstance(item, Window):  # `length` lanes from the view's start, masked past its end
            axis = tracer.full_axis(item.length)
            tracer.window_axes[axis] = (item.start, size)
            accesses.append(DimAccess(AccessKind.AXIS, axis=axis, bound=size))
            result.append(axis)
        elif isinstance(item, TileValue):
            check_index_dtype(item.dtype)
            accesses.append(DimAccess(AccessKind.VALUE, value=item.node))
            gathered.append(item.axes)
            if gather_position is None:
                gather_position = len(result)
        elif isinstance(item, (int, sympy.Basic)) and not isinstance(item, bool):
            scalar, wraps = _scalar_index(tracer, item, size, broadcast_unit=reading)
            accesses.append(DimAccess(AccessKind.SCALAR, scalar=scalar, check_negative=wraps))
        elif isinstance(item, torch.Tensor) and item.dim() == 0:
            raise exc.IndexingError("a 0-d tensor index inside a tile loop", location=user_location(),
                                    hint="load it with hl.load(t, [i]) to get a runtime scalar")
        else:
            raise exc.IndexingError(f"cannot index {tensor.name} with {item!r} inside a tile loop",
                                    location=user_location(),
                                    hint="use tiles, `:`, ints, None, or integer tile values")
        dim += 1
    if gathered:
        shape = tracer.broadcast(gathered, "index tensors")
        result[gather_position:gather_position] = list(shape)  # type: ignore[index]
    return accesses, tuple(result)


def _tile_bound(tracer: Tracer, axis: Axis, size: Any, tensor: TensorProxy, dim: int,
                masked: bool) -> tuple[Any, bool]:
    """Prove (by a guard) that the tile stays inside the dimension, or return a mask bound (and
    whether the user's extra_mask must cover the lanes past it)."""
    end = tracer.symbols.canonical(axis.range_end) if axis.is_tile else axis.end
    if end == size:
        return None, False
    if tracer.symbols.on_device(size):
        return size, False  # a view sized by a runtime scalar: mask against it
    host_symbols = set(tracer.symbols.values)
    if isinstance(end, sympy.Basic) and not end.free_symbols <= host_symbols or not isinstance(end, (int, sympy.Basic)):
        return size, False  # a device-computed end: mask against the dimension as well
    if tracer.symbols.evaluate(end) > tracer.symbols.evaluate(size):
        if masked:  # correct for every size: no guard
            return size, True
        raise exc.IndexingError(
            f"tile loop up to {tracer.symbols.evaluate(end)} indexes dimension {dim} of {tensor.name}, "
            f"which has size {tracer.symbols.evaluate(size)}", location=user_location(),
            hint="tile each dimension by the size of the tensor it indexes")
    tracer.symbols.guard(sympy.Le(end, size), f"tile of {tensor.name} dim {dim} stays in bounds")
    return None, False


def _tile_broadcasts(tracer: Tracer, axis: Axis, size: Any) -> bool:
    """Whether a tile reading a dimension broadcasts it: the tile's loop runs past the dimension,
    which has size 1 (eager mode reads each such tile as its one element). Decided only where the
    tile would otherwise run out of bounds, so in-bounds reads add no guard."""
    end = tracer.symbols.canonical(axis.range_end) if axis.is_tile else axis.end
    if end == size or tracer.symbols.on_device(size) or not isinstance(end, (int, sympy.Basic)) \
            or isinstance(end, sympy.Basic) and not _host_size(tracer, end):
        return False  # a device-computed end: the ordinary bounds mask
    if tracer.symbols.evaluate(end) <= tracer.symbols.evaluate(size):
        return False
    return _is_one(tracer, size)


def check_index_dtype(dtype: torch.dtype) -> None:
    """Index tensors must hold integers, in every mode (eager mode calls this too)."""
    if dtype.is_floating_point or dtype.is_complex:
        raise exc.IndexingError(f"tensors can only be indexed with integer tile values, not {dtype}",
                                location=user_location(), hint="convert the indices with .to(torch.int32)")
    if dtype in (torch.bool, torch.uint8):  # torch reads these as masks: a data-dependent number of elements
        raise exc.IndexingError(f"a {str(dtype)[6:]} tile value as an index is a mask in torch (it selects a "
                                "data-dependent number of elements), which a tile cannot hold",
                                location=user_location(),
                                hint="keep the shape and mask the values: torch.where(mask, x[tile], 0), or "
                                     "hl.load(x, [tile], extra_mask=mask); integer indices: .to(torch.int32)")


def _tile_may_begin_below_zero(tracer: Tracer, axis: Axis, tensor: TensorProxy, dim: int) -> bool:
    """Prove (by a guard) that the tile's loop begins at or above 0, or ask for an `index >= 0` mask.

    The lower end mirrors `_tile_bound`: a host begin below 0 is an error now (eager raises
    too), else a guard; a begin known only on the device (a loaded offset) is masked.
    """
    if not axis.is_tile:
        return False
    least = lower_bound(tracer.symbols.canonical(axis.range_begin), tracer.loop_minimums)
    if least is not None and least.is_nonnegative:
        return False
    if least is None or not least.free_symbols <= set(tracer.symbols.values):
        return True
    if tracer.symbols.evaluate(least) < 0:
        raise exc.IndexingError(
            f"tile loop from {tracer.symbols.evaluate(least)} indexes dimension {dim} of {tensor.name} below 0",
            location=user_location(),
            hint="begin tile loops at 0 or above (a negative begin is not Python's from-the-end slicing)")
    tracer.symbols.guard(sympy.Ge(least, 0), f"tile of {tensor.name} dim {dim} begins at or above 0")
    return False


def _scalar_index(tracer: Tracer, item: Any, size: Any, broadcast_unit: bool = False) -> tuple[Any, bool]:
    """(index, wraps at run time) of an int index: negative ones count from the end, as in torch.

    A literal negative int becomes `size + item` now; a host value gets a guard on its sign;
    a value that may be negative only at run time (a grid index from a negative begin, a loaded
    value) wraps in the generated code. Out-of-range indices are masked after that.
    `broadcast_unit` (reads): a dimension of size 1 broadcasts, as in Helion, so any index
    reads its one element (`mask[b, h]` of a mask shared by every batch and head).
    """
    index = tracer.symbols.canonical(sympy.sympify(item))
    if broadcast_unit and not (index.is_Integer and int(index) in (0, -1)) and _is_unit(tracer, size):
        return sympy.Integer(0), False
    if index.is_Integer:
        return (index + size if int(index) < 0 else index), False
    least = lower_bound(index, tracer.loop_minimums)
    if least is not None and least.is_nonnegative:
        return index, False
    if least is not None and least.free_symbols <= set(tracer.symbols.values):
        if tracer.symbols.evaluate(least) >= 0:
            tracer.symbols.guard(sympy.Ge(least, 0), f"index {index} is at or above 0")
            return index, False
        if least == index:  # a host int, negative in this call: count from the end
            tracer.symbols.guard(sympy.Lt(index, 0), f"index {index} is below 0 (counts from the end)")
            return index + size, False
    return index, True


def _host_size(tracer: Tracer, size: Any) -> bool:
    """A size over the call's host values only (not loaded, not per tile): guards may name it."""
    return isinstance(size, sympy.Basic) and size.free_symbols <= set(tracer.symbols.values)


def _is_one(tracer: Tracer, size: Any) -> bool:
    """Whether a dimension has size 1: an int, or a host size that is 1 in this call (guarded)."""
    size = tracer.symbols.canonical(size)
    if isinstance(size, sympy.Basic) and size.is_Integer or isinstance(size, int):
        return int(size) == 1
    if not _host_size(tracer, size) or tracer.symbols.evaluate(size) != 1:
        return False
    tracer.symbols.guard(sympy.Eq(size, 1), f"dimension of size {size} is 1 (it broadcasts)")
    return True


def _is_unit(tracer: Tracer, size: Any) -> bool:
    """Whether a dimension has size 1 (for a host size: in this call, guarded either way)."""
    size = tracer.symbols.canonical(size)
    if isinstance(size, sympy.Basic) and size.is_Integer:
        return int(size) == 1
    if not _host_size(tracer, size):
        return False
    unit = tracer.symbols.evaluate(size) == 1
    tracer.symbols.guard(sympy.Eq(size, 1) if unit else sympy.Ne(size, 1),
                         f"dimension of size {size} is {'' if unit else 'not '}1 (size 1 broadcasts on reads)")
    return unit


def _with_jagged_mask(tracer: Tracer, mask: Node | None, shape: tuple[Axis, ...], what: str) -> Node | None:
    """`mask` and, for an access over an hl.jagged_tile axis, the lanes below their ends."""
    jagged = tracer.jagged_mask(shape, what)
    if jagged is None:
        return mask
    return jagged.node if mask is None else tracer.and_predicate(mask, jagged.node)


def _mask_node(tracer: Tracer, mask: Any) -> Node | None:
    if mask is None:
        return None
    if not isinstance(mask, TileValue):
        raise exc.IndexingError("extra_mask must be a boolean tile value", location=user_location())
    return mask.node


def trace_load(tracer: Tracer, tensor: Any, index: Any, mask: Any = None, eviction_policy: str | None = None) -> Any:
    if not isinstance(tensor, TensorProxy):
        raise exc.IndexingError(f"hl.load needs a tensor argument of the kernel, got {type(tensor).__name__}",
                                location=user_location())
    accesses, shape = resolve_index(tracer, tensor, index, masked=mask is not None, reading=True)
    mask_node = _mask_node(tracer, mask)
    if mask_node is not None:
        shape = tracer.broadcast([shape, mask_node.shape], "extra_mask")
    mask_node = _with_jagged_mask(tracer, mask_node, shape, f"a load from {tensor.name}")
    return tracer.emit(Op.LOAD, [mask_node], shape, tensor.dtype, tensor=tensor.ref(), accesses=accesses,
                       eviction_policy=eviction_policy)


def trace_store(tracer: Tracer, tensor: Any, index: Any, value: Any, mask: Any = None, atomic: str | None = None,
                sem: str | None = None, expected: Any = None) -> TileValue | None:
    """A store node; an atomic one is also a value: what the destination held before (in the
    tensor's dtype, shaped like the destination). `expected`: the compared value of a
    compare-and-swap (the node's third input)."""
    if not isinstance(tensor, TensorProxy):
        raise exc.IndexingError(f"cannot store into {type(tensor).__name__} inside a tile loop",
                                location=user_location(), hint="store into a tensor argument of the kernel")
    refuse_value_list(value, f"a store into {tensor.name}")
    accesses, shape = resolve_index(tracer, tensor, index)
    mask_node = _mask_node(tracer, mask)
    write_back = written_lanes(tracer, tensor.name, accesses, value, shape) if atomic is None else None
    if write_back is not None:  # `x[i] = where(keep, new, x[i])`: only the kept lanes write (write_back.py)
        value, keep = write_back
        mask_node = keep if mask_node is None else tracer.and_predicate(mask_node, keep)
    value_input = stored_value(tracer, tensor, shape, value)
    if mask_node is not None:
        target = tracer.broadcast([shape, mask_node.shape], f"extra_mask of a store into {tensor.name}")
        if len(target) != len(shape):
            raise exc.ShapeMismatchError(
                f"extra_mask of shape {list(mask_node.shape)} does not fit a store into {tensor.name}{list(shape)}",
                location=user_location(), hint="give the mask the store's dims (or size 1 to broadcast)")
    mask_node = _with_jagged_mask(tracer, mask_node, shape, f"a store into {tensor.name}")
    inputs = [value_input, mask_node] + ([stored_value(tracer, tensor, shape, expected)] if atomic == "cas" else [])
    stored = tracer.emit(Op.STORE, inputs, shape, tensor.dtype if atomic else None,
                         tensor=tensor.ref(), accesses=accesses, atomic=atomic, sem=sem)
    return stored if atomic else None


def stored_value(tracer: Tracer, tensor: TensorProxy, shape: tuple[Axis, ...], value: Any) -> Any:
    """A value written to `tensor` at a destination of axes `shape`: a tile value that broadcasts
    to it, a tensor argument (read whole, as `dst[i] = val` reads it in torch), or a scalar."""
    if isinstance(value, TensorProxy):
        value = trace_load(tracer, value, (slice(None),) * value.dim())
    if isinstance(value, TileValue):
        value = align_to(tracer, value, shape)
        if 0 < len(value.axes) < len(shape):  # right-aligned (`out[t0, t1] = b[t1]`): the missing dims lead
            value = tracer.emit(Op.VIEW, [value.node], (UNIT,) * (len(shape) - len(value.axes)) + value.axes,
                                value.dtype, what="store of a lower-rank value")
        extra = len(value.axes) - len(shape)
        if extra > 0 and all(axis.block == 1 for axis in value.axes[:extra]):
            # leading dims of one element go, as torch's setitem drops them (`src[i] = dst[i : i + 1]`)
            value = tracer.emit(Op.VIEW, [value.node], value.axes[extra:], value.dtype,
                                what="store of a value with leading one-element dims")
        value = tracer.onto_windows(value, shape)
        target = tracer.broadcast([shape, value.axes], f"store into {tensor.name}")
        if any(tracer.fits_padded_axis(a, b) for a, b in zip(value.axes[::-1], shape[::-1])):
            value = tracer.onto_block_axes(value, shape)  # a padded allocation stored into its row
        if len(target) != len(shape) or any(a is not tracer.canonical_axis(b) and b is not UNIT
                                               and not tracer.fits_block_axis(a, b) for a, b in zip(target, shape)):
            raise exc.ShapeMismatchError(
                f"cannot store a value of shape {list(value.axes)} into {tensor.name}{list(shape)}",
                location=user_location(), hint="index the destination with the same tiles as the value")
        return value.node
    return tracer.symbols.canonical(value)


def tensor_getitem(tracer: Tracer, tensor: TensorProxy, index: Any) -> Any:
    """`tensor[index]` inside a tile loop: a view (`t[a:b]`), or a load through the view."""
    view, rest = split_view(tracer, tensor, index)
    if rest is None:
        return view  # `t[a:b]`: a view, read when it is indexed with tiles
    return trace_load(tracer, view, tuple(rest))


def tensor_setitem(tracer: Tracer, tensor: TensorProxy, index: Any, value: Any) -> None:
    """`tensor[index] = value` inside a tile loop: a store (into a view when sliced)."""
    view, rest = split_view(tracer, tensor, index)
    if rest is None:
        rest = [slice(None)] * view.dim()  # `t[a:b] = v` writes the whole view
    trace_store(tracer, view, tuple(rest), value)
