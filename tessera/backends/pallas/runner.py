"""Running a generated Pallas module on torch tensors (the only module here that imports jax).

Arguments cross into JAX by DLPack: each tensor's storage span (from its first element to its
last, strides included) is viewed as a `(1, span)` array, zero-copy when that first element is
64-byte aligned (JAX's CPU client copies other buffers; `zero_copy_inputs` says which happened). A Pallas kernel cannot write into its inputs:
it returns new arrays for the tensors it writes, and those are copied back into the caller's
tensors (one copy per written tensor, `torch.Tensor.copy_` from a DLPack view of the result).
A kernel in the blocked form (blocks.py) takes each tensor in its own shape instead (a copy
first where it is not contiguous; its `launch` pads it to whole blocks) and scalars as `(1,)`.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

import jax
import jax.dlpack
import numpy

from tessera import exc

jax.config.update("jax_enable_x64", True)  # Tessera's int64 indices, sums and argmax results

_LOCK = threading.Lock()


def storage_view(tensor: torch.Tensor) -> torch.Tensor:
    """The `(1, span)` view of the storage `tensor` addresses (at least one element)."""
    if tensor.numel() == 0:
        return torch.zeros((1, 1), dtype=tensor.dtype)
    span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return torch.as_strided(tensor, (1, span), (span, 1), tensor.storage_offset())


def to_jax(value: torch.Tensor) -> Any:
    """A torch tensor as a JAX array (DLPack: shares the memory where JAX can)."""
    return jax.dlpack.from_dlpack(value)


def shares_memory(array: Any, tensor: torch.Tensor) -> bool:
    """Whether a JAX array imported from `tensor` reads the tensor's memory (no copy was made)."""
    try:
        return int(array.unsafe_buffer_pointer()) == tensor.data_ptr()
    except Exception:  # noqa: BLE001 - a backend without buffer pointers: say it copied
        return False


class PallasRunner:
    """One generated module made callable on torch arguments; jitted once per grid and shapes."""

    def __init__(self, launch: Callable[..., Any], tensors: tuple[int, ...], written: tuple[int, ...],
                 scalar_dtypes: dict[int, str], layouts: dict[int, Any] | None = None, location: Any = None) -> None:
        self.launch = launch
        self.jitted = jax.jit(launch, static_argnums=0)
        self.blocked = layouts is not None  # the blocked form: (sizes, strides) of its tensors where constant
        self.layouts = layouts or {}
        self.location = location
        self.tensors = set(tensors)
        self.written = written
        self.scalar_dtypes = scalar_dtypes
        self.zero_copy_inputs: bool | None = None

    def values(self, arguments: list[Any]) -> tuple[dict[int, torch.Tensor], list[Any]]:
        """The tensors as the kernel addresses them (flat storage views or the tensors themselves)
        and every argument as JAX takes it."""
        views: dict[int, torch.Tensor] = {}
        values: list[Any] = []
        scalar_shape = (1,) if self.blocked else (1, 1)
        for position, value in enumerate(arguments):
            if position in self.layouts and not self.layout_matches(value, *self.layouts[position]):
                self.refuse_layout(value, *self.layouts[position])
            if position in self.tensors:
                view = views[position] = value if self.blocked else storage_view(value)
                values.append(to_jax(view.contiguous() if self.blocked else view))
            else:
                values.append(numpy.full(scalar_shape, value, dtype=self.scalar_dtypes.get(position, "int64")))
        return views, values

    def layouts_match(self, arguments: list[Any]) -> bool:
        """Whether every tensor argument has the constant sizes and strides the kernel addresses."""
        return all(self.layout_matches(arguments[position], *layout) for position, layout in self.layouts.items())

    @staticmethod
    def layout_matches(tensor: torch.Tensor, sizes: tuple[Any, ...], strides: tuple[Any, ...]) -> bool:
        """Differing constant sizes or strides belong to a view made inside the kernel, which the
        blocked form cannot read (its arrays are the arguments themselves)."""
        return tensor.dim() == len(sizes) and all(
            want is None or want == size for want, size in zip(sizes, tensor.shape)) and all(
            want is None or size <= 1 or want == stride for want, size, stride in
            zip(strides, tensor.shape, tensor.stride()))

    def refuse_layout(self, tensor: torch.Tensor, sizes: tuple[Any, ...], strides: tuple[Any, ...]) -> None:
        raise exc.UnsupportedOperationError(
            f"the kernel addresses a tensor of sizes {sizes} and strides {strides} (None: any), but the argument "
            f"is {tuple(tensor.shape)} with strides {tensor.stride()}: a view made inside the kernel, which the "
            "blocked Pallas form cannot read", location=self.location,
            hint="pass Config(pallas_addressing='flat'), or make the view in host code before the tile loop")

    def __call__(self, grid: tuple[int, ...], arguments: list[Any]) -> None:
        if any(size == 0 for size in grid):
            return
        views, values = self.values(arguments)
        if self.zero_copy_inputs is None and views:
            first = min(views)
            self.zero_copy_inputs = shares_memory(values[first], views[first])
        with _LOCK:
            results = self.jitted(tuple(int(g) for g in grid), *values)
        for position, result in zip(self.written, results):
            views[position].copy_(torch.from_dlpack(result))
