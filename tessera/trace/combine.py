"""User combine functions (`hl.reduce`, `hl.associative_scan`) traced into a small sub-graph.

The function runs once on 0-d proxies, one per operand for the left side and one per operand
for the right side (ARGUMENT nodes); what it computes from them is recorded as the block of the
REDUCE or SCAN node that uses it, and a backend writes that block as a helper function (Triton
calls it element by element). Only elementwise work fits in there: a load, a store, a loop or a
value from outside the function (a tile of the kernel, a runtime scalar) is refused, located.

>>> body, results = trace_combine(tracer, lambda a, b: a + b, (torch.float32,))   # doctest: +SKIP
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import sympy
import torch

from tessera import exc
from tessera.ir.graph import Block, Node, Op
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

_ALLOWED = frozenset({Op.ELEMENTWISE, Op.CAST, Op.FULL, Op.ARGUMENT, Op.VIEW, Op.BROADCAST})


def trace_combine(tracer: Tracer, function: Callable[..., Any], dtypes: Sequence[torch.dtype],
                  what: str) -> tuple[Block, tuple[Node, ...]]:
    """The traced body of `function` combining two groups of `len(dtypes)` values, and its
    results (one per operand, cast to the operand's dtype: the scan or reduction keeps it)."""
    count = len(dtypes)
    with tracer.recording() as nodes:
        arguments = [tracer.emit(Op.ARGUMENT, [], (), dtype, position=i)
                     for i, dtype in enumerate((*dtypes, *dtypes))]
        left, right = arguments[:count], arguments[count:]
        returned = call_combine(function, left, right, what)
        _check_body(nodes, what)  # before the results' shapes: a value from outside explains those
        items = returned if isinstance(returned, (tuple, list)) else (returned,)
        if len(items) != count:
            raise exc.TesseraError(f"{what}: the combine function returned {len(items)} values for {count} operands",
                                   location=user_location(),
                                   hint="return one value per operand (a tuple when combining tuples)")
        results = tuple(_result(tracer, item, dtype, what) for item, dtype in zip(items, dtypes))
    return Block(tuple(nodes)), results


def call_combine(function: Callable[..., Any], left: Sequence[Any], right: Sequence[Any],
                 what: str = "the combine function") -> Any:
    """`function` on two groups of values (tile values when traced, tensors in eager mode), in
    Helion's two spellings for tuples: `f(a0, a1, b0, b1)` or `f((a0, a1), (b0, b1))`."""
    if not callable(function):
        raise exc.TesseraError(f"{what}: combine_fn {function!r} is not callable", location=user_location(),
                               hint="pass a function of two values, e.g. `lambda a, b: a + b`")
    if len(left) == 1:
        return function(left[0], right[0])
    try:
        parameters = inspect.signature(function).parameters.values()
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        unpacked = len(positional) == 2 * len(left)
    except (TypeError, ValueError):  # a builtin without a signature: the packed form
        unpacked = False
    return function(*left, *right) if unpacked else function(tuple(left), tuple(right))


def _result(tracer: Tracer, item: Any, dtype: torch.dtype, what: str) -> Node:
    if isinstance(item, (bool, int, float)):
        return tracer.emit(Op.FULL, [item], (), dtype).node
    if not isinstance(item, TileValue):
        raise exc.TesseraError(f"{what}: the combine function returned {type(item).__name__}, not a value",
                               location=user_location(), hint="return values computed from its arguments")
    if any(axis.block != 1 for axis in item.axes):
        raise exc.ShapeMismatchError(f"{what}: the combine function returned a value of shape {list(item.axes)}; "
                                     "it combines single elements", location=user_location(),
                                     hint="compute elementwise on the two arguments only")
    node = item.node
    if item.axes:
        node = tracer.emit(Op.VIEW, [node], (), item.dtype, what="combine result").node
    if item.dtype != dtype:  # Triton's scan and reduce keep the operand's type
        node = tracer.emit(Op.CAST, [node], (), dtype).node
    return node


def _check_body(nodes: list[Node], what: str) -> None:
    known = set(nodes)
    for node in nodes:
        outside = [v for v in node.inputs if isinstance(v, Node) and v not in known]
        symbolic = [v for v in node.inputs if isinstance(v, sympy.Basic) and v.free_symbols]
        if node.op not in _ALLOWED or outside or symbolic or "expr" in node.params:
            reason = (f"a {node.op.value}" if node.op not in _ALLOWED else
                      "a value from outside the function" if outside or "expr" in node.params else
                      f"the runtime value {symbolic[0]}")
            raise exc.UnsupportedOperationError(
                f"{what}: the combine function uses {reason}; it may only compute elementwise on its "
                "arguments and constants", location=node.location,
                hint="apply other tensors before or after the scan/reduction, or combine them as "
                     "extra operands (a tuple)")
