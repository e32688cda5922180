"""Stacks of like tensors: `hl.stacktensor_like(example, dev_ptrs)` (Helion's `hl.StackTensor`).

`dev_ptrs` holds the data pointers (`t.data_ptr()`, uint64 or int64) of tensors laid out like
`example` (same sizes, strides and dtype). Indexing the stack indexes each of them: a load
`stack[tile]` has the pointers' dims first, then the index's (`[len(ptrs), tile]`), and a store
`stack[tile] = v` writes `v[j]` into tensor `j`. The pointers are data, so which tensors a
kernel touches can change from call to call without a recompile.

>>> data = hl.stacktensor_like(example, dev_ptrs[:])[tile]       # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import itertools
from typing import Any, NamedTuple

import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.language import eager_indexing
from tessera.location import user_location
from tessera.trace.indexing import resolve_index, stored_value
from tessera.trace.proxy import TensorProxy, TileValue
from tessera.trace.tracer import Tracer


class StackTensor(NamedTuple):
    """Tensors laid out like `tensor_like`, at the addresses in `dev_ptrs`, indexed as one: made
    by `hl.stacktensor_like` inside a tile loop. Its shape is `dev_ptrs.shape + tensor_like.shape`."""

    tensor_like: Any
    dev_ptrs: Any

    @property
    def dtype(self) -> torch.dtype:
        return self.tensor_like.dtype

    @property
    def device(self) -> torch.device:
        return self.tensor_like.device

    @property
    def shape(self) -> tuple:
        return (*self.dev_ptrs.shape, *self.tensor_like.shape)

    def __getitem__(self, index: Any) -> Any:
        return stack_load_p.bind(self, _as_tuple(index))

    def __setitem__(self, index: Any, value: Any) -> None:
        stack_store_p.bind(self, _as_tuple(index), value)

    def new_empty(self, *args: Any, **kwargs: Any) -> Any:
        return self.tensor_like.new_empty(*args, **kwargs)


def stacktensor_like(tensor_like: Any, dev_ptrs: Any) -> StackTensor:
    """A stack of the tensors at `dev_ptrs` (a tile value of data pointers, e.g. `dev_ptrs[:]`),
    each laid out like `tensor_like` (a tensor argument of the kernel).

    >>> stack = hl.stacktensor_like(example, dev_ptrs[:])         # doctest: +SKIP
    >>> out[:, tile] = stack[tile]
    """
    return stacktensor_like_p.bind(tensor_like, dev_ptrs)


def _as_tuple(index: Any) -> tuple:
    return tuple(index) if isinstance(index, (tuple, list)) else (index,)


_POINTER_DTYPES = (torch.uint64, torch.int64)


def _check_pointers(dev_ptrs: Any, tensor_like: Any) -> None:
    if not isinstance(tensor_like, (torch.Tensor, TensorProxy)) or getattr(tensor_like, "dim", None) is None:
        raise exc.TesseraError(f"hl.stacktensor_like: tensor_like is {type(tensor_like).__name__}",
                               location=user_location(2), hint="pass a tensor argument of the kernel laid out like "
                                                               "the stacked tensors")
    if not isinstance(dev_ptrs, (torch.Tensor, TileValue)) or dev_ptrs.dtype not in _POINTER_DTYPES:
        raise exc.DtypeError(f"hl.stacktensor_like: dev_ptrs must hold data pointers (uint64 or int64), got "
                             f"{getattr(dev_ptrs, 'dtype', type(dev_ptrs).__name__)}", location=user_location(2),
                             hint="torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64, device=...), "
                                  "loaded in the tile loop: dev_ptrs[:]")


# -- eager: each pointer becomes a view of the memory it points to ------------------------------
class _CudaMemory:
    """Raw device bytes for torch.as_tensor (the CUDA array interface)."""

    def __init__(self, address: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False),
                                         "strides": None, "version": 3}


def _view_at(address: int, like: torch.Tensor) -> torch.Tensor:
    """The tensor laid out like `like` whose data starts at `address`."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(like.shape, like.stride()) if size > 0)
    size = span * like.element_size()
    if like.device.type == "cuda":
        raw = torch.as_tensor(_CudaMemory(address, size), device=like.device)
    else:
        raw = torch.frombuffer((ctypes.c_uint8 * size).from_address(address), dtype=torch.uint8)
    return raw.view(like.dtype).as_strided(like.shape, like.stride())


def _views(stack: StackTensor) -> tuple[tuple[int, ...], list[torch.Tensor]]:
    pointers = stack.dev_ptrs.reshape(-1).view(torch.int64).tolist() if stack.dev_ptrs.dtype is torch.uint64 \
        else stack.dev_ptrs.reshape(-1).tolist()
    return tuple(stack.dev_ptrs.shape), [_view_at(p & (2 ** 64 - 1), stack.tensor_like) for p in pointers]


def _stacktensor_like_eager(tensor_like: Any, dev_ptrs: Any) -> StackTensor:
    _check_pointers(dev_ptrs, tensor_like)
    return StackTensor(tensor_like, dev_ptrs)


def _stack_load_eager(stack: StackTensor, index: tuple) -> torch.Tensor:
    shape, views = _views(stack)
    parts = [eager_indexing.load(view, index) for view in views]
    if not parts:
        empty = eager_indexing.load(stack.tensor_like, index)
        return empty.new_empty((*shape, *empty.shape))
    return torch.stack(parts).reshape(*shape, *parts[0].shape)


def _stack_store_eager(stack: StackTensor, index: tuple, value: Any) -> None:
    shape, views = _views(stack)
    if not views:
        return
    target = eager_indexing.load(views[0], index).shape
    value = torch.as_tensor(value, device=interpreter.device()).expand(*shape, *target)
    for view, position in zip(views, itertools.product(*(range(s) for s in shape))):
        eager_indexing.store(view, index, value[position])


# -- trace: a load or store whose base pointer is a value (one per stacked tensor) --------------
def _stacktensor_like_trace(tracer: Tracer, tensor_like: Any, dev_ptrs: Any) -> StackTensor:
    _check_pointers(dev_ptrs, tensor_like)
    if not isinstance(dev_ptrs, TileValue):
        raise exc.TesseraError("hl.stacktensor_like: dev_ptrs must be loaded in the tile loop",
                               location=user_location(), hint="pass dev_ptrs[:] (or dev_ptrs[tile])")
    if not isinstance(tensor_like, TensorProxy):
        raise exc.TesseraError("hl.stacktensor_like: tensor_like must be a tensor argument", location=user_location(),
                               hint="pass a host tensor laid out like the stacked ones")
    return StackTensor(tensor_like, dev_ptrs)


def _stack_load_trace(tracer: Tracer, stack: StackTensor, index: tuple) -> TileValue:
    like, pointers = stack.tensor_like, stack.dev_ptrs
    accesses, shape = resolve_index(tracer, like, index, reading=True)
    return tracer.emit(Op.LOAD, [None, pointers.node], (*pointers.axes, *shape), like.dtype, tensor=like.ref(),
                       accesses=accesses, eviction_policy=None, stacked=len(pointers.axes))


def _stack_store_trace(tracer: Tracer, stack: StackTensor, index: tuple, value: Any) -> None:
    like, pointers = stack.tensor_like, stack.dev_ptrs
    accesses, shape = resolve_index(tracer, like, index)
    full = (*pointers.axes, *shape)
    tracer.emit(Op.STORE, [stored_value(tracer, like, full, value), None, pointers.node], full, None,
                tensor=like.ref(), accesses=accesses, atomic=None, sem=None, stacked=len(pointers.axes))


stacktensor_like_p = defined_primitive("stacktensor_like", _stacktensor_like_eager, _stacktensor_like_trace)
stack_load_p = defined_primitive("stack_load", _stack_load_eager, _stack_load_trace)
stack_store_p = defined_primitive("stack_store", _stack_store_eager, _stack_store_trace)
