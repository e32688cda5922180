"""Drop the launch tiles of one lane from every value: `[tile_b, tile_m, d]` becomes `[tile_m, d]`.

Helion's attention (and many batched kernels) tiles the batch with a block of 1 and keeps that
dim in every value: `q[tile_b, tile_m, :]` is `[1, 128, d]`, `torch.bmm` a batch of one product.
Carried into the generated code, each product is reshaped to 2-D for `tl.dot` and back to 3-D,
every reduction runs over dim 2 of a 3-D block, and Triton 3.6 asserts on some of the reshapes
(`LinearLayout::reshapeOuts` in its layout-conversion pass, head dim 128). The tile's one index
is the program's offset, so the dim carries nothing: this pass removes the axis from every shape,
indexes tensors at the offset as a scalar (known inside: the grid stops at the extent), and
renumbers the dims that reductions, scans and permutes name. The code is then the 2-D form's.

The pass applies only where it is plainly exact; otherwise the IR is returned unchanged (the
3-D code is still correct): no row loop, and every node that holds the axis is one this module
knows (elementwise, casts, fills, loads and stores through the tile, products over other axes,
reductions, scans and permutes over other dims, views and broadcasts), none reduced to 0-d.

The Triton backend runs it on the IR it lowers (Pallas keeps the unit dims: its blocks squeeze
them by themselves).

>>> drop_unit_launch_tiles(ir)   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

from tessera.ir.graph import (UNIT, AccessKind, Axis, AxisKind, DimAccess, KernelIR, Node, Op, Rebuilder, freeze_params,
                              walk)

# ops whose params name no dim by position: dropping the axis from the shapes is all they need
_SHAPE_ONLY = frozenset({Op.ELEMENTWISE, Op.CAST, Op.FULL, Op.VIEW, Op.BROADCAST, Op.LOOP, Op.CARRIED, Op.DOT})
_RENUMBERED = frozenset({Op.REDUCE, Op.SCAN, Op.PERMUTE})
# ops that broadcast their inputs against their own shape (right-aligned, unit dims stretch)
_BROADCASTING = frozenset({Op.ELEMENTWISE, Op.CAST, Op.BROADCAST, Op.LOAD, Op.STORE})


class _Kept(Exception):
    """A node this pass does not rewrite holds the axis: keep the IR as it is."""


def drop_unit_launch_tiles(ir: KernelIR) -> KernelIR:
    """`ir` with its one-lane launch tiles removed from every value's shape (see the module doc)."""
    units = frozenset(axis for axis in ir.launch_axes if axis.kind is AxisKind.LAUNCH and axis.block == 1
                      and not axis.needs_mask)
    if not units or ir.row_loop is not None:
        return ir
    if not any(axis in units for node in walk(ir.body) for axis in node.shape):
        return ir
    try:
        return ir.replace(body=_Dropping(units).block(ir.body))
    except _Kept:
        return ir


class _Dropping(Rebuilder):
    """The rebuild: each node as `Rebuilder` rebuilds it, then without the unit axes (squeezing
    views of its inputs placed before it)."""

    def __init__(self, units: frozenset[Axis]) -> None:
        super().__init__({})
        self.units = units

    def _broadcast_inputs(self, original: Node, rebuilt: Node) -> tuple[Any, ...]:
        """The inputs of a node that broadcasts them against its shape: an input with a unit dim
        where the node holds a dropped tile (`idx[None, None, :]` beside `[tile_b, tile_m, n]`)
        is read through a view without that dim, so the ranks still line up."""
        dropped = {position for position, axis in enumerate(original.shape) if axis in self.units}
        inputs = list(rebuilt.inputs)
        for index, value in enumerate(original.inputs):
            if not isinstance(value, Node):
                continue
            lead = len(original.shape) - len(value.shape)
            units = {j for j, axis in enumerate(value.shape) if axis is UNIT and j + lead in dropped}
            if not units:
                continue
            source = inputs[index]
            kept = tuple(axis for j, axis in enumerate(value.shape) if j not in units and axis not in self.units)
            view = Node(Op.VIEW, (source,), kept, source.dtype, freeze_params({"what": "index"}),
                        location=value.location, name=f"{value.name}_{original.name}_squeezed")
            self.place_before(view)
            inputs[index] = view
        return tuple(inputs)

    def finish(self, original: Node, rebuilt: Node) -> Node:
        """`rebuilt` without the unit axes (`original`: the node before the rebuild)."""
        sources = [value for value in original.inputs if isinstance(value, Node)]
        held = any(axis in self.units for value in (original, *sources) for axis in value.shape)
        if not held and not _accesses_units(original, self.units):
            return rebuilt
        shape = tuple(axis for axis in rebuilt.shape if axis not in self.units)
        if original.shape and not shape:
            raise _Kept  # a one-lane value would become 0-d
        params = dict(rebuilt.params)
        if original.op in _BROADCASTING:
            rebuilt = dataclasses.replace(rebuilt, inputs=self._broadcast_inputs(original, rebuilt))
        if original.op in (Op.LOAD, Op.STORE):
            if any(access.kind is AccessKind.VALUE for access in original.params["accesses"]):
                raise _Kept  # a gather's index placement follows the shapes: not renumbered here
            params["accesses"] = tuple(self._access(access) for access in rebuilt.params["accesses"])
        elif original.op in _RENUMBERED:
            params.update(self._renumbered(original, sources[0].shape))
        elif original.op not in _SHAPE_ONLY:
            raise _Kept
        if original.op is Op.DOT and any(axis in self.units for value in (original, *sources)
                                         for axis in (*value.shape[-2:], original.params["k_axis"])):
            raise _Kept  # only a batch dim of a product may go: its M, N and K dims stay 2-D
        return dataclasses.replace(rebuilt, shape=shape, params=types.MappingProxyType(params))

    def _access(self, access: DimAccess) -> DimAccess:
        if access.kind is not AccessKind.AXIS or access.axis not in self.units:
            return access
        if access.bound is not None or access.check_negative:
            raise _Kept
        # the grid's programs stop below the extent, which the trace checked against the size
        return DimAccess(AccessKind.SCALAR, scalar=access.axis.begin, inside=True)

    def _renumbered(self, node: Node, source: tuple[Axis, ...]) -> dict[str, Any]:
        """REDUCE/SCAN `dim` and PERMUTE `order` over `source` with the unit axes taken out."""
        gone = [position for position, axis in enumerate(source) if axis in self.units]
        if node.op is Op.PERMUTE:
            order = [d - sum(g < d for g in gone) for d in node.params["order"] if d not in gone]
            return {"order": tuple(order)}
        dim = node.params["dim"]
        if node.params.get("axis") in self.units or dim in gone:
            raise _Kept  # a reduction or scan over the unit tile itself
        return {"dim": dim - sum(g < dim for g in gone)}


def _accesses_units(node: Node, units: frozenset[Axis]) -> bool:
    return any(isinstance(access, DimAccess) and access.axis in units for access in node.params.get("accesses", ()))
