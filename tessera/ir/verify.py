"""`verify(ir)`: the invariants every `KernelIR` keeps, checked after tracing and after each pass.

- every node an input names is defined before it, in its block or an enclosing one (a loop's
  carried placeholders are defined inside that loop, and after it hold its results);
- every axis of a shape is the unit axis, a launch or whole axis of the kernel, or the tile of an
  enclosing inner loop;
- values have a dtype; loops, plain stores and nodes of several results (params `dtypes`) have
  none (an atomic store's value is the old contents, so it may have one).

A violation is a Tessera bug, never the user's: it raises `IRVerificationError` naming the pass.

>>> verify(ir, after="decide_masks")   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Iterable

from tessera import exc
from tessera.ir.graph import UNIT, Axis, Block, KernelIR, Node, Op

_NO_VALUE = frozenset({Op.STORE, Op.LOOP, Op.DEVICE_PRINT, Op.BREAKPOINT})


class IRVerificationError(exc.TesseraError):
    """An IR broke an invariant: a bug in tracing or in a pass."""


def verify(ir: KernelIR, after: str = "tracing") -> None:
    known_axes = {UNIT, *ir.launch_axes, *ir.whole_axes}
    problems: list[str] = []
    _verify_block(ir.body, set(), known_axes, problems)
    if problems:
        raise IRVerificationError(
            f"the IR of {ir.name} is inconsistent after {after}: " + "; ".join(problems[:5]),
            hint="this is a Tessera bug; please report it with TESSERA_LOG=ir output")


def _verify_block(block: Block, defined: set[Node], axes: set[Axis], problems: list[str]) -> None:
    defined = set(defined)
    for node in block.nodes:
        for value in _node_inputs(node):
            if value not in defined:
                problems.append(f"{node.name} reads {value.name} before it is defined")
        for axis in node.shape:
            if axis not in axes:
                problems.append(f"{node.name} has axis {axis.name}, which no loop or launch defines")
        has_value = node.op not in _NO_VALUE or (node.op is Op.STORE and bool(node.params.get("atomic")))
        has_value = has_value and "dtypes" not in node.params  # several results: ITEM nodes hold their dtypes
        has_value = has_value and node.params.get("outputs") != 0  # inline Triton run for its effects
        if node.op is not Op.STORE and (node.dtype is None) == has_value:
            problems.append(f"{node.name} ({node.op.value}) has dtype {node.dtype}")
        elif node.op is Op.STORE and node.dtype is not None and not has_value:
            problems.append(f"{node.name} (a plain store) has dtype {node.dtype}")
        if node.op is Op.LOOP:
            inner_axes = axes | {loop.axis for loop in node.params["loops"] if loop.axis is not None}
            carried = set(node.params["carried"])
            for inner in node.blocks:
                _verify_block(inner, defined | carried, inner_axes, problems)
            body = set(_all_nodes(node.blocks))
            for output in node.params["outputs"]:
                if output not in body and output not in carried and output not in defined:
                    problems.append(f"loop {node.name} returns {output.name}, defined nowhere it can see")
            defined |= carried  # after the loop, its placeholders hold the loop's results
        defined.add(node)


def _node_inputs(node: Node) -> Iterable[Node]:
    for value in node.inputs:
        if isinstance(value, Node):
            yield value
    for access in node.params.get("accesses", ()):
        if access.value is not None:
            yield access.value


def _all_nodes(blocks: Iterable[Block]) -> Iterable[Node]:
    for block in blocks:
        for node in block.nodes:
            yield node
            yield from node.params.get("carried", ())  # an inner loop's results
            yield from _all_nodes(node.blocks)
