"""Products over a whole dimension too big for shared memory, as a loop over that dimension.

`x[t, :] @ w[:, :]` holds both operands whole: for Helion's se_block (K = N = 1024, fp16) w alone
is 2 MB, and tl.dot stages its operands in shared memory (227 KB a program on an H100), so no
Config fits. When the operands' whole-K tiles would not fit, the product is computed in chunks of
K instead, re-reading its operands from memory per chunk:

    acc = tl.zeros([M, N], tl.float32)
    for chunk_k in tl.range(0, K, BK):
        idx_k = chunk_k + tl.arange(0, BK); mask_k = idx_k < K
        ...the operands' loads and the elementwise work on them, on this chunk...
        acc = tl.dot(a_chunk, b_chunk, acc=acc)

That works when each operand is computed from loads by work done lane by lane (casts, elementwise
ops, transposes): its *cone*. Values without K (a row scale) are used as they are. A cone's nodes
that nothing else reads are not emitted at full width at all.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import sympy

from tessera.ir.graph import AccessKind, Axis, Block, KernelIR, Node, Op, substitute_axes, walk

LANEWISE = frozenset({Op.LOAD, Op.CAST, Op.ELEMENTWISE, Op.PERMUTE, Op.VIEW, Op.BROADCAST})
MIN_CHUNK = 16  # tl.dot's smallest K


@dataclasses.dataclass(frozen=True)
class ChunkedDot:
    """How one DOT node is emitted: a loop over `chunk` (the K axis in blocks of `chunk.block`)
    computing `nodes` (the operands' cones, body order, K replaced by `chunk`) per iteration."""

    chunk: Axis
    nodes: tuple[Node, ...]  # substituted copies
    left: Node
    right: Node


def plan_chunked_dots(ir: KernelIR, budget: int, stages: int) -> tuple[dict[Node, ChunkedDot], set[Node]]:
    """The dots of `ir` to emit in chunks (their whole-K operands alone exceed `budget` bytes of
    shared memory; a chunk of K fits `stages` times), and the nodes only those chunked cones read."""
    nodes = list(walk(ir.body))
    users: dict[Node, set[Node]] = {}
    for node in nodes:
        for value in _node_inputs(node):
            users.setdefault(value, set()).add(node)
    chunked: dict[Node, ChunkedDot] = {}
    cones: dict[Node, set[Node]] = {}
    for node in nodes:
        if node.op is not Op.DOT or node.params.get("small") or len(node.shape) != 2:
            continue
        k = node.params["k_axis"]
        if not _is_whole(k):
            continue
        a, b = node.inputs[0], node.inputs[1]
        itemsize = max(a.dtype.itemsize, b.dtype.itemsize)
        m, n = node.shape[0].block, node.shape[1].block
        if (m * k.block + k.block * n) * itemsize <= budget:
            continue  # the whole operands fit once (the heuristic sized the pipeline around them)
        left, right = _cone(a, k), _cone(b, k)
        if left is None or right is None:
            continue
        cone = left | right
        block = k.block
        while block > MIN_CHUNK and (m * block + block * n) * itemsize * stages > budget:
            block //= 2
        chunk = _chunk_axis(k, block, node.name)
        ordered = [n_ for n_ in nodes if n_ in cone]
        substituted = substitute_axes(Block((*ordered, node)), {k: chunk}).nodes
        copies = {original: copy for original, copy in zip(ordered + [node], substituted)}
        chunked[node] = ChunkedDot(chunk, tuple(substituted[:-1]), copies.get(a, a), copies.get(b, b))
        cones[node] = cone
    skipped: set[Node] = set()
    candidates = set().union(*cones.values()) if cones else set()
    changed = True
    while changed:  # a cone node that only chunked dots over it and skipped nodes read
        changed = False
        for node in candidates - skipped:
            readers = users.get(node, set())
            if readers and all(r in skipped or (r in cones and node in cones[r]) for r in readers):
                skipped.add(node)
                changed = True
    return chunked, skipped


def _is_whole(axis: Axis) -> bool:
    return axis.kind.value == "whole" and isinstance(axis.begin, sympy.Integer) and axis.begin == 0


def _cone(value: Node, k: Axis) -> set[Node] | None:
    """The nodes computing `value` that carry `k`, if all are lane-wise work on loads; else None."""
    cone: set[Node] = set()
    work = [value]
    while work:
        node = work.pop()
        if node in cone or k not in node.shape:
            continue
        if node.op not in LANEWISE:
            return None
        if node.op is Op.LOAD and any(access.kind is AccessKind.VALUE and access.value is not None
                                      and k in access.value.shape for access in node.params["accesses"]):
            return None  # a gather along K by a K-shaped index
        cone.add(node)
        work += [v for v in node.inputs if isinstance(v, Node)]
    return cone


def _chunk_axis(k: Axis, block: int, owner: str) -> Axis:
    name = f"{k.name}_{owner}"
    extent = sympy.sympify(k.end)
    exact = extent.is_Integer and int(extent) % block == 0
    return dataclasses.replace(k, name=name, begin=sympy.Symbol(f"chunk_{name}", integer=True), block=block,
                               needs_mask=not exact)


def _node_inputs(node: Node) -> Iterator[Node]:
    for value in node.inputs:
        if isinstance(value, Node):
            yield value
    for access in node.params.get("accesses", ()) or ():
        if getattr(access, "value", None) is not None:
            yield access.value
