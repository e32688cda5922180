"""`str(kernel_ir)`: the IR as deterministic text, one node per line.

    kernel add_kernel(out, x, y, x_size0)
      grid: (0, x_size0, step 64)
      axis t0: launch [offset_0 + 64) < x_size0, masked
      v0: f32[t0] = load() tensor=x accesses=(t0)
      v1: f32[t0] = elementwise(v0, 1.0) fn=add compute=f32
      v2: none[t0] = store(v1, None) tensor=out accesses=(t0)

Names come from the trace (`v<n>`, axes `t<n>` / `r<n>`), params print in a fixed order, so
two traces of the same kernel print the same text; tests compare it literally.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from tessera.ir.graph import (AccessKind, Axis, Block, DimAccess, KernelIR, LoopDim, Node, TensorRef, short_dtype,
                              short_type)


def format_kernel(ir: KernelIR) -> str:
    lines = [f"kernel {ir.name}({', '.join(ir.parameters)})"]
    for dim in ir.grid:
        lines.append(f"  grid: ({_value(dim.begin)}, {_value(dim.end)}, step {dim.step})")
    for axis in (*ir.launch_axes, *ir.whole_axes):
        lines.append(f"  axis {format_axis(axis)}")
    for condition, reason in ir.guards:
        lines.append(f"  guard: {condition}  # {reason}")
    if ir.int64_indexing:
        lines.append("  int64 indexing")
    if ir.row_loop is not None:
        lines.append(f"  row loop: {ir.row_loop.axis.name} in chunks of {ir.row_loop.axis.block}"
                     f"{'' if ir.row_loop.requested else ' (long row)'}")
    lines.extend(format_block(ir.body))
    if ir.row_schedule is not None:
        lines.append("  row schedule:")
        for item in ir.row_schedule:
            if isinstance(item, Node):
                lines.append(f"    {item.name}")
            else:
                reduced = f" -> {', '.join(r.name for r in item.reductions)}" if item.reductions else ""
                lines.append(f"    pass {item.index}: {', '.join(n.name for n in item.nodes)}{reduced}")
    return "\n".join(lines)


def format_axis(axis: Axis) -> str:
    """`t0: launch [offset_0 + 64) < n, masked`."""
    mask = ", masked" if axis.needs_mask else ""
    return f"{axis.name}: {axis.kind.value} [{_value(axis.begin)} + {axis.block}) < {_value(axis.end)}{mask}"


def format_block(block: Block, indent: str = "  ") -> list[str]:
    """One line per node: `name: type = op(inputs) param=value ...`; loop bodies indented."""
    lines = []
    for node in block.nodes:
        inputs = ", ".join(_value(i) for i in node.inputs)
        params = " ".join(f"{key}={_value(value)}" for key, value in node.params.items())
        lines.append(f"{indent}{node.name}: {short_type(node.dtype, node.shape)} = {node.op.value}({inputs})"
                     + (f" {params}" if params else ""))
        for inner in node.blocks:
            lines.extend(format_block(inner, indent + "  "))
    return lines


def _value(value: Any) -> str:
    if isinstance(value, (Node, Axis, TensorRef)):
        return value.name
    if isinstance(value, torch.dtype):
        return short_dtype(value)
    if isinstance(value, DimAccess):
        if value.kind is AccessKind.AXIS:
            text = value.axis.name if value.axis is not None else "?"
        elif value.kind is AccessKind.SCALAR:
            text = _value(value.scalar)
        else:
            text = f"gather {_value(value.value)}"
        return text + (f" < {_value(value.bound)}" if value.bound is not None else "")
    if isinstance(value, LoopDim):
        tile = f" -> {value.axis.name}" if value.axis is not None else ""
        return f"{value.variable} in range({_value(value.begin)}, {_value(value.end)}, {value.step}){tile}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_value(v) for v in value) + ")"
    if isinstance(value, sympy.Basic):
        return str(value)
    return repr(value) if isinstance(value, str) else str(value)
