"""The code of a loop whose tiles several programs share (`split_programs`, ir/loop_split.py).

Program `split_id` of the `split_count` programs given to one grid point takes tiles
`split_id, split_id + split_count, ...` of the loop's flattened tile space (last dim fastest,
as the nested loops it replaces would visit them):

    count_k0 = tl.maximum((((m) + (64) - 1) // (64)), 0)
    count_k1 = tl.maximum((((n) + (64) - 1) // (64)), 0)
    for split_tile in tl.range(split_id, count_k0 * count_k1, split_count):
        k1 = 0 + (split_tile % count_k1) * 64
        k0 = 0 + (split_tile // count_k1) * 64

Under `pid_type='persistent_interleaved'` there is one program per SM, every program visits every
grid point, and the tiles of all grid points are dealt out in turn (`split_seen` counts the tiles
of the grid points before): a few large groups among many small or empty ones keep every program
busy (MoE layers).

Such loops are where sizes, strides and offsets loaded from memory address the operands (a group's
`k`, `n` and offsets). Triton cannot know that those are multiples of 16 bytes, so its loads stay
one element wide. The loop is therefore emitted twice: under a run-time test that each such value
is a multiple of 16 bytes, where it is rebound as `(v // q) * q` (the same value there, now of a
divisibility Triton's analysis sees, so loads and masks vectorize), and as is otherwise.
"""
from __future__ import annotations

from typing import Any, Callable

import sympy

from tessera.backends.triton.printer import cdiv_text, print_expr
from tessera.ir.graph import AccessKind, Node
from tessera.ir.loop_split import memory_nodes

VECTOR_BYTES = 16


def emit_split_loop(emitter: Any, node: Node, emit_body: Callable[[], None]) -> None:
    """The split loop's head and body (`emit_body` writes the body at the current indent), in an
    aligned and a general version when loaded values address its memory."""
    aligned = aligned_values(node, {n.name for n in emitter.ir.nodes()})
    if not aligned:
        _emit_shared_loop(emitter, node, emit_body)
        return
    test = " & ".join(f"({name} % {quantum} == 0)" for name, quantum in aligned.items())
    emitter.line(f"if {test}:  # loaded sizes and offsets are multiples of {VECTOR_BYTES} bytes: vector accesses")
    emitter.indent += 1
    for name, quantum in aligned.items():
        emitter.line(f"{name} = ({name} // {quantum}) * {quantum}")
    _emit_shared_loop(emitter, node, emit_body)
    emitter.indent -= 1
    emitter.line("else:")
    emitter.indent += 1
    _emit_shared_loop(emitter, node, emit_body)
    emitter.indent -= 1


def _emit_shared_loop(emitter: Any, node: Node, emit_body: Callable[[], None]) -> None:
    dims = node.params["loops"]
    for dim in dims:
        emitter.line(f"count_{dim.variable} = tl.maximum({cdiv_text(print_expr(dim.end - dim.begin), str(dim.step))}, 0)")
    total = " * ".join(f"count_{dim.variable}" for dim in dims)
    first = "split_id"
    if emitter.split_persistent:  # this program's first tile here: global tile number = its id mod P
        first = "split_first"
        # below split_count, so int32 whatever split_seen is: an int64 first tile made every tile
        # index, address and mask of the body 64-bit (MoE G8 on the H100: 0.40 -> 0.73 ms)
        emitter.line("split_first = ((tl.program_id(0) - split_seen % split_count + split_count) % split_count)"
                     ".to(tl.int32)")
    emitter.line(f"for split_tile in tl.range({first}, {total}, split_count):")
    emitter.indent += 1
    rest = "split_tile"
    grouping = int(emitter.config.get("l2_grouping", 1) or 1)
    last = len(dims) - 1
    if grouping > 1 and len(dims) >= 2:
        # G rows of tiles at a time (the last two dims): programs working together share operand tiles in L2
        rows, cols = f"count_{dims[-2].variable}", f"count_{dims[-1].variable}"
        emitter.line(f"split_plane = split_tile % ({rows} * {cols})")
        emitter.line(f"split_group = split_plane // ({grouping} * {cols}) * {grouping}")
        emitter.line(f"split_rows = tl.minimum({rows} - split_group, {grouping})")
        emitter.line(f"{dims[-1].variable} = ({print_expr(dims[-1].begin)}) + "
                     f"(split_plane % ({grouping} * {cols}) // split_rows) * {dims[-1].step}")
        emitter.line(f"{dims[-2].variable} = ({print_expr(dims[-2].begin)}) + "
                     f"(split_group + split_plane % ({grouping} * {cols}) % split_rows) * {dims[-2].step}")
        rest = f"(split_tile // ({rows} * {cols}))"
        last = len(dims) - 3
    for position in range(last, -1, -1):
        dim = dims[position]
        index = f"{rest} % count_{dim.variable}" if position else rest
        emitter.line(f"{dim.variable} = ({print_expr(dim.begin)}) + ({index}) * {dim.step}")
        rest = f"({rest} // count_{dim.variable})"
    emit_body()
    emitter.indent -= 1
    if emitter.split_persistent:
        emitter.line(f"split_seen += {total}")


def aligned_values(loop: Node, device_names: set[str]) -> dict[str, int]:
    """Loaded values (by name) that must be multiples of `quantum` elements for the loop's
    accesses to start on 16-byte boundaries: base offsets, strides of the non-contiguous dims,
    the extent of the contiguous one, and enough factors of each view's bound."""
    chosen: dict[str, int] = {}
    bounds: list[tuple[Any, int]] = []
    for access_node in memory_nodes(loop):
        tensor = access_node.params["tensor"]
        quantum = VECTOR_BYTES // tensor.dtype.itemsize
        if quantum <= 1:
            continue
        if not any(sympy.sympify(stride) == 1 for stride in tensor.strides):
            continue  # no contiguous dim: no vector access to win
        needed = [tensor.offset]
        for stride, access in zip(tensor.strides, access_node.params["accesses"]):
            if sympy.sympify(stride) != 1:
                needed.append(stride)
            elif access.kind is AccessKind.AXIS:
                needed.append(access.axis.end)
                if access.bound is not None:
                    needed.append(access.bound)
        for expr in needed:
            _require(sympy.sympify(expr), device_names, chosen, quantum)
        bounds += [(sympy.sympify(limit), quantum) for limit in tensor.limits]
    for expr, quantum in bounds:
        _require(expr, device_names, chosen, quantum)
    return dict(sorted(chosen.items()))


def _require(expr: sympy.Basic, device_names: set[str], chosen: dict[str, int], quantum: int) -> None:
    """Choose loaded symbols so that `expr` is a multiple of `quantum` in Triton's analysis:
    every term of a sum, one factor of a product."""
    if isinstance(expr, sympy.Symbol):
        if expr.name in device_names:
            chosen[expr.name] = max(chosen.get(expr.name, 1), quantum)
        return
    if expr.is_Number:
        return
    if isinstance(expr, sympy.Mul):
        factors = expr.args
        if any(_divisible(f, device_names, chosen, quantum) for f in factors):
            return
        for factor in factors:
            if factor.free_symbols & {sympy.Symbol(name) for name in device_names} or any(
                    s.name in device_names for s in factor.free_symbols):
                _require(factor, device_names, chosen, quantum)
                return
        return
    for arg in expr.args:
        _require(arg, device_names, chosen, quantum)


def _divisible(factor: sympy.Basic, device_names: set[str], chosen: dict[str, int], quantum: int) -> bool:
    if factor.is_Integer:
        return int(factor) % quantum == 0
    return isinstance(factor, sympy.Symbol) and chosen.get(factor.name, 1) >= quantum


__all__ = ["aligned_values", "emit_split_loop"]
