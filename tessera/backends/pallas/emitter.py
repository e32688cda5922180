"""The Pallas emitter: what every lowering rule writes through.

Conventions of the generated code: node `v7` is variable `v7`; axis `t0` has index vector
`idx_t0` and mask `mask_t0`; dtypes print as `jnp.float32`. Every tensor argument is one flat
`(1, span)` ref over its storage (`x_ref`, and `x_out` when the kernel writes it), so a load or
store addresses elements by `sum(index * stride)` exactly as the IR describes them (see
codegen.py for why whole-array refs rather than BlockSpecs). In the blocked form (blocks.py,
`self.blocks` set) a tensor ref holds blocks of the tensor in its own shape instead, indexed with
`:`, `pl.ds(start, block)` and int32 scalars (`blocked_access`), and integer values are int32.
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.backends.pallas.blocks import BLOCK, SQUEEZE, BlockPlan
from tessera.backends.pallas.printer import print_expr
from tessera.backends.source_text import EmitterBase, gather_expanders, provably_inside
from tessera.config import Config
from tessera.ir.graph import AccessKind, Axis, KernelIR, Node, Op, walk

JAX_DTYPES = {
    torch.float32: "jnp.float32", torch.float16: "jnp.float16", torch.bfloat16: "jnp.bfloat16",
    torch.float64: "jnp.float64", torch.int32: "jnp.int32", torch.int64: "jnp.int64", torch.int16: "jnp.int16",
    torch.int8: "jnp.int8", torch.uint8: "jnp.uint8", torch.bool: "jnp.bool_",
}


def written_tensors(ir: KernelIR) -> tuple[str, ...]:
    """Names of the tensor parameters the kernel stores into, in parameter order."""
    stored = {node.params["tensor"].name for node in walk(ir.body) if node.op is Op.STORE}
    return tuple(name for name in ir.parameters if name in stored)


class Emitter(EmitterBase):
    """Writes the body of one Pallas kernel."""

    def __init__(self, ir: KernelIR, config: Config, blocks: BlockPlan | None = None) -> None:
        self.ir = ir
        self.blocks = blocks
        self.config = config
        self.written = set(written_tensors(ir))
        self.lines: list[str] = []
        self.indent = 1
        self.last_comment: str | None = None
        self.locations: dict[int, Any] = {}  # body line index -> kernel SourceLocation
        self.loops = 0

    # -- names and casts ------------------------------------------------------------------------
    def operand(self, value: Any, dtype: torch.dtype | None) -> str:
        """A node's variable (cast to `dtype`), or a constant / host expression as a `dtype` scalar."""
        if isinstance(value, Node):
            return self.cast(value.name, value.dtype, dtype)
        text = print_expr(value)
        if dtype is None:
            return f"({text})"
        return f"jnp.asarray({text}).astype({self.dtype(dtype)})"

    def dtype(self, dtype: torch.dtype) -> str:
        if dtype not in JAX_DTYPES:
            raise exc.DtypeError(f"the Pallas backend has no {dtype} type")
        if self.blocks is not None and dtype == torch.int64:
            return "jnp.int32"  # indices and counts (int64 tensors and sums have no blocked form)
        return JAX_DTYPES[dtype]

    def cast(self, text: str, source: torch.dtype | None, target: torch.dtype | None) -> str:
        if target is None or source == target:
            return text
        if target == torch.bool:
            return f"({text} != 0)"
        return f"{text}.astype({self.dtype(target)})"

    # -- axes -----------------------------------------------------------------------------------
    def define_axis(self, axis: Axis) -> None:
        iota = f"lax.broadcasted_iota(jnp.int32, ({axis.block},), 0)" if self.blocks else f"jnp.arange({axis.block})"
        self.line(f"idx_{axis.name} = {print_expr(axis.begin)} + {iota}")
        if axis.needs_mask:
            self.line(f"mask_{axis.name} = idx_{axis.name} < {print_expr(axis.end)}")

    @staticmethod
    def block_shape(shape: tuple[Axis, ...]) -> str:
        return f"({axis_blocks[0]},)" if len(axis_blocks := [axis.block for axis in shape]) == 1 else "(" + ", ".join(map(str, axis_blocks)) + ")"

    # -- memory ----------------------------------------------------------------------------------
    def ref_of(self, node: Node) -> str:
        """The ref a load reads or a store writes: the output ref of a tensor the kernel writes
        (its input ref holds the values before the call only)."""
        name = node.params["tensor"].name
        return f"{name}_out" if name in self.written else f"{name}_ref"

    def address(self, node: Node) -> tuple[str, list[str]]:
        """(flat offsets, mask terms) of a load or store: out-of-range scalar and gathered indices
        are masked off (read 0, not written), as in every other mode."""
        tensor = node.params["tensor"]
        shape = node.shape
        terms: list[str] = []
        masks = self.shape_mask(shape)
        expanders = gather_expanders(node)
        for dim, access in enumerate(node.params["accesses"]):
            stride = print_expr(tensor.strides[dim])
            size = print_expr(tensor.sizes[dim])
            if access.kind is AccessKind.AXIS:
                index = self.axis_index(access.axis, shape)
                if access.bound is not None:
                    masks.append(f"({index} < {print_expr(access.bound)})")
                if access.check_negative:
                    masks.append(f"({index} >= 0)")
            elif access.kind is AccessKind.SCALAR:
                index = f"({print_expr(access.scalar)})"
                if access.check_negative:
                    index = f"jnp.where({index} < 0, {index} + {size}, {index})"
                if not (access.inside or provably_inside(access.scalar, tensor.sizes[dim])):
                    masks.append(f"(({index} >= 0) & ({index} < {size}))")
            else:
                value = access.value
                index = value.name
                if value.dtype not in (torch.uint8, torch.bool):  # negative values count from the end, as in torch
                    index = f"jnp.where({index} < 0, {index} + {size}, {index})"
                index += expanders[dim]
                masks.append(f"(({index} >= 0) & ({index} < {size}))")
            terms.append(index if stride == "1" else f"{index} * {stride}")
        offset = " + ".join(terms) if terms else "0"
        if tensor.is_view:
            if tensor.offset != 0:
                offset = f"({print_expr(tensor.offset)}) + {offset}"
            for limit in tensor.limits:
                masks.append(f"(({offset}) < ({print_expr(limit)}))")
            for position, size in tensor.conditions:
                if not provably_inside(position, size):
                    masks.append(f"((({print_expr(position)}) >= 0) & (({print_expr(position)}) < ({print_expr(size)})))")
        return offset, masks


    def blocked_access(self, node: Node) -> tuple[str, list[str], str]:
        """(ref index, mask terms, arguments after the mask) of a load or store in the blocked form:
        the arguments are the permutation from the ref's dim order to the node's, the node's block
        shape, and the shape of the ref's block."""
        tensor = node.params["tensor"]
        plan = self.blocks.tensors[tensor.name]
        pieces = ["0"] if plan.rank == 1 else []   # the leading unit dim of a rank-1 tensor
        roles = plan.roles[len(pieces):]
        masks = self.shape_mask(node.shape)
        order: list[Axis] = []
        for dim, (access, role) in enumerate(zip(node.params["accesses"], roles)):
            size = print_expr(tensor.sizes[dim])
            if access.kind is AccessKind.AXIS:
                order.append(access.axis)
                pieces.append("slice(None)" if role == BLOCK else
                              f"pl.ds({print_expr(access.axis.begin)}, {access.axis.block})")
                if access.bound is not None:
                    masks.append(f"({self.axis_index(access.axis, node.shape)} < {print_expr(access.bound)})")
                continue
            index = f"({print_expr(access.scalar)})"
            if access.check_negative:
                index = f"jnp.where({index} < 0, {index} + {size}, {index})"
            if not (access.inside or provably_inside(access.scalar, tensor.sizes[dim])):
                masks.append(f"(({index} >= 0) & ({index} < {size}))")
                index = f"jnp.clip({index}, 0, {size} - 1)"  # read inside; the mask drops the value
            if role != SQUEEZE:
                pieces.append(index)
        permutation = tuple(order.index(axis) for axis in node.shape if not axis.is_unit)
        identity = permutation == tuple(range(len(order)))
        loaded = "(" + "".join(f"{axis.block}, " for axis in order).rstrip(" ") + ")"
        index = "(" + "".join(f"{piece}, " for piece in pieces).rstrip(" ") + ")" if pieces else "Ellipsis"
        return index, masks, f"{None if identity else permutation}, {self.block_shape(node.shape)}, {loaded}"


def join_masks(masks: list[str], extra: Node | None = None) -> str:
    """The `&` of the mask terms and an extra mask node (`True` when there is none)."""
    terms = masks + ([extra.name] if extra is not None else [])
    return " & ".join(terms) if terms else "True"
