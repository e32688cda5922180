"""Views of tensor arguments inside a kernel: slices and reshapes, with runtime bounds too.

`flat[off : off + m * k].reshape(m, k)` is metadata on a pointer, not an allocation: the view
keeps the argument's pointer and adds an offset, and its sizes and strides may be runtime
scalars (symbols named after IR nodes, see `Tracer.scalar_expr`). Every access through a view
stays inside the part of the argument it views:

- a slice is clipped to the dimension (`0 <= start <= stop <= size`): a slice past the
  argument's end views fewer elements, where eager mode (PyTorch) would raise; a negative
  bound counts from the end (Python's rule), whether a literal, a host int or a value loaded
  on the device;
- a reshape to more elements than its source has (`m * k` larger than the slice) masks the
  accesses past the source's last element: they read 0 and write nothing;
- a scalar index into a view (`t[i, a:b]`) masks every access when `i` is out of range;
- a window, a slice whose start moves with a tile or loop and whose length is a compile-time int
  (`x[tile, t.begin * 2 : t.begin * 2 + 2 * block]`, `x[i : i + 1]` in an hl.grid loop), reads
  or writes that many lanes: one whole-dimension axis, masked where it passes the dimension's end.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dataclasses

import sympy
import torch

from tessera import exc
from tessera.location import user_location
from tessera.trace.bounds import provably_nonnegative
from tessera.trace.proxy import TensorProxy, TileProxy, TileValue

if TYPE_CHECKING:
    from tessera.trace.tracer import Tracer


def is_whole_slice(item: Any) -> bool:
    """`:` (no bounds, no step). Compares components by identity: slice bounds may be proxies or
    symbols, whose `==` builds an expression instead of answering."""
    return isinstance(item, slice) and item.start is None and item.stop is None and item.step is None


def _is_tile(item: Any) -> bool:
    """A tile or a tile value with dims: such an index loads/stores rather than views."""
    return isinstance(item, TileProxy) or (isinstance(item, TileValue) and any(a.block != 1 for a in item.axes))


def split_view(tracer: Tracer, tensor: TensorProxy, index: Any) -> tuple[TensorProxy, list[Any] | None]:
    """Apply the slices with bounds in `index` as a view.

    Returns (view, rest): `rest` is what still indexes the view (tiles, `:` where the slices
    were), or None when the index is a view alone (`t[a:b]`, `t[i, a:b]`). With no bounded slice
    in `index`, the tensor itself and `index` come back unchanged.
    """
    items = list(index) if isinstance(index, (tuple, list)) else [index]
    if not any(isinstance(item, slice) and not is_whole_slice(item) for item in items):
        return tensor, items
    spot = next((position for position, item in enumerate(items) if item is Ellipsis), None)
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    if spot is not None:
        items[spot:spot + 1] = [slice(None)] * (tensor.dim() - consumed)
        consumed = tensor.dim()
    if consumed > tensor.dim():
        raise exc.RankMismatch(f"{tensor.name} has {tensor.dim()} dimensions but is indexed with {consumed}",
                                location=user_location())
    items += [slice(None)] * (tensor.dim() - consumed)  # like torch: trailing dims are kept
    # a window (`t[s : s + 2 * block]`, `t[i : i + 1]` with `s`, `i` moving with a tile or loop)
    # is read or written as one, tiles or not: as a view its clipped length would change from
    # tile to tile, which no register block holds
    loads = any(_is_tile(item) or isinstance(item, slice) and window_of(tracer, item) is not None for item in items)
    sizes: list[Any] = []
    strides: list[Any] = []
    conditions = list(tensor.conditions)
    offset = tensor.offset
    rest: list[Any] = []
    dim = 0
    for item in items:
        if item is None:
            if loads:
                rest.append(None)
            else:
                sizes.append(sympy.Integer(1))
                strides.append(sympy.Integer(0))
            continue
        size, stride = tensor.sizes[dim], tensor.strides[dim]
        dim += 1
        window = window_of(tracer, item) if loads and isinstance(item, slice) else None
        if window is not None:  # the view starts at the window; the load reads `length` lanes of it
            offset = offset + window.start * stride
            sizes.append(size - window.start)
            strides.append(stride)
            rest.append(window)
        elif isinstance(item, slice) and not is_whole_slice(item):
            low, high = _slice_bounds(tracer, item, size)
            step = 1 if item.step is None else item.step  # `a:b:step`: every step-th element
            offset = offset + low * stride
            sizes.append(high - low if step == 1 else sympy.floor((high - low + step - 1) / step))
            strides.append(stride * step)
            rest.append(slice(None))
        elif isinstance(item, slice) or loads:
            sizes.append(size)
            strides.append(stride)
            rest.append(item)
        else:  # a scalar index selects: the dim goes, and out-of-range indices mask every access
            position = tracer.scalar_expr(item)
            conditions.append((position, size))
            offset = offset + position * stride
    view = TensorProxy(tensor.name, tensor.dtype, sizes, strides, tensor.device, offset=offset,
                       limits=tensor.limits, conditions=tuple(conditions))  # (an offset may break 16-byte alignment)
    return view, (rest if loads else None)


@dataclasses.dataclass(frozen=True)
class Window:
    """What indexes a window's dim of its view: `length` lanes from the view's start (the load
    masks the lanes past the view's size)."""

    start: Any
    length: Any  # an int, or a host int's symbol


def window_of(tracer: Tracer, item: slice) -> Window | None:
    """`s : s + n` with `s` moving with a tile or loop (never below 0) and `n` a positive
    compile-time or host int (a block size times a constant, say): a Window. Python would clip such a slice to a length
    that changes from tile to tile, which no register block holds; None for other slices."""
    if item.start is None or item.stop is None or not (item.step is None or (isinstance(item.step, int)
                                                                             and item.step == 1)):
        return None
    start = tracer.symbols.canonical(tracer.scalar_expr(item.start))
    stop = tracer.symbols.canonical(tracer.scalar_expr(item.stop))
    if not isinstance(start, sympy.Basic) or start.free_symbols <= set(tracer.symbols.values):
        return None  # a host start: an ordinary (clipped) slice
    length = sympy.expand(stop - start)
    if not length.free_symbols <= set(tracer.symbols.values) or not provably_nonnegative(start, tracer.loop_minimums):
        return None
    if not length.is_Integer:  # a host int (`x[t, s : s + width]`): guarded positive, as this call's
        if tracer.symbols.evaluate(length) <= 0:
            return None
        tracer.symbols.guard(sympy.Gt(length, 0), f"window length {length} is positive")
    elif int(length) <= 0:
        return None
    return Window(start, length)


def _slice_bounds(tracer: Tracer, item: slice, size: Any) -> tuple[Any, Any]:
    """(first, one past last) of a slice of a dimension, clipped into `[0, size]`."""
    if item.step is not None:  # a host int step (an argument, a closure's int): this call's value
        item = slice(item.start, item.stop, tracer.pinned_int(item.step, "slice step"))
    if item.step is not None and not (isinstance(item.step, int) and not isinstance(item.step, bool)
                                      and item.step > 0):
        raise exc.IndexingError(f"a slice with step {item.step!r} inside a tile loop: steps are positive "
                                "compile-time ints (as torch requires them positive)", location=user_location(),
                                hint="slice with a constant step such as x[::2]")

    def bound(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            return size + value  # Python's negative index, for literal ints
        expr = tracer.symbols.canonical(tracer.scalar_expr(value))
        if isinstance(expr, sympy.Basic) and expr.free_symbols and expr.free_symbols <= set(tracer.symbols.values):
            # a host int: negative counts from the end, as in Python; the sign is guarded
            negative = tracer.symbols.evaluate(expr) < 0
            tracer.symbols.guard(sympy.Lt(expr, 0) if negative else sympy.Ge(expr, 0),
                                 f"slice bound {expr} is {'below' if negative else 'at or above'} 0")
            return size + expr if negative else expr
        # A value loaded on the device: its sign is known only there. `Min(Max(-e, 0), 1)` is 1
        # for a negative int and 0 otherwise, so this is Python's rule in Min/Max arithmetic
        # (which every backend prints), without a branch.
        return expr + size * sympy.Min(sympy.Max(-expr, 0), 1)

    # (`is`/isinstance only: `==` on a tile value builds a node)
    start_zero = item.start is None or (isinstance(item.start, int) and item.start == 0)
    low = sympy.Integer(0) if start_zero else _clip(bound(item.start), sympy.Integer(0), size)
    high = size if item.stop is None else _clip(bound(item.stop), low, size)
    return low, high


def _clip(value: Any, low: Any, high: Any) -> Any:
    return sympy.Min(sympy.Max(value, low), high)


def reshape_view(tracer: Tracer, tensor: TensorProxy, shape: tuple[Any, ...]) -> TensorProxy:
    """`tensor.reshape(m, k)` / `.view(m, k)` of a contiguous tensor or view, sizes possibly runtime."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    sizes = [tracer.symbols.canonical(tracer.scalar_expr(size)) for size in shape]
    numel = sympy.Integer(1)
    for size in tensor.sizes:
        numel = numel * size
    inferred = [d for d, size in enumerate(sizes) if size.is_Integer and int(size) == -1]
    if len(inferred) > 1:
        raise exc.ShapeMismatchError("only one dimension of a reshape can be -1", location=user_location())
    if inferred:
        known = sympy.Integer(1)
        for d, size in enumerate(sizes):
            if d != inferred[0]:
                known = known * size
        sizes[inferred[0]] = sympy.floor(numel / known)
    if not _contiguous(tracer, tensor):
        raise exc.ShapeMismatchError(
            f"cannot view {tensor.name} with sizes {list(tensor.sizes)} and strides {list(tensor.strides)} as "
            f"{sizes}: its elements are not contiguous, so the result cannot be a view (torch's reshape "
            "would copy, and a kernel cannot allocate a copy)", location=user_location(),
            hint="reshape (or .contiguous()) on the host before the kernel, or index the original dimensions")
    inner = tensor.strides[-1] if tensor.dim() else sympy.Integer(1)
    strides: list[Any] = []
    running = inner
    for size in reversed(sizes):
        strides.insert(0, running)
        running = running * size
    new_numel = sympy.Integer(1)
    for size in sizes:
        new_numel = new_numel * size
    limits = tensor.limits
    if sympy.expand(new_numel - numel) != 0:
        # sizes only known at run time (or simply different): accesses past the source's last
        # element are masked
        limits = limits + (tensor.offset + numel * inner,)
    view = TensorProxy(tensor.name, tensor.dtype, sizes, strides, tensor.device, offset=tensor.offset,
                       limits=limits, conditions=tensor.conditions, aligned16=tensor.aligned16)
    return view


def _contiguous(tracer: Tracer, tensor: TensorProxy) -> bool:
    """Row-major with no gaps (up to the innermost stride): what a view-reshape needs."""
    for d in range(tensor.dim() - 1):
        if tensor.sizes[d + 1] == 1:
            continue
        if not _equal(tracer, tensor.strides[d], tensor.strides[d + 1] * tensor.sizes[d + 1]):
            return False
    return True


def _equal(tracer: Tracer, a: Any, b: Any) -> bool:
    """Provably equal, or equal for this call's host values (then guarded)."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if sympy.expand(a - b) == 0:
        return True
    if tracer.symbols.on_device(a) or tracer.symbols.on_device(b):
        return False
    if tracer.symbols.evaluate(a) != tracer.symbols.evaluate(b):
        return False
    tracer.symbols.guard(sympy.Eq(a, b), f"{a} == {b} (a contiguous view)")
    return True
