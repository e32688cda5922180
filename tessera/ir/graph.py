"""The tile IR: axes, nodes, blocks, and a deterministic text form.

A value's shape is a tuple of `Axis` objects, one per dimension. An axis is an iteration
dimension of the kernel: a tile of a loop (`tile_m`), a whole tensor dimension read with `:`, or
the unit axis of a size-1 dimension. Two dimensions broadcast together when they are the same
axis or one of them is the unit axis, PyTorch's rule with identity instead of equal ints.
Extents are sympy expressions over the kernel's symbols; blocks are the register sizes.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from tessera.location import SourceLocation


@dataclasses.dataclass(eq=False)
class Axis:
    """One iteration dimension: indices `begin + arange(block)`, valid where `< end`."""

    name: str
    begin: sympy.Expr          # first index (device expression, e.g. offset of the tile)
    end: sympy.Expr            # one past the last valid index
    block: int                 # register size (power of two)
    needs_mask: bool = True    # False when the block provably divides the extent

    def __repr__(self) -> str:
        return self.name

    @property
    def is_unit(self) -> bool:
        return self.block == 1 and self.name == "1"


UNIT = Axis("1", sympy.Integer(0), sympy.Integer(1), 1, needs_mask=False)


@dataclasses.dataclass(eq=False)
class Node:
    """One operation. `inputs` are Nodes or Python constants; `blocks` hold loop bodies."""

    op: str
    inputs: list[Any]
    shape: tuple[Axis, ...]
    dtype: torch.dtype | None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    location: SourceLocation | None = None
    name: str = ""
    blocks: list[Block] = dataclasses.field(default_factory=list)

    def __repr__(self) -> str:
        return self.name or f"<{self.op}>"


@dataclasses.dataclass(eq=False)
class Block:
    """A straight-line list of nodes (a kernel body or a loop body)."""

    nodes: list[Node] = dataclasses.field(default_factory=list)


_SHORT_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int32: "i32", torch.int64: "i64", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1",
}


def short_type(dtype: torch.dtype | None, shape: tuple[Axis, ...]) -> str:
    if dtype is None:
        return "none"
    dims = ", ".join(axis.name for axis in shape)
    return f"{_SHORT_DTYPES.get(dtype, str(dtype))}[{dims}]"


def format_block(block: Block, indent: str = "  ") -> list[str]:
    """The IR as text, one node per line: `name: type = op(inputs) {params}`."""
    lines = []
    for node in block.nodes:
        inputs = ", ".join(repr(i) if isinstance(i, Node) else _format_constant(i) for i in node.inputs)
        params = {k: v for k, v in node.params.items() if not k.startswith("_")}
        extra = f" {params}" if params else ""
        lines.append(f"{indent}{node.name}: {short_type(node.dtype, node.shape)} = {node.op}({inputs}){extra}")
        for inner in node.blocks:
            lines.extend(format_block(inner, indent + "  "))
    return lines


def _format_constant(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(repr(v) if isinstance(v, Node) else _format_constant(v) for v in value) + ")"
    return str(value)
