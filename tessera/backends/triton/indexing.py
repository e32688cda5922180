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

from typing import Any

import sympy
import torch

from tessera.backends.triton.printer import print_expr
from tessera.ir.graph import UNIT, AccessKind, Node

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
            self.bounds.append(axis.end if axis.needs_mask else tensor.sizes[dim])
            self.strides.append(stride)
            self.blocks.append(axis.block)
        self.kept_shape = [a for a in node.shape if a is not UNIT]

    @staticmethod
    def possible(node: Node) -> bool:
        accesses = node.params["accesses"]
        if node.params.get("atomic") or node.inputs[-1] is not None:  # extra_mask
            return False
        if any(a.kind is AccessKind.VALUE or a.bound is not None or a.check_negative for a in accesses):
            return False
        axes = [a.axis for a in accesses if a.kind is AccessKind.AXIS]
        kept = [a for a in node.shape if a is not UNIT]
        return bool(axes) and len(set(map(id, axes))) == len(axes) and [id(a) for a in axes] == [id(a) for a in kept]

    def base(self) -> str:
        name = self.tensor.name
        return f"({name} + {' + '.join(self.base_terms)})" if self.base_terms else name

    def descriptor_ok(self, element_size: int, parameters: set[str]) -> bool:
        """TMA's rules: 2-5 dims, unit last stride, 16-byte strides and rows, boxes <= 256,
        and bounds that are kernel arguments (descriptors are built once per program)."""
        if not 2 <= len(self.blocks) <= 5 or self.base_terms:
            return False
        if not (isinstance(self.strides[-1], (int, sympy.Integer)) and int(self.strides[-1]) == 1):
            return False
        if self.blocks[-1] * element_size < 16 or max(self.blocks) > _TMA_MAX_BOX:
            return False
        for stride in self.strides[:-1]:
            if isinstance(stride, (int, sympy.Integer)) and (int(stride) * element_size) % 16:
                return False
        symbols = set().union(*(sympy.sympify(b).free_symbols for b in self.bounds + self.strides))
        return all(s.name in parameters for s in symbols)

    def symbolic_leading_strides(self) -> list[sympy.Expr]:
        """Leading strides known only at run time: a variant must guard their 16-byte alignment."""
        return [stride for stride in self.strides[:-1] if not isinstance(stride, (int, sympy.Integer))]

    def block_pointer(self) -> str:
        # fastest-varying dim first: the one with unit stride (a transposed operand's is not the last)
        unit = [d for d, stride in enumerate(self.strides) if sympy.sympify(stride) == 1][:1]
        order = _items(unit + [d for d in reversed(range(len(self.blocks))) if d not in unit])
        return (f"tl.make_block_ptr({self.base()}, shape=({_items(self.bounds)}), strides=({_items(self.strides)}), "
                f"offsets=({_items(self.offsets)}), block_shape=({_items(self.blocks)}), order=({order}))")

    def descriptor(self) -> str:
        return (f"tl.make_tensor_descriptor({self.base()}, shape=[{_items(self.bounds, tuple_=False)}], "
                f"strides=[{_items(self.strides, tuple_=False)}], block_shape=[{', '.join(map(str, self.blocks))}])")

    def descriptor_offsets(self) -> str:
        return "[" + ", ".join(print_expr(o) for o in self.offsets) + "]"

    def boundary_check(self) -> str:
        return "(" + _items(self.checked) + ")"


def _items(values: list[Any], tuple_: bool = True) -> str:
    """Comma-separated values, with the trailing comma a one-element Python tuple needs."""
    text = ", ".join(print_expr(v) if not isinstance(v, int) else str(v) for v in values)
    return text + ("," if tuple_ and len(values) == 1 else "")


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
