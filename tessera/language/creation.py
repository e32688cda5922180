"""Tile allocations: `hl.zeros`, `hl.full`, `hl.arange`."""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import UNIT, Axis, Op
from tessera.ir.primitive import Primitive
from tessera.language.constexpr import BlockSizeInt
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import ask_torch, check_dtype
from tessera.language.eager_indexing import mark_tail_tiles
from tessera.language.tile import Tile
from tessera.language.view import cast
from tessera.location import user_location
from tessera.trace.proxy import AxisSize, TensorProxy, TileProxy, TileValue
from tessera.trace.tracer import Tracer

ShapeArg = Sequence[Any]  # tiles, ints, or block sizes


def zeros(shape: ShapeArg, dtype: torch.dtype = torch.float32, device: Any = None) -> Any:
    """A tile of zeros; dimensions are tiles (their block) or compile-time ints.

    `device` may name the kernel's device (Helion's spelling, `device=x.device`); tiles always
    live in the registers of the device the kernel runs on.

    >>> acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)   # doctest: +SKIP
    """
    check_device(device)
    return full_p.bind(tuple(shape), 0, dtype=dtype)


def full(shape: ShapeArg, value: Any, dtype: torch.dtype = torch.float32, device: Any = None) -> Any:
    """A tile filled with `value`.

    >>> m_i = hl.full([tile_m], float("-inf"), dtype=torch.float32)   # doctest: +SKIP
    """
    check_device(device)
    return full_p.bind(tuple(shape), value, dtype=dtype)


def arange(*args: Any, dtype: torch.dtype = torch.int32, device: Any = None, **kwargs: Any) -> Any:
    """`torch.arange` as a tile (int32 by default): `hl.arange(end)`, `hl.arange(start, end[, step])`,
    or torch's keywords `start=`, `end=`, `step=`.

    >>> offsets = hl.arange(16)   # doctest: +SKIP
    """
    check_device(device)
    named = {name: kwargs.pop(name) for name in ("start", "end", "step") if name in kwargs}
    if kwargs or len(args) > 3:
        unknown = ", ".join(kwargs) or f"{len(args)} positional arguments"
        raise exc.TesseraError(f"hl.arange got {unknown}: it takes torch.arange's (start, end, step)",
                               location=user_location(), hint="write hl.arange(end) or hl.arange(start, end, step)")
    positions = dict(zip(("end",) if len(args) == 1 else ("start", "end", "step"), args))
    values = {"start": 0, "step": 1, **positions, **named}
    if "end" not in values:
        raise exc.TesseraError("hl.arange without an end", location=user_location(), hint="write hl.arange(end)")
    return arange_p.bind(values["start"], values["end"], step=values["step"], dtype=dtype)


def check_device(device: Any) -> None:
    """`device=` of an allocation names the kernel's device, or a located error."""
    if device is None:
        return
    running = interpreter.device()
    wanted = torch.device(device)
    if wanted.type != running.type or (wanted.index is not None and running.index is not None
                                       and wanted.index != running.index):
        raise exc.DeviceMismatchError(
            f"a tile allocated with device={wanted} in a kernel running on {running}", location=user_location(2),
            hint="leave device= out (tiles live on the kernel's device) or pass the device of the kernel's tensors")


def _extent(dim: Any, position: int) -> int:
    if isinstance(dim, Tile):
        return len(dim)
    if isinstance(dim, torch.Tensor):  # a value read from tensor data: fails as it does when compiled
        raise dynamic_allocation_error(position, "a value read from tensor data")
    return int(dim)


def dynamic_allocation_error(position: int, what: str) -> exc.DynamicAllocationError:
    """The error for a register allocation whose size is only known at run time."""
    return exc.DynamicAllocationError(
        f"hl.zeros/hl.full: dimension {position} is {what}, only known at run time, but a tile lives in "
        "registers, whose size must be known when the kernel is compiled",
        location=user_location(),
        hint="allocate per tile of that size instead: `for tile in hl.tile(m): acc = hl.zeros([tile, 4])` "
             "(a runtime size works as a loop bound, slice bound or view size); or, for a size the host "
             "knows, make it a compile-time constant with `m = hl.specialize(m)` before the tile loop")


full_p = Primitive("full")


@full_p.def_eager
def _full_eager(shape: tuple, value: Any, *, dtype: torch.dtype) -> torch.Tensor:
    result = torch.full([_extent(d, i) for i, d in enumerate(shape)], value, dtype=dtype, device=interpreter.device())
    mark_tail_tiles(result, shape, allocation=True)  # a tail tile's dim, told from a size-1 dim that broadcasts
    return result


arange_p = Primitive("arange")


@arange_p.def_eager
def _arange_eager(begin: Any, end: Any, *, step: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(int(begin), int(end), step, dtype=dtype, device=interpreter.device())


@full_p.def_trace
def _full_trace(tracer: Tracer, shape: tuple, value: Any, *, dtype: torch.dtype) -> TileValue:
    check_dtype(dtype, "hl.full/hl.zeros")
    ask_torch("hl.full", lambda fill: torch.full([1], fill, dtype=dtype), (value,), {})  # 1000 in int8: refused
    return tracer.emit(Op.FULL, [tracer.symbols.canonical(value)], shape_axes(tracer, shape), dtype)


def shape_axes(tracer: Tracer, shape: tuple) -> tuple[Axis, ...]:
    """The axes of a register allocation `[tile, 8, ...]`: a tile's axis, or for a compile-time
    int a whole-dimension axis of that size (1: the unit axis)."""
    axes = []
    for position, dim in enumerate(shape):
        if isinstance(dim, sympy.Basic) and not isinstance(dim, BlockSizeInt):
            dim = tracer.symbols.canonical(dim)  # a size pinned by hl.specialize / static shapes is an int
            dim = int(dim) if dim.is_Integer else dim
        if isinstance(dim, TileProxy):
            axes.append(dim.axis)
        elif isinstance(dim, AxisSize):
            axes.append(dim.axis)
        elif isinstance(dim, BlockSizeInt) and dim > 1:
            axes.append(tracer.block_size_axis(int(dim)))
        elif isinstance(dim, int) and not isinstance(dim, bool):
            if dim == 1:
                axes.append(UNIT)
            else:
                axes.append(tracer.full_axis(dim))
        elif isinstance(dim, TileValue) or tracer.symbols.on_device(dim):
            raise dynamic_allocation_error(position, "a value read from tensor data")
        else:
            raise dynamic_allocation_error(position, f"the runtime size {dim}")
    return tuple(axes)


@arange_p.def_trace
def _arange_trace(tracer: Tracer, begin: Any, end: Any, *, step: int, dtype: torch.dtype) -> TileValue:
    """The length `(end - begin) / step` must be a compile-time int; the bounds may move per tile
    (`hl.arange(tile.begin * 2, tile.begin * 2 + tile.block_size * 2)`): a shifted arange."""
    check_dtype(dtype, "hl.arange")
    if isinstance(end, AxisSize) and not isinstance(begin, AxisSize) and begin == 0 and step == 1:
        # `torch.arange(v.size(d))`: the lane numbers of that dim, on its own axis (a tile's lanes
        # count from its begin, as eager's tile of that length does)
        lanes = tracer.tile_index(end.axis)
        if end.axis.is_tile:
            lanes = apply_elementwise(tracer, "sub", lanes, end.axis.begin)
        return lanes if lanes.dtype == dtype else cast(tracer, lanes, dtype)
    if any(isinstance(v, AxisSize) and v.axis.is_tile for v in (begin, end, step)):
        raise exc.DynamicAllocationError("hl.arange/torch.arange of a tile value's size takes it as the only bound",
                                         location=user_location(), hint="write torch.arange(v.size(d))")
    begin, end, step = (tracer.symbols.canonical(sympy.sympify(v.number("torch.arange") if isinstance(v, AxisSize)
                                                               else v)) for v in (begin, end, step))
    length = sympy.ceiling(sympy.simplify((end - begin) / step))
    if not length.is_Integer and step.is_Integer and int(step) > 0 and begin.is_Integer \
            and length.free_symbols <= set(tracer.symbols.values):
        # a length of host sizes (`torch.arange(0, n, 2)`, n a dim): a whole dim of that runtime
        # length, masked as one read with `:` is (a block per power-of-two bucket of the length)
        runtime_length = sympy.floor((end - begin + int(step) - 1) / int(step))
        return tracer.emit(Op.ARANGE, [], (tracer.full_axis(runtime_length),), dtype, begin=int(begin), step=int(step))
    if not (length.is_Integer and step.is_Integer and int(step) > 0):
        raise exc.DynamicAllocationError(
            f"hl.arange/torch.arange from {begin} to {end} by {step}: its length must be a compile-time int "
            "(the bounds may move per tile; their distance may not)", location=user_location(),
            hint="use tile.index for the indices of a tile, or bounds a block-size multiple apart")
    # as long as an enclosing tile's block (`tile.block_size * 2 // 2`): it combines lane for lane with that tile
    blocks = {axis.block for axis in tracer.launch_axes if axis.is_tile}
    axis = tracer.block_size_axis(int(length)) if int(length) in blocks and int(length) > 1 \
        else tracer.full_axis(max(int(length), 0))
    if begin.is_Integer:
        return tracer.emit(Op.ARANGE, [], (axis,), dtype, begin=int(begin), step=int(step))
    counted = tracer.emit(Op.ARANGE, [], (axis,), torch.int32, begin=0, step=int(step))
    shifted = apply_elementwise(tracer, "add", counted, begin)
    return shifted if dtype == shifted.dtype else cast(tracer, shifted, dtype)


def _torch_arange_trace(tracer: Tracer, *bounds: Any, step: Any = None, dtype: torch.dtype | None = None,
                        device: Any = None, **_: Any) -> TileValue:
    """torch.arange(end), (start, end), (start, end, step) inside a tile loop: int64 for int
    bounds (torch's rule), else the default float dtype."""
    check_device(device)
    if step is not None:
        bounds = (*bounds, step)
    begin, end, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds[:2], bounds[2] if len(bounds) > 2 else 1)
    # a size (`v.size(1)`, an AxisSize) is an int too: torch.arange(v.size(1)) is int64 in eager mode
    integral = all(isinstance(v, (int, sympy.Integer, AxisSize)) or getattr(v, "is_integer", False)
                   for v in (begin, end, step))
    return _arange_trace(tracer, begin, end, step=step, dtype=dtype or (torch.int64 if integral
                                                                           else torch.get_default_dtype()))


# -- torch's allocations shaped like a tile value: `torch.zeros_like(v)`, `v.new_zeros(shape)` ----
# Registers, like hl.zeros; `empty` means zeros (registers have no "uninitialized").
T = torch.Tensor
_LIKE_FILL = {"zeros_like": 0, "ones_like": 1, "empty_like": 0}
_NEW_FILL = {"new_zeros": 0, "new_ones": 1, "new_empty": 0}


def like_axes(tracer: Tracer, value: Any) -> tuple[Axis, ...]:
    """The axes of a `*_like` allocation: a tile value's own, or for a whole tensor argument one
    whole-dimension axis per dim (its sizes must be compile-time ints, as for hl.zeros)."""
    if isinstance(value, TensorProxy):
        return shape_axes(tracer, tuple(_static_size(tracer, size) for size in value.sizes))
    return value.axes


def _static_size(tracer: Tracer, size: Any) -> Any:
    """A tensor argument's size as an int when it is a compile-time constant (specialized)."""
    size = tracer.symbols.canonical(size)
    return int(size) if getattr(size, "is_Integer", False) else size


def _like_trace(fill: Any) -> Any:
    def rule(tracer: Tracer, value: Any, *, dtype: torch.dtype | None = None, device: Any = None,
             **_: Any) -> TileValue:
        check_device(device)
        return tracer.emit(Op.FULL, [fill], like_axes(tracer, value), dtype or value.dtype)
    return rule


for _name, _fill in _LIKE_FILL.items():
    _function = getattr(torch, _name)
    _primitive = Primitive(_name, torch_functions=(_function,))
    _primitive.def_trace(_like_trace(_fill))
    if _name == "empty_like":  # zeros in eager mode too: a kernel's result never depends on stale memory
        _primitive.def_eager(lambda value, **kwargs: torch.zeros_like(value, **kwargs))


def _full_like_trace(tracer: Tracer, value: TileValue, fill_value: Any, *, dtype: torch.dtype | None = None,
                     device: Any = None, **_: Any) -> TileValue:
    check_device(device)
    return tracer.emit(Op.FULL, [tracer.symbols.canonical(fill_value)], like_axes(tracer, value),
                       dtype or value.dtype)


full_like_p = Primitive("full_like", torch_functions=(torch.full_like,))
full_like_p.def_trace(_full_like_trace)


def _shape_arg(sizes: tuple) -> tuple:
    """`new_zeros(a, b)` or `new_zeros((a, b))` / `new_zeros(v.shape)`: the sizes as one tuple."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        return tuple(sizes[0])
    return tuple(sizes)


def _new_shape_and_fill(method: Any, fill: Any, args: tuple, kwargs: dict) -> tuple[tuple, Any]:
    """(sizes, fill value) of `v.new_zeros(a, b)` / `new_zeros((a, b))` / `new_zeros(size=...)` /
    `new_full(size, fill_value)`, positional or by keyword."""
    if method is T.new_full:
        shape = args[0] if args else kwargs.pop("size")
        return _shape_arg((shape,)), args[1] if len(args) > 1 else kwargs.pop("fill_value")
    return _shape_arg(args if args else (kwargs.pop("size"),)), fill


def _new_eager(method: Any, fill: Any) -> Any:
    def rule(value: torch.Tensor, *args: Any, dtype: torch.dtype | None = None, device: Any = None,
             **kwargs: Any) -> torch.Tensor:
        shape, fill_value = _new_shape_and_fill(method, fill, args, kwargs)
        sizes = [_extent(d, i) for i, d in enumerate(shape)]
        # inside a tile loop a register tile (the kernel's device); on the host torch's rule
        return torch.full(sizes, fill_value, dtype=dtype or value.dtype, device=device or value.device)
    return rule


def _new_trace(method: Any, fill: Any) -> Any:
    def rule(tracer: Tracer, value: Any, *args: Any, dtype: torch.dtype | None = None, device: Any = None,
             **kwargs: Any) -> TileValue:
        check_device(device)
        shape, fill_value = _new_shape_and_fill(method, fill, args, kwargs)
        return _full_trace(tracer, shape, fill_value, dtype=dtype or value.dtype)
    return rule


for _name, _fill in (*_NEW_FILL.items(), ("new_full", None)):
    _method = getattr(T, _name)
    _primitive = Primitive(_name, torch_functions=(_method,))
    _primitive.def_eager(_new_eager(_method, _fill))
    _primitive.def_trace(_new_trace(_method, _fill))


# -- torch's factories with tile sizes inside a loop: `torch.zeros([tile_m, 8], dtype=...)` -------
def _factory_trace(fill: Any) -> Any:
    def rule(tracer: Tracer, *size: Any, dtype: torch.dtype | None = None, device: Any = None, **_: Any) -> TileValue:
        check_device(device)
        return _full_trace(tracer, _shape_arg(size), fill, dtype=dtype or torch.get_default_dtype())
    return rule


def _torch_full_trace(tracer: Tracer, size: Any, fill_value: Any, *, dtype: torch.dtype | None = None,
                      device: Any = None, **_: Any) -> TileValue:
    check_device(device)
    if dtype is None:  # torch infers it from the fill value
        dtype = torch.full([], fill_value).dtype if isinstance(fill_value, (bool, int, float)) else torch.float32
    return _full_trace(tracer, _shape_arg((size,)), fill_value, dtype=dtype)


def _factory_eager(function: Any) -> Any:
    """`function` (torch.zeros, ...) in eager mode: inside a tile loop a value without a `device=`
    is made on the kernel's device, as the registers of compiled code are (host code: torch's rule)."""
    def rule(*args: Any, **kwargs: Any) -> Any:
        eager = interpreter.active()
        if kwargs.get("device") is None and getattr(eager, "loop_depth", 0):
            kwargs["device"] = eager.device
        return function(*args, **kwargs)
    return rule


for _name, _fill in (("zeros", 0), ("ones", 1), ("empty", 0)):
    _primitive = Primitive(f"torch_{_name}", torch_functions=(getattr(torch, _name),))
    _primitive.def_trace(_factory_trace(_fill))
    # empty is zeros in eager mode too, as for empty_like
    _primitive.def_eager(_factory_eager(torch.zeros if _name == "empty" else getattr(torch, _name)))
torch_arange_p = Primitive("torch_arange", torch_functions=(torch.arange,))
torch_arange_p.def_eager(_factory_eager(torch.arange))
torch_arange_p.def_trace(_torch_arange_trace)
torch_full_p = Primitive("torch_full", torch_functions=(torch.full,))
torch_full_p.def_eager(_factory_eager(torch.full))
torch_full_p.def_trace(_torch_full_trace)


def _new_tensor_eager(value: torch.Tensor, data: Any, *, dtype: torch.dtype | None = None, device: Any = None,
                      requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(data, dtype=dtype or value.dtype, device=device or value.device)


def _new_tensor_trace(tracer: Tracer, value: Any, data: Any, *, dtype: torch.dtype | None = None, device: Any = None,
                      requires_grad: bool = False) -> TileValue:
    """`v.new_tensor(2.0)`: a 0-d constant of v's dtype (a number only: a list has no register layout)."""
    check_device(device)
    if isinstance(data, torch.Tensor) and data.dim() == 0:
        data = data.item()
    if not isinstance(data, (bool, int, float)):
        raise exc.UnsupportedOperationError(
            f"v.new_tensor({type(data).__name__}) inside a tile loop: only a number makes a 0-d constant here",
            location=user_location(), hint="pass the values to the kernel as a tensor argument and index it")
    return _full_trace(tracer, (), data, dtype=dtype or value.dtype)


new_tensor_p = Primitive("new_tensor", torch_functions=(T.new_tensor,))
new_tensor_p.def_eager(_new_tensor_eager)
new_tensor_p.def_trace(_new_tensor_trace)
