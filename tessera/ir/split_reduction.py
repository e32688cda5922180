"""Which launches may split their K loop over several programs per output tile (`split_k`).

A GEMM whose output grid is a fraction of a wave (M of 1-128 against N of 4096) leaves most SMs
idle however its blocks are shaped: each program walks all of a deep K alone. Splitting K gives
each output tile S programs; program s reduces a contiguous slice of the K loop's iterations into
a partial accumulator, and once all S have written theirs, one program adds the S partials in a
fixed order (s = 0, 1, ..., S - 1: the result does not depend on which program finished last) and
runs the code after the loop. That is the same computation only when:

- the launch body is straight-line code around exactly one LOOP node, over one dim with a tile
  axis, whose bounds are host values (not loaded from memory: a data-dependent K);
- each value the loop carries is float32 (partials are summed in float32), enters as zeros (a slice's partial starts from the identity of +)
  and is updated once per iteration as a sum of products: `acc = dot(a, b, acc)` or
  `acc = acc + dot(a, b)`, and read nowhere else in the loop;
- nothing in the loop or before it stores, prints or runs user code (only the last program runs
  the code after the loop, so the stores must all come after it), and no store anywhere is atomic;
- the code after the loop is elementwise work, loads, layout changes and plain stores: no further
  loop, reduction, scan, sort, random numbers or user code.

>>> split_reduction(ir)               # doctest: +SKIP
SplitReduction(loop=<loop node v2>, accumulators=(v1,))
"""
from __future__ import annotations

import dataclasses

import torch

from tessera.ir.graph import KernelIR, Node, Op, walk

# ops the code after the loop may hold: it runs once per output tile, in the last program only
_EPILOGUE_OPS = frozenset({Op.ELEMENTWISE, Op.CAST, Op.SYMBOLIC, Op.FULL, Op.ARANGE, Op.TILE_INDEX, Op.LOAD,
                           Op.STORE, Op.VIEW, Op.PERMUTE, Op.RESHAPE, Op.BROADCAST, Op.JOIN, Op.SPLIT, Op.CAT,
                           Op.ITEM})
# ops the code before the loop and the loop body may hold: run by every one of the S programs
_SLICE_OPS = frozenset({Op.ELEMENTWISE, Op.CAST, Op.SYMBOLIC, Op.FULL, Op.ARANGE, Op.TILE_INDEX, Op.LOAD,
                        Op.DOT, Op.DEQUANTIZE, Op.VIEW, Op.PERMUTE, Op.RESHAPE, Op.BROADCAST, Op.JOIN,
                        Op.SPLIT, Op.CAT, Op.ITEM})


@dataclasses.dataclass(frozen=True)
class SplitReduction:
    """The launch's K loop and the values it accumulates (its CARRIED placeholders, which the
    code after the loop reads as the loop's results)."""

    loop: Node
    accumulators: tuple[Node, ...]


def split_reduction(ir: KernelIR) -> SplitReduction | None:
    """The launch's K loop if its iterations may be dealt out in contiguous slices to several
    programs per output tile (see the module docstring), else None."""
    if ir.row_loop is not None or ir.row_schedule is not None or ir.random_seeds:
        return None
    nodes = ir.body.nodes
    loops = [position for position, node in enumerate(nodes) if node.op is Op.LOOP]
    if len(loops) != 1:
        return None
    loop = nodes[loops[0]]
    before, after = nodes[:loops[0]], nodes[loops[0] + 1:]
    if not _plain_loop(loop, set(ir.parameters)):
        return None
    body = list(walk(loop.blocks[0]))
    if any(node.op not in _SLICE_OPS for node in (*before, *body)):
        return None
    if any(node.op not in _EPILOGUE_OPS or (node.op is Op.STORE and node.params.get("atomic"))
           for node in after):
        return None
    placeholders = tuple(loop.params["carried"])
    for entry, placeholder, output in zip(loop.inputs, placeholders, loop.params["outputs"]):
        if placeholder.dtype != torch.float32 or not (_zeros(entry) and _sum_of_products(placeholder, output, body)):
            return None
    return SplitReduction(loop, placeholders)


def _plain_loop(loop: Node, host_names: set[str]) -> bool:
    """One tile dim whose bounds are host values, carrying at least one value."""
    dims = loop.params["loops"]
    if len(dims) != 1 or dims[0].axis is None or not loop.params["carried"]:
        return False
    symbols = {str(s) for bound in (dims[0].begin, dims[0].end) for s in getattr(bound, "free_symbols", ())}
    return symbols <= host_names


def _zeros(entry: object) -> bool:
    if not isinstance(entry, Node) or entry.op is not Op.FULL:
        return False
    fill = entry.inputs[0] if entry.inputs else None
    return not isinstance(fill, Node) and fill is not None and not isinstance(fill, bool) and fill == 0


def _sum_of_products(placeholder: Node, output: Node, body: list[Node]) -> bool:
    """`output` is `dot(a, b, placeholder)` or `placeholder + dot(a, b)`, and it is the
    placeholder's only use in the loop."""
    users = [node for node in body if any(value is placeholder for value in node.inputs)]
    if users != [output]:
        return False
    if output.op is Op.DOT:
        return output.inputs[2] is placeholder and all(value is not placeholder for value in output.inputs[:2])
    if output.op is Op.ELEMENTWISE and output.params.get("fn") == "add" and len(output.inputs) == 2:
        other = output.inputs[1] if output.inputs[0] is placeholder else output.inputs[0]
        return (isinstance(other, Node) and other is not placeholder and other.op is Op.DOT
                and other.inputs[2] is None and other.dtype == placeholder.dtype)
    return False


__all__ = ["SplitReduction", "split_reduction"]
