"""Indexing strategies for loads and stores: pointer arithmetic, block pointers, or TMA
tensor descriptors. The Config picks one (`indexing="block_ptr"`) or one per access, in the
order the kernel's loads and stores are traced; an access the strategy cannot express
falls back to pointers.

A block pointer or descriptor bounds each dimension by the *tile's* end, not the tensor's size,
so lanes past a tail tile read zeros and are never written, exactly like the pointer path's
masks. Descriptors are built once at the kernel top, so their bounds must be kernel arguments
(not program-dependent expressions).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from tessera.backends.triton.printer import print_expr
from tessera.ir.graph import UNIT, AccessKind, Axis, Node

STRATEGIES = ("pointer", "block_ptr", "tensor_descriptor")
_TMA_MAX_BOX = 256


def strategy_for(config: Any, access_index: int) -> str:
    """The Config's indexing choice for the access-th load/store."""
    chosen = config.get("indexing", "pointer") if config is not None else "pointer"
    if isinstance(chosen, (list, tuple)):
        return chosen[access_index] if access_index < len(chosen) else "pointer"
    return chosen


class BlockAccess:
    """A load/store expressible as a block: per kept dim its offset, bound, stride and block."""

    def __init__(self, node: Node) -> None:
        tensor = node.params["tensor"]
        self.tensor = tensor
        self.accesses = node.params["accesses"]
        self.base_terms: list[str] = []     # scalar-indexed dims fold into the base pointer
        self.offsets: list[Any] = []
        self.bounds: list[Any] = []
        self.strides: list[Any] = []
        self.blocks: list[int] = []
        self.checked: list[int] = []        # kept dims whose tile may run past its bound
        for dim, access in enumerate(node.params["accesses"]):
            stride = tensor.strides[dim]
            if access.kind is AccessKind.SCALAR:
                self.base_terms.append(f"({print_expr(access.scalar)}) * {print_expr(stride)}")
                continue
            axis = access.axis
            if axis.needs_mask:
                self.checked.append(len(self.offsets))
            self.offsets.append(axis.begin)
            # a tile the trace could not prove inside the tensor (`bound`, descriptors only) reads
            # zeros past the tensor's size, as the pointer path's `index < bound` mask does
            self.bounds.append(axis.end if axis.needs_mask else access.bound if access.bound is not None
                               else tensor.sizes[dim])
            self.strides.append(stride)
            self.blocks.append(axis.block)
        self.kept_shape = [a for a in node.shape if a is not UNIT]
        self.dims = self._descriptor_dims(node)

    @staticmethod
    def possible(node: Node, descriptor: bool = False) -> bool:
        """Whether a block pointer (or, with `descriptor`, a TMA descriptor) can express the access.
        A descriptor also takes an axis the trace could not prove inside the tensor: its dim is
        bounded by the tensor's size (and a load masks lanes past the tile's end)."""
        accesses = node.params["accesses"]
        if node.params.get("atomic") or node.inputs[-1] is not None:  # extra_mask
            return False
        if any(a.kind is AccessKind.VALUE or a.check_negative for a in accesses):
            return False
        if any(a.bound is not None and (not descriptor or a.axis is None) for a in accesses):
            return False
        axes = [a.axis for a in accesses if a.kind is AccessKind.AXIS]
        kept = [a for a in node.shape if a is not UNIT]
        return bool(axes) and len(set(map(id, axes))) == len(axes) and [id(a) for a in axes] == [id(a) for a in kept]

    def base(self) -> str:
        name = self.tensor.name
        return f"({name} + {' + '.join(self.base_terms)})" if self.base_terms else name

    def _descriptor_dims(self, node: Node) -> list[_DescriptorDim]:
        """Every dim of the tensor as a descriptor dim (a scalar-indexed one is a box of 1 at that
        index, so `q[b, tile, :]` needs no per-program base pointer), the unit-stride dim last:
        TMA's rows are contiguous, so a transposed operand (`k.transpose(1, 2)[b, :, tile]`) is
        loaded in storage order and permuted in registers."""
        tensor, dims = self.tensor, []
        kept = 0
        for dim, access in enumerate(node.params["accesses"]):
            if access.kind is AccessKind.SCALAR:
                dims.append(_DescriptorDim(access.scalar, tensor.sizes[dim], tensor.strides[dim], 1, None))
            else:
                size = access.bound if access.bound is not None else tensor.sizes[dim]
                exact = access.axis.end if access.axis.needs_mask and access.bound is None else None
                dims.append(_DescriptorDim(self.offsets[kept], size, self.strides[kept], self.blocks[kept], kept,
                                           access.axis if access.axis.needs_mask else None, exact))
                kept += 1
        unit = [d for d in dims if _is_one(d.stride)]
        return [d for d in dims if d is not unit[0]] + unit[:1] if unit else dims

    def descriptor_ok(self, element_size: int, parameters: set[str]) -> bool:
        """TMA's rules: 2-5 dims, unit last stride, 16-byte strides and rows, boxes <= 256,
        and bounds that are kernel arguments (descriptors are built once per program)."""
        # a tile's end the descriptor can hold (a kernel argument) bounds its box exactly; another
        # (`tile.end` of an inner tile) bounds it by the tensor, and the load masks the rest
        self.dims = dims = [dataclasses.replace(d, bound=d.exact, masked_axis=None)
                            if d.exact is not None and _symbols(d.exact) <= parameters else d for d in self.dims]
        if not 2 <= len(dims) <= 5 or not _is_one(dims[-1].stride):
            return False
        if dims[-1].block * element_size < 16 or max(d.block for d in dims) > _TMA_MAX_BOX:
            return False
        for dim in dims[:-1]:
            if isinstance(dim.stride, (int, sympy.Integer)) and (int(dim.stride) * element_size) % 16:
                return False
        return all(_symbols(d.bound) | _symbols(d.stride) <= parameters for d in dims)

    def masked_axes(self) -> list[Axis]:
        """Axes a descriptor load bounds by the tensor only: their lanes past the tile's end are masked after."""
        return [d.masked_axis for d in self.dims if d.masked_axis is not None]

    def symbolic_leading_strides(self) -> list[sympy.Expr]:
        """Leading strides known only at run time: a variant must guard their 16-byte alignment."""
        return [d.stride for d in self.dims[:-1] if not isinstance(d.stride, (int, sympy.Integer))]

    def descriptor_permutation(self) -> tuple[int, ...] | None:
        """How to permute the loaded box's kept dims back into the access's order (None: as is)."""
        order = [d.kept for d in self.dims if d.kept is not None]
        if order == sorted(order):
            return None
        return tuple(order.index(position) for position in range(len(order)))

    def descriptor_box(self) -> list[int]:
        """The kept dims of the descriptor's box, in descriptor order."""
        return [d.block for d in self.dims if d.kept is not None]

    def block_pointer(self) -> str:
        # fastest-varying dim first: the one with unit stride (a transposed operand's is not the last)
        unit = [d for d, stride in enumerate(self.strides) if sympy.sympify(stride) == 1][:1]
        order = _items(unit + [d for d in reversed(range(len(self.blocks))) if d not in unit])
        return (f"tl.make_block_ptr({self.base()}, shape=({_items(self.bounds)}), strides=({_items(self.strides)}), "
                f"offsets=({_items(self.offsets)}), block_shape=({_items(self.blocks)}), order=({order}))")

    def descriptor(self) -> str:
        dims = self.dims
        return (f"tl.make_tensor_descriptor({self.tensor.name}, shape=[{_items([d.bound for d in dims], tuple_=False)}], "
                f"strides=[{_items([d.stride for d in dims], tuple_=False)}], "
                f"block_shape=[{', '.join(str(d.block) for d in dims)}])")

    def descriptor_offsets(self) -> str:
        return "[" + ", ".join(print_expr(d.offset) for d in self.dims) + "]"

    @property
    def bounded(self) -> bool:
        """Whether an access bound (not the axis's end) limits a dim: a block pointer cannot say it."""
        return any(a.bound is not None for a in self.accesses)

    def boundary_check(self) -> str:
        return "(" + _items(self.checked) + ")"


@dataclasses.dataclass(frozen=True)
class _DescriptorDim:
    """One dim of a TMA descriptor: the box's offset, the bound past which it reads zeros, the
    stride, the box size, and the dim's position among the access's kept dims (None: scalar)."""

    offset: Any
    bound: Any
    stride: Any
    block: int
    kept: int | None
    masked_axis: Axis | None = None  # a tile whose end the box does not bound
    exact: Any = None                # that tile's end, if the descriptor can take it instead


def _symbols(expr: Any) -> set[str]:
    return {s.name for s in sympy.sympify(expr).free_symbols}


def _is_one(value: Any) -> bool:
    return isinstance(value, (int, sympy.Integer)) and int(value) == 1


def _items(values: list[Any], tuple_: bool = True) -> str:
    """Comma-separated values, with the trailing comma a one-element Python tuple needs."""
    text = ", ".join(print_expr(v) if not isinstance(v, int) else str(v) for v in values)
    return text + ("," if tuple_ and len(values) == 1 else "")


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
