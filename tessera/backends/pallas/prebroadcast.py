"""The pre-broadcast pass of the Pallas backend (Config key `pallas_pre_broadcast`, on by default).

On a TPU a per-row value (`m_i`, `l_i` of attention: one number per query row) broadcast against
a `[rows, head_dim]` tile costs a lane broadcast every time it is used. The pass keeps such values
*pre-broadcast*: every loop-carried value whose axes are all launch (row) axes gets a trailing
lane dim of `LANES` = 128 identical lanes, and so does everything computed elementwise from it.
Where a consumer needs another shape, a lane view is inserted (a `view` node, what='lanes'):

    widen     a per-row value gets its lanes                         [t1] -> [t1, lane128]
    fit       the lanes become the consumer's lane dim of width W:    W = 128 as is, W = 256, 384,
              512 tiled (then sliced when W is no multiple of 128), W = 64 sliced
    collapse  back to the original shape for any other consumer (a store, a reduction, a dot)

Because the lanes of a pre-broadcast value are equal by construction, a fit to any width is
exact: widths that are not multiples of 128 are tiled past W and sliced, never refused. Seed 002
(a Helion PR) is the bug this avoids: consumers *after* the loop (`acc / l_i[:, None]` with
head_dim 256, and indirect ones such as `rsqrt(running[:, :, None] + 1) * acc`) were not fitted.
Here every consumer, inside or after the loop, goes through the same rule.

>>> print(pre_broadcast(ir))   # doctest: +SKIP  (tests/test_pallas.py shows the IR before/after)
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

import sympy

from tessera.ir.graph import UNIT, AccessKind, Axis, AxisKind, Block, DimAccess, KernelIR, Node, Op

LANES = 128


def lane_axis(lanes: int = LANES) -> Axis:
    """The trailing dim of a pre-broadcast value: `lanes` identical lanes, never masked."""
    return Axis(f"lane{lanes}", AxisKind.WHOLE, sympy.Integer(0), sympy.Integer(lanes), lanes,
                needs_mask=False, range_end=sympy.Integer(lanes))


def pre_broadcast(ir: KernelIR, lanes: int = LANES) -> KernelIR:
    """`ir` with its loop-carried per-row values pre-broadcast to `lanes` lanes (module docstring);
    `ir` itself when it has none."""
    rewrite = _PreBroadcast(lane_axis(lanes))
    body = rewrite.block(ir.body)
    return ir.replace(body=body) if rewrite.changed else ir


def _per_row(node: Node) -> bool:
    """A carried value of launch axes only (one number per row of the launch tile)."""
    return (node.dtype is not None and node.dtype.is_floating_point and bool(node.shape)
            and all(axis.kind is AxisKind.LAUNCH for axis in node.shape))


class _PreBroadcast:
    def __init__(self, lane: Axis) -> None:
        self.lane = lane
        self.new: dict[Node, Node] = {}        # old node -> its rewritten node
        self.original: dict[Node, tuple[Axis, ...]] = {}  # pre-broadcast node -> the shape it stands for
        self.emitted: list[Node] = []
        self.count = 0
        self.changed = False

    # -- blocks and nodes -------------------------------------------------------------------------
    def block(self, block: Block) -> Block:
        outer, self.emitted = self.emitted, []
        for node in block.nodes:
            self.node(node)
        nodes, self.emitted = tuple(self.emitted), outer
        return Block(nodes)

    def node(self, node: Node) -> None:
        if node.op is Op.LOOP:
            self.loop(node)
            return
        if node.op in (Op.ELEMENTWISE, Op.CAST) and any(self.lanes_of(i) for i in node.inputs):
            self.emit(node, self.elementwise(node))
            return
        if node.op is Op.VIEW and node.inputs and self.lanes_of(node.inputs[0]):
            source = self.new[node.inputs[0]]
            if node.shape == (*self.original[source], UNIT):  # `l_i[:, None]`: the lanes play the unit dim
                self.new[node] = self.lane_view(source, self.widened(node.shape), "relabel", node.shape, node.name)
                return
        inputs = tuple(self.plain(i) for i in node.inputs)
        params = {key: self.plain_param(value) for key, value in node.params.items()}
        self.emit(node, dataclasses.replace(node, inputs=inputs, params=types.MappingProxyType(params)))

    def emit(self, old: Node, new: Node) -> None:
        self.new[old] = new
        self.emitted.append(new)

    def loop(self, node: Node) -> None:
        carried = node.params["carried"]
        chosen = [_per_row(c) for c in carried]
        entries = []
        for entry, widen in zip(node.inputs, chosen):
            value = self.plain(entry)
            entries.append(self.lane_view(value, self.widened(entry.shape), "widen", entry.shape) if widen else value)
        placeholders = []
        for placeholder, widen, entry in zip(carried, chosen, entries):
            if widen:
                self.changed = True
                rebuilt = dataclasses.replace(placeholder, inputs=(entry,), shape=self.widened(placeholder.shape))
                self.original[rebuilt] = placeholder.shape
            else:
                rebuilt = dataclasses.replace(placeholder, inputs=(entry,))
            self.new[placeholder] = rebuilt
            placeholders.append(rebuilt)
        outer, self.emitted = self.emitted, []
        for inner in node.blocks[0].nodes:
            self.node(inner)
        outputs = []
        for output, widen, placeholder in zip(node.params["outputs"], chosen, carried):
            value = self.new.get(output, output)
            if widen and self.original.get(value) != placeholder.shape:
                value = self.lane_view(self.plain(output), self.widened(placeholder.shape), "widen", placeholder.shape)
            elif not widen:
                value = self.plain(output)
            outputs.append(value)
        body, self.emitted = Block(tuple(self.emitted)), outer
        params = dict(node.params, carried=tuple(placeholders), outputs=tuple(outputs))
        self.emit(node, dataclasses.replace(node, inputs=tuple(entries), params=types.MappingProxyType(params),
                                            blocks=(body,)))

    # -- the three rules ----------------------------------------------------------------------------
    def elementwise(self, node: Node) -> Node:
        """Stay pre-broadcast (same shape as the pre-broadcast inputs), fit unit lanes to a wide
        consumer, or collapse."""
        shape = node.shape
        lane_inputs = [self.new[i] for i in node.inputs if self.lanes_of(i)]
        originals = [self.original[i] for i in lane_inputs]
        if shape and all(len(o) == len(shape) and o[-1] is shape[-1] for o in originals):
            inputs = tuple(self.beside_lanes(i, shape) for i in node.inputs)
            rebuilt = dataclasses.replace(node, inputs=inputs, shape=self.widened(shape))
            self.original[rebuilt] = shape
            return rebuilt
        if shape and shape[-1] is not UNIT and all(len(o) == len(shape) and o[-1] is UNIT for o in originals):
            def fitted(value: Any) -> Any:
                if not self.lanes_of(value):
                    return self.plain(value)
                source = self.new[value]
                target = (*self.original[source][:-1], shape[-1])
                return self.lane_view(source, target, "fit", target)
            return dataclasses.replace(node, inputs=tuple(fitted(i) for i in node.inputs))
        return dataclasses.replace(node, inputs=tuple(self.plain(i) for i in node.inputs))

    def beside_lanes(self, value: Any, shape: tuple[Axis, ...]) -> Any:
        """An operand of a pre-broadcast result: lanes as they are; a plain per-row operand of a
        row-shaped result gets a unit dim so it broadcasts over the lanes."""
        if self.lanes_of(value):
            return self.new[value]
        value = self.plain(value)
        if isinstance(value, Node) and value.shape and shape[-1] is not UNIT:
            return self.lane_view(value, (*value.shape, UNIT), "unit", value.shape)
        return value

    # -- helpers ------------------------------------------------------------------------------------
    def widened(self, shape: tuple[Axis, ...]) -> tuple[Axis, ...]:
        return (*shape[:-1], self.lane) if shape and shape[-1] is UNIT else (*shape, self.lane)

    def lanes_of(self, value: Any) -> bool:
        return isinstance(value, Node) and self.new.get(value) in self.original

    def plain(self, value: Any) -> Any:
        """`value` rewritten, collapsed to the shape it stands for when it is pre-broadcast."""
        if not isinstance(value, Node):
            return value
        new = self.new.get(value, value)
        if new in self.original:
            return self.lane_view(new, self.original[new], "collapse", self.original[new])
        return new

    def plain_param(self, value: Any) -> Any:
        if isinstance(value, Node):
            return self.plain(value)
        if isinstance(value, tuple):
            return tuple(self.plain_param(v) for v in value)
        if isinstance(value, DimAccess) and value.kind is AccessKind.VALUE:
            return dataclasses.replace(value, value=self.plain(value.value))
        return value

    def lane_view(self, source: Node, shape: tuple[Axis, ...], how: str, stands_for: tuple[Axis, ...],
                  name: str | None = None) -> Node:
        """A view node (what='lanes') inserted before the consumer being rewritten."""
        if name is None:
            self.count += 1
            name = f"pb{self.count}"
        self.changed = True
        view = Node(Op.VIEW, (source,), shape, source.dtype,
                    types.MappingProxyType({"what": "lanes", "how": how, "lanes": self.lane.block}),
                    source.location, name)
        self.emitted.append(view)
        if how in ("widen", "relabel"):
            self.original[view] = stands_for
        return view
