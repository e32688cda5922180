"""The blocked form of a Pallas kernel: which tensor dims BlockSpecs address, and what refuses it.

The flat form (codegen.py) reads every tensor as one `(1, span)` ref with computed offsets: it
runs everything the IR expresses, but Mosaic (the TPU compiler) lowers neither its gathers and
scatters nor its 64-bit index math. The blocked form passes each tensor in its own shape, padded
on the host to whole blocks, and addresses it the way a TPU kernel does:

    block     a dim tiled by a top-level tile loop (grid dim d, block b, tiles from 0): the
              BlockSpec's index map picks block `pid_d`; the kernel reads it with `:`
    squeeze   a leading dim indexed by the program id of a grid dim of step 1 (`x[b, ...]` with
              `b` a tile of size 1): a squeezed BlockSpec dim, absent from the kernel's ref
    whole     anything else: the ref holds the whole (padded) dim, read with `pl.ds(start, block)`
              for a tile and an int32 index for a scalar

A dim is `block` or `squeeze` only when every access of the tensor agrees, and `block` only where
the TPU layout rule allows it (the last two dims of a block: multiples of 8 x 128); the other
dims are `whole`; a tensor the kernel writes keeps BlockSpec dims only where their grid dims are
a prefix 0..j of the grid (each output block then comes in one run of grid steps, as TPU
pipelining needs). Masks are int32 iota compares; a masked store writes `where(mask, new, old)`.

`plan_blocks` says why a kernel has no blocked form (`Refusal`: a gather or scatter with loaded
indices, an atomic, a view made inside the kernel, a 64-bit tensor...), at the line that needs it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import sympy
import torch

from tessera.ir.graph import AccessKind, Axis, AxisKind, KernelIR, Node, Op, walk
from tessera.location import SourceLocation

SUBLANES, LANES = 8, 128
BLOCK, SQUEEZE, WHOLE = "block", "squeeze", "whole"
_SCALAR_DTYPES = {torch.int64: "int32", torch.int32: "int32", torch.float32: "float32", torch.bool: "int32"}
_NO_TPU_DTYPES = (torch.float64, torch.int64)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a kernel has no blocked form, and the kernel line that needs the flat one."""

    reason: str
    location: SourceLocation | None


@dataclasses.dataclass(frozen=True)
class TensorBlocks:
    """How one tensor argument is blocked: per dim its role, grid dim, block, padding multiple.

    `rank` is the tensor's own rank; a rank-1 tensor is passed as `(1, n)` (Mosaic has no rank-1
    blocks on a host without a TPU), so its dims here are two, the first a unit `whole` dim.
    """

    rank: int
    roles: tuple[str, ...]
    grid_dims: tuple[int | None, ...]
    blocks: tuple[int | None, ...]   # BLOCK dims: the block; others: None (the padded dim)
    multiples: tuple[int, ...]       # pad each dim to a multiple of this (at least one multiple)
    extras: tuple[int, ...]          # ... plus this many elements (tiles that start off a block boundary)
    # the tensor's sizes and strides where they are constants (else None): an argument must have
    # them, or the kernel addresses a view made inside it (checked at launch: the IR alone cannot
    # tell `x.view(5, 4)[tile]` of a static (4, 5) `x` from a (5, 4) argument)
    layout: tuple[tuple[int | None, ...], tuple[int | None, ...]] = ((), ())


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    tensors: dict[str, TensorBlocks]
    scalar_dtypes: dict[str, str]    # host symbol -> numpy dtype of its SMEM scalar


def plan_blocks(ir: KernelIR) -> BlockPlan | Refusal:
    """The blocked form of `ir`, or why it has none (module docstring)."""
    accesses: dict[str, list[Node]] = {}
    for node in walk(ir.body):
        refusal = _refuse_node(node)
        if refusal is not None:
            return refusal
        if node.op in (Op.LOAD, Op.STORE):
            accesses.setdefault(node.params["tensor"].name, []).append(node)
    scalar_dtypes = {}
    for symbol, dtype in ir.symbols.items():
        if dtype not in _SCALAR_DTYPES:
            return Refusal(f"the scalar argument {symbol} is {str(dtype).removeprefix('torch.')}: a TPU kernel's "
                           "scalars are 32-bit", ir.location)
        scalar_dtypes[str(symbol)] = _SCALAR_DTYPES[dtype]
    tensors = {}
    written = {node.params["tensor"].name for node in walk(ir.body) if node.op is Op.STORE}
    for name, nodes in accesses.items():
        tensors[name] = _plan_tensor(ir, nodes, name in written)
    return BlockPlan(tensors, scalar_dtypes)


def _refuse_node(node: Node) -> Refusal | None:
    if node.op is Op.REDUCE and node.params["fn"] == "sum" and node.params["accumulate"] == torch.int64:
        return Refusal("an integer sum accumulates in int64, and a TPU has no 64-bit vectors", node.location)
    if node.op is Op.CAST and node.dtype == torch.int64 and node.inputs[0].dtype.is_floating_point:
        return Refusal("a float -> int64 cast: a TPU has no 64-bit vectors", node.location)
    if node.op not in (Op.LOAD, Op.STORE):
        return None
    tensor = node.params["tensor"]
    if node.op is Op.STORE and node.params.get("atomic"):
        return Refusal(f"atomic_{node.params['atomic']} on {tensor.name}: an atomic has no blocked form "
                       "(programs may write the same element)", node.location)
    if tensor.dtype in _NO_TPU_DTYPES:
        return Refusal(f"{tensor.name} is {str(tensor.dtype).removeprefix('torch.')}: a TPU has no 64-bit vector "
                       "types", node.location)
    if tensor.is_view or not _argument_like(tensor):
        return Refusal(f"{tensor.name} is viewed inside the kernel (an offset, reshape or transpose of the "
                       "argument): a BlockSpec addresses the argument's own dims", node.location)
    if not tensor.sizes:
        return Refusal(f"{tensor.name} has no dims: a TPU block has at least one", node.location)
    for access in node.params["accesses"]:
        if access.kind is AccessKind.AXIS and access.check_negative:
            return Refusal(f"a tile of {tensor.name} here may begin below 0 (a loaded offset): a pl.ds slice "
                           "cannot start there", node.location)
        if access.kind is AccessKind.VALUE:
            verb = "gathers from" if node.op is Op.LOAD else "scatters into"
            return Refusal(f"this line {verb} {tensor.name} at indices loaded on the device: a BlockSpec or "
                           "pl.ds slice needs addresses computed from the program id and loop counters",
                           node.location)
    axes = [a.axis for a in node.params["accesses"] if a.kind is AccessKind.AXIS]
    if len(set(axes)) != len(axes) or set(axes) != set(node.shape) - {a for a in node.shape if a.is_unit}:
        return Refusal(f"the block of {tensor.name} here is not its tensor's dims in some order", node.location)
    return None


def _argument_like(tensor: Any) -> bool:
    """Sizes and strides are the argument's own (`x_size0`, `x_stride1` or constants), not a view's."""
    for kind, values in (("size", tensor.sizes), ("stride", tensor.strides)):
        for dim, value in enumerate(values):
            value = sympy.sympify(value)
            if not (value.is_Integer or (value.is_Symbol and str(value) == f"{tensor.name}_{kind}{dim}")):
                return False
    return True


def _grid_dim_of(ir: KernelIR, axis: Axis) -> int | None:
    """The grid dim whose program id gives `axis` its tiles from 0, or None."""
    if axis.kind is not AxisKind.LAUNCH:
        return None
    for dim, grid in enumerate(ir.grid):
        if str(axis.begin) == f"offset_{dim}" and grid.begin == 0 and grid.step == axis.block:
            return dim
    return None


def _role_of(ir: KernelIR, access: Any) -> tuple[str, int | None, int | None]:
    """What one access of one dim allows: (BLOCK, grid dim, block), (SQUEEZE, grid dim, None) or WHOLE."""
    if access.kind is AccessKind.AXIS and not access.check_negative:
        dim = _grid_dim_of(ir, access.axis)
        if dim is not None:
            return BLOCK, dim, access.axis.block
    if access.kind is AccessKind.SCALAR and not access.check_negative:
        for dim, grid in enumerate(ir.grid):
            if str(access.scalar) == f"offset_{dim}" and grid.begin == 0 and grid.step == 1:
                return SQUEEZE, dim, None
    return WHOLE, None, None


def _plan_tensor(ir: KernelIR, nodes: list[Node], written: bool) -> TensorBlocks:
    tensor = nodes[0].params["tensor"]
    rank = len(tensor.sizes)
    layout = tuple(tuple(int(v) if sympy.sympify(v).is_Integer else None for v in values)
                   for values in (tensor.sizes, tensor.strides))
    chosen = [_agreed_role(ir, nodes, dim, rank) for dim in range(rank)]
    used = {grid_dim for _, grid_dim, _ in chosen if grid_dim is not None}
    if written and used != set(range(len(used))):
        # A TPU writes an output block back when its index changes and never reads it again, so a
        # written tensor's blocks must each be visited in one run of grid steps: its index map may
        # use grid dims 0..j only (the grid runs in row-major order). Else it stays whole.
        chosen = [(WHOLE, None, None)] * rank
    roles, grid_dims, blocks, multiples, extras = [], [], [], [], []
    for dim, (role, grid_dim, block) in enumerate(chosen):
        if role != WHOLE:
            roles.append(role), grid_dims.append(grid_dim), blocks.append(block)
            multiples.append(block or 1), extras.append(0)
            continue
        roles.append(WHOLE), grid_dims.append(None), blocks.append(None)
        multiple, extra = _whole_padding([node.params["accesses"][dim] for node in nodes])
        multiples.append(multiple), extras.append(extra)
    if rank == 1:  # passed as (1, n)
        return TensorBlocks(1, (WHOLE, *roles), (None, *grid_dims), (None, *blocks), (1, *multiples), (0, *extras),
                            layout)
    return TensorBlocks(rank, tuple(roles), tuple(grid_dims), tuple(blocks), tuple(multiples), tuple(extras), layout)


def _agreed_role(ir: KernelIR, nodes: list[Node], dim: int, rank: int) -> tuple[str, int | None, int | None]:
    """The role every access of `dim` allows, where a TPU can hold that block; else WHOLE."""
    seen = {_role_of(ir, node.params["accesses"][dim]) for node in nodes}
    role, grid_dim, block = seen.pop() if len(seen) == 1 else (WHOLE, None, None)
    tpu_multiple = LANES if dim == rank - 1 else SUBLANES if dim == rank - 2 else 1
    if (role == BLOCK and block % tpu_multiple) or (role == SQUEEZE and dim >= rank - 2):
        return WHOLE, None, None  # a block a TPU cannot hold: the ref keeps the whole dim, sliced with pl.ds
    return role, grid_dim, block


def _whole_padding(accesses: list[Any]) -> tuple[int, int]:
    """(multiple, extra) padding a whole dim so every `pl.ds(start, block)` of a tile stays inside
    it: one more block where a tile loop may start off a block boundary."""
    multiple = 1
    for access in accesses:
        if access.kind is AccessKind.AXIS:
            multiple = math.lcm(multiple, access.axis.block)
    extra = any(access.kind is AccessKind.AXIS and not _starts_on_block(access.axis) for access in accesses)
    return multiple, multiple if extra else 0


def _starts_on_block(axis: Axis) -> bool:
    begin = sympy.sympify(axis.range_begin if axis.range_begin is not None else 0)
    return begin == 0 or bool(begin.is_Integer and int(begin) % axis.block == 0)


__all__ = ["BLOCK", "SQUEEZE", "WHOLE", "BlockPlan", "Refusal", "TensorBlocks", "plan_blocks"]
