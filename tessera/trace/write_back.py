"""Stores that write back what they read: `x[i] = torch.where(keep, new, x[i])`.

Helion users mask a store this way (its examples' `moe_matmul_ogs`): lanes that must not write
store the value they just read. When such lanes share an element with a lane that does write (a
padded gather index pointing at a real row), the program races on a GPU: which lane's value
lands is undefined, and eager mode refuses it. Writing back an unchanged value and not writing
at all differ only in that race, so such a store is traced as a store of `new` masked by `keep`
(`~keep` for `where(keep, x[i], new)`), which is what the user meant and what eager mode does
(language/eager_indexing.py). Only a read of the same tensor at the same accesses, unmasked (or
under the same device `if`),
with no store into that tensor since, takes part, and only where the where's result keeps the
tensor's dtype or widens a float exactly.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from tessera.ir.graph import Axis, Block, DimAccess, Node, Op, walk
from tessera.trace.proxy import TileValue

if TYPE_CHECKING:
    from tessera.trace.tracer import Tracer

_EXACT_WIDENING = {torch.float16: (torch.float32, torch.float64), torch.bfloat16: (torch.float32, torch.float64),
                   torch.float32: (torch.float64,)}


def written_lanes(tracer: Tracer, tensor_name: str, accesses: list[DimAccess], value: Any,
                  shape: tuple[Axis, ...]) -> tuple[Any, Node] | None:
    """(the value to store, the mask of lanes that write) when `value` writes back a read of
    `tensor_name` at `accesses` in its other lanes; else None (store `value` as it is)."""
    shape = tuple(tracer.canonical_axis(axis) for axis in shape)
    if not isinstance(value, TileValue) or tuple(tracer.canonical_axis(a) for a in value.axes) != shape:
        return None
    node = value.node
    if node.op is not Op.ELEMENTWISE or node.params.get("fn") != "where" or len(node.inputs) != 3:
        return None
    keep, taken, other = node.inputs
    if not isinstance(keep, Node) or len(keep.shape) != len(shape):
        return None
    accesses = [access if access.axis is None else dataclasses.replace(access, axis=tracer.canonical_axis(access.axis))
                for access in accesses]
    for kept, old, writes_where_kept in ((taken, other, True), (other, taken, False)):
        if isinstance(kept, Node) and kept.dtype == node.dtype \
                and _reads_back(tracer, old, tensor_name, accesses, node.dtype):
            mask = keep if writes_where_kept else tracer.emit(
                Op.ELEMENTWISE, [keep], keep.shape, torch.bool, fn="invert", compute=torch.bool).node
            return TileValue(kept), mask
    return None


def _reads_back(tracer: Tracer, old: Any, tensor_name: str, accesses: list[DimAccess], dtype: torch.dtype) -> bool:
    """Whether `old` is an unmasked load of `tensor_name` at `accesses` (or its exact widening
    to `dtype`), with no store into that tensor traced since."""
    if not isinstance(old, Node):
        return False
    load = old
    if load.op is Op.CAST and load.inputs and isinstance(load.inputs[0], Node):
        load = load.inputs[0]
    # unmasked, or masked by the device `if` the store is in too (Tracer._node gives it the same predicate)
    if load.op is not Op.LOAD or load.params["tensor"].name != tensor_name \
            or load.inputs[0] is not None and load.inputs[0] is not tracer.predicate:
        return False
    if load.dtype != dtype and dtype not in _EXACT_WIDENING.get(load.dtype, ()):
        return False
    if old is not load and old.dtype != dtype:
        return False
    theirs = load.params["accesses"]
    if len(theirs) != len(accesses) or not all(map(_same_access, theirs, accesses)):
        return False
    return _no_store_since(tracer, load, tensor_name)


def _same_access(first: DimAccess, second: DimAccess) -> bool:
    # DimAccess compares by identity; two traced accesses of one index are equal field by field
    return all(getattr(first, f.name) is getattr(second, f.name) or getattr(first, f.name) == getattr(second, f.name)
               for f in dataclasses.fields(DimAccess))


def _no_store_since(tracer: Tracer, load: Node, tensor_name: str) -> bool:
    """Whether `load` sits in a block still open and nothing traced after it stores into the tensor."""
    blocks = tracer.open_blocks()
    for depth, nodes in enumerate(blocks):
        position = next((i for i, node in enumerate(nodes) if node is load), None)
        if position is not None:
            later = nodes[position + 1:] + [node for deeper in blocks[depth + 1:] for node in deeper]
            return not any(inner.op is Op.STORE and inner.params["tensor"].name == tensor_name
                           for inner in walk(Block(tuple(later))))
    return False
