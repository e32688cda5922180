"""Per-call cache keys: what a kernel call or a launch is keyed by, built without tracing.

A call whose exact facts repeat an earlier call's skips these (exact_facts.py); every other call
computes them, so they are written for speed: each tensor's metadata
is read once, facts derived from a layout (unit strides, int64 need, size buckets) are computed
once per (shape, strides), a value's kind is decided once per Python type (not by an isinstance
chain per value), and a launch's key and kernel arguments come out of one pass over its captured
values (`launch_inputs`). What a key holds is the contract of docs/internals.md "Cache key, guards and the hit path":

- tensor: dtype, rank, which dims have unit stride, whether int64 indexing is needed, the
  (dim, size, stride) of pinned dims (`static_shapes`, `mark_static`), 16-byte alignment, the
  negative bit (`z.conj().imag`: compiled mode refuses such views);
- int: a runtime argument (its value is keyed only under `static_shapes`); float: runtime;
- `hl.specialize`d int, bool, None, str, dtype: the value with its type;
- other plain data (tuples, lists, dicts of numbers...): its typed key (constant_keys.py), so
  `(2,)` and `(2.0,)` or `[0.0]` and `[-0.0]` differ and a new list with the same contents hits;
- anything else (a helper function, an object): its identity, held weakly (`IdentityKey`).

>>> value_key(torch.empty(4, 8), static_shapes=False)                        # doctest: +SKIP
('tensor', torch.float32, 2, (False, True), False, (), True, False)
"""
from __future__ import annotations

import math
import types
from typing import Any, Sequence

import torch

from tessera import exc
from tessera.compiler import captured_cells, compiled_in, holds_tensors
from tessera.ir.tile_range import TileRange
from tessera.language.constexpr import SpecializedInt
from tessera.location import user_location
from tessera.runtime.constant_keys import IdentityKey, constant_key, defaults_key
from tessera.runtime.overlap import internal_overlap
from tessera.marking import STATIC_DIMS_ATTRIBUTE

_INT32_LIMIT = 2 ** 31 - 1

# Kinds of captured values, in the order value_key tests them (a bool is an int, a
# SpecializedInt is an int: the more specific kind must win).
TENSOR, SPECIALIZED, CONSTANT, INT, FLOAT, OTHER = range(6)
KINDS_BY_TYPE: dict[type, int] = {}  # filled by kind_of; read directly on hot paths (exact_facts.py)


def _classify(cls: type) -> int:
    if issubclass(cls, torch.Tensor):
        return TENSOR
    if issubclass(cls, SpecializedInt):
        return SPECIALIZED
    if issubclass(cls, (bool, type(None), str, torch.dtype)):
        return CONSTANT
    if issubclass(cls, int):
        return INT
    if issubclass(cls, float):
        return FLOAT
    return OTHER


def kind_of(value: Any) -> int:
    """The kind of a captured value; decided once per type, then a dict lookup."""
    cls = type(value)
    kind = KINDS_BY_TYPE.get(cls)
    if kind is None:
        kind = KINDS_BY_TYPE[cls] = _classify(cls)
    return kind


def needs_int64(tensor: torch.Tensor) -> bool:
    """Whether some element lies beyond int32 offsets from the data pointer."""
    return _layout(tensor.shape, tensor.stride())[2]


def _needs_int64(shape: Sequence[int], strides: Sequence[int]) -> bool:
    numel = math.prod(shape)
    if numel == 0:
        return False
    if numel > _INT32_LIMIT:
        return True
    reach = 0
    for size, stride in zip(shape, strides):
        reach += (size - 1) * abs(stride)
    return reach > _INT32_LIMIT


# (shape, strides) -> (unit-stride flags, strides other than 1, needs int64, size buckets,
# internal overlap).
# A pure function of its key, remembered because every call needs it for every tensor; bounded
# because shapes may change on every call (it is emptied when full).
_Layout = tuple[tuple[bool, ...], tuple[int, ...], bool, tuple[int, ...], bool]
_LAYOUTS: dict[tuple[Sequence[int], Sequence[int]], _Layout] = {}
_LAYOUTS_MAX = 4096


def _layout(shape: Sequence[int], strides: Sequence[int]) -> _Layout:
    key = (shape, strides)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = (tuple([s == 1 for s in strides]), tuple([s for s in strides if s != 1]),
                                  _needs_int64(shape, strides), tuple([size_bucket(s) for s in shape]),
                                  internal_overlap(shape, strides))
    return layout


def overlaps_itself(tensor: torch.Tensor) -> bool:
    """Whether two elements of `tensor` share memory (overlap.py), remembered per layout."""
    return _layout(tensor.shape, tensor.stride())[4]


def tensor_key(tensor: torch.Tensor, static_shapes: bool) -> tuple:
    """The key part of one tensor (see the module docstring)."""
    shape, strides = tensor.shape, tensor.stride()
    pinned = range(len(strides)) if static_shapes else getattr(tensor, STATIC_DIMS_ATTRIBUTE, ())
    return _tensor_key(tensor, shape, strides, pinned, _layout(shape, strides))


def _tensor_key(tensor: torch.Tensor, shape: Sequence[int], strides: Sequence[int], pinned: Sequence[int],
                layout: _Layout) -> tuple:
    # shape and strides are read once by the caller: each read is a call into torch
    return ("tensor", tensor.dtype, len(strides), layout[0], layout[2],
            tuple([(d, shape[d], strides[d]) for d in pinned]) if pinned else (),
            tensor.data_ptr() & 15 == 0, tensor.is_neg())  # a negative-bit view: compiling it refuses it


def value_key(value: Any, static_shapes: bool) -> Any:
    """The part of the cache key one captured value contributes.

    Documented in docs/internals.md, "Cache key, guards and the hit path"."""
    kind = kind_of(value)
    if kind == TENSOR:
        return tensor_key(value, static_shapes)
    if kind == SPECIALIZED:
        return ("specialized", int(value))
    if kind == CONSTANT:
        return ("const", type(value), value)  # typed: True == 1, but codegen tells them apart
    if kind == INT:
        return ("int", static_shapes and value)
    if kind == FLOAT:
        return ("float",)
    if captured_cells(value) is not None:
        return _closure_inputs(value, static_shapes, [])
    if holds_tensors(value):
        return _sequence_inputs(value, static_shapes, [])
    if type(value) is types.FunctionType:
        # a plain function (no closure) is keyed by what its trace depends on: its code and
        # defaults (its globals are recorded by global_reads.py), so a lambda made afresh on every
        # call (`kernel(x, lambda acc, tile: acc + b[tile])` in a script's loop) reuses its variant
        defaults = defaults_key(value)
        if defaults is not None:
            return ("function", value.__code__, defaults)
    key = constant_key(value)
    return ("data", key) if key is not None else ("object", IdentityKey(value))


def size_bucket(size: int) -> int:
    """The bucket of sizes that share a chosen Config: 0, 1, then one per power of two ((1, 2],
    (2, 4], ..., (2048, 4096], ...). A Config's speed depends on a size's magnitude (a block of
    16 rows suits M = 1 but ran a 4096-row GEMM at a sixth of cuBLAS's speed on the H100), so
    each magnitude gets its own heuristic or tuned Config; buckets whose Configs agree share
    compiled code. (Factors of 8 were tried: a GEMM of N = 14336 then chose the Config of one of
    N = 28672 at a quarter of the speed.) `static_shapes` or `mark_static` pin exact sizes."""
    return size if size < 2 else (size - 1).bit_length() + 1


def argument_key(value: Any, static_shapes: bool) -> Any:
    """The key part of one kernel argument for choosing its Config: a launch's key plus size buckets."""
    kind = kind_of(value)
    if kind == TENSOR:
        shape, strides = value.shape, value.stride()
        pinned = range(len(strides)) if static_shapes else getattr(value, STATIC_DIMS_ATTRIBUTE, ())
        layout = _layout(shape, strides)
        return (_tensor_key(value, shape, strides, pinned, layout), layout[3])
    if isinstance(value, (list, tuple)):
        return tuple(argument_key(v, static_shapes) for v in value)
    if kind == INT or kind == SPECIALIZED:
        return ("int", size_bucket(value))
    return value_key(value, static_shapes)


_FP4X2 = torch.float4_e2m1fn_x2


def launch_inputs(values: Sequence[Any], tile_range: TileRange, static_shapes: bool) -> tuple[tuple, tuple, list[Any]]:
    """(values key, range key, kernel arguments) of one launch, in one pass over its values.

    The arguments follow the parameter order `compiled.LaunchBinding` gives the generated kernel:
    per tensor the tensor, its unpinned sizes, its unpinned strides other than 1; per runtime int
    or float the value; then the runtime loop begins and ends.
    """
    keys: list[Any] = []
    arguments: list[Any] = []
    for value in values:
        kind = kind_of(value)
        if kind == TENSOR:
            keys.append(_tensor_inputs(value, static_shapes, arguments))
        elif kind == INT:
            keys.append(("int", static_shapes and value))
            if not static_shapes:
                arguments.append(value)
        elif kind == FLOAT:
            keys.append(("float",))
            arguments.append(value)
        elif captured_cells(value) is not None:
            keys.append(_closure_inputs(value, static_shapes, arguments))
        elif holds_tensors(value):
            keys.append(_sequence_inputs(value, static_shapes, arguments))
        else:
            keys.append(value_key(value, static_shapes))
    return tuple(keys), _range_inputs(tile_range, static_shapes, arguments), arguments


def _inner_inputs(value: Any, static_shapes: bool, arguments: list[Any]) -> Any:
    """The key part of a value a closure captures or a tuple holds: a tensor's (its arguments
    appended), a nested closure's or tuple's, else the value's own key (it is compiled in)."""
    if kind_of(value) == TENSOR:
        return _tensor_inputs(value, static_shapes, arguments)
    if captured_cells(value) is not None:
        return _closure_inputs(value, static_shapes, arguments)
    if holds_tensors(value):
        return _sequence_inputs(value, static_shapes, arguments)
    key = constant_key(value)
    return ("data", key) if key is not None else ("object", IdentityKey(value))


def _sequence_inputs(sequence: Any, static_shapes: bool, arguments: list[Any]) -> tuple:
    """A tuple's or list's key part: its type and its items' parts, in the order
    `LaunchBinding._bind` binds them."""
    return ("sequence", type(sequence), *[_inner_inputs(item, static_shapes, arguments) for item in sequence])


def _closure_inputs(function: Any, static_shapes: bool, arguments: list[Any]) -> tuple:
    """A closure's key part: its code and, per captured value, the tensor's key (the tensor's
    arguments appended, as `LaunchBinding._bind_closure` binds it) or the value's own key (it is
    compiled in). A fresh closure of the same code and captures (made on every call) hits."""
    defaults = defaults_key(function)  # compiled in; defaults that are not plain data: this very function
    parts: list[Any] = [function.__code__, defaults if defaults is not None else ("object", IdentityKey(function))]
    parts += [_inner_inputs(value, static_shapes, arguments) for _, value in captured_cells(function) or ()]
    return ("closure", *parts)


def _tensor_inputs(tensor: torch.Tensor, static_shapes: bool, arguments: list[Any]) -> tuple:
    """A tensor's key part; appends the tensor and its runtime sizes and strides (the unpinned
    ones; strides of 1 are compiled in) to the arguments."""
    shape, strides = tensor.shape, tensor.stride()
    layout = _layout(shape, strides)
    # packed fp4 has no Triton type: the kernel reads its bytes (one per element, same shape and strides)
    arguments.append(tensor if tensor.dtype is not _FP4X2 else tensor.view(torch.uint8))
    if static_shapes:
        return _tensor_key(tensor, shape, strides, range(len(strides)), layout)
    pinned = getattr(tensor, STATIC_DIMS_ATTRIBUTE, ())
    if pinned:
        arguments += [s for d, s in enumerate(shape) if d not in pinned]
        arguments += [s for d, s in enumerate(strides) if d not in pinned and s != 1]
    else:
        arguments += shape
        arguments += layout[1]
    return _tensor_key(tensor, shape, strides, pinned, layout)


def _range_inputs(tile_range: TileRange, static_shapes: bool, arguments: list[Any]) -> tuple:
    """The range's key; appends its runtime begins, then ends, to the arguments."""
    begins: list[int | None] = []
    for bound in tile_range.begins:
        if type(bound) is int and not static_shapes:  # the usual begin: 0 is compiled in, others are runtime
            if bound == 0:
                begins.append(0)
            else:
                begins.append(None)
                arguments.append(bound)
        else:
            begins.append(_other_bound("begin", bound, static_shapes, arguments))
    ends: list[int | None] = []
    for bound in tile_range.ends:
        if type(bound) is int and not static_shapes:  # the usual end: a runtime int
            ends.append(None)
            arguments.append(bound)
        else:
            ends.append(_other_bound("end", bound, static_shapes, arguments))
    return (tile_range.is_grid, tile_range.multi_dim, tuple(tile_range.block_sizes), tuple(begins), tuple(ends),
            tile_range.site)


def _other_bound(kind: str, bound: Any, static_shapes: bool, arguments: list[Any]) -> int | None:
    """A compiled-in bound's value; else None, and the bound is appended to the arguments."""
    if compiled_in(kind, bound, static_shapes):
        return int(bound)
    # int() of a tensor-valued bound (`hl.tile(0, lengths.amax())`) syncs with the device: the
    # grid size must be known on the host to launch
    arguments.append(int(bound))
    return None


_CONFIG_KEYS: dict[int, tuple[Any, str]] = {}
_CONFIG_KEYS_MAX = 4096


def config_key(config: Any) -> str:
    """`repr(config)`, remembered per Config object: repr costs a few microseconds a call.

    Relies on a Config being immutable once built (`merged` makes a new one); mutating one in
    place (`config["block_sizes"][0] = 64`) after a call would keep its old key. Entries hold
    their Config, so an id is never reused while its entry lives; the table is emptied when it
    grows past a bound (tuning runs build many Configs).
    """
    entry = _CONFIG_KEYS.get(id(config))
    if entry is not None and entry[0] is config:
        return entry[1]
    if len(_CONFIG_KEYS) >= _CONFIG_KEYS_MAX:
        _CONFIG_KEYS.clear()
    key = repr(config)
    _CONFIG_KEYS[id(config)] = (config, key)
    return key


_DEVICE_TYPES: dict[torch.device, str] = {}


def device_type(device: torch.device) -> str:
    """`device.type` ('cpu', 'cuda'), remembered per device: the attribute costs ~0.3 us a read."""
    kind = _DEVICE_TYPES.get(device)
    if kind is None:
        kind = _DEVICE_TYPES[device] = device.type
    return kind


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend([v for v in value if isinstance(v, torch.Tensor)])
    return found


# a plain function (an epilogue lambda) too: like a scalar, neither check looks into it
_PLAIN_SCALARS = frozenset({int, float, bool, type(None), str, torch.dtype, types.FunctionType})


def plain_call_device(args: tuple) -> torch.device | None:
    """The one device of a call whose arguments are all plain `torch.Tensor`s and scalars (the
    usual call), read in one pass; None for any other call, which takes the general checks
    (`is_traced_call`, `common_device`): a tensor subclass, a list, another object, two devices."""
    device = None
    for value in args:
        kind = value.__class__
        if kind is torch.Tensor:
            if device is None:
                device = value.device
            elif value.device != device:
                return None
        elif kind not in _PLAIN_SCALARS:
            return None
    return device if device is not None else _CPU


def common_device(name: str, args: tuple, kwargs: dict) -> torch.device:
    """The one device of every tensor argument (CPU when there is none)."""
    device = None
    for value in (*args, *kwargs.values()) if kwargs else args:  # the usual case, on every call
        if isinstance(value, torch.Tensor):
            if device is None:
                device = value.device
            elif value.device != device:
                break
        elif isinstance(value, (list, tuple)):
            break  # tensors inside lists, or a mismatch: the general path below
    else:
        return device if device is not None else _CPU
    devices = {t.device for t in _tensors(args, kwargs)}
    if len(devices) > 1:
        listing = ", ".join(sorted(str(d) for d in devices))
        raise exc.DeviceMismatchError(
            f"{name}() received tensors on different devices ({listing})", location=user_location(),
            hint="move every tensor argument to one device, e.g. x.to('cuda')")
    return devices.pop() if devices else _CPU


_CPU = torch.device("cpu")
