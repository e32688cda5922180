"""Looped whole-row reductions: splitting a tile-loop body into passes over a row in chunks.

A whole dimension read with `:` (`x[tile, :]`) is one axis, normally held in registers as one
block. With `Config(reduction_loops=[C])` that axis has block C instead, and the body runs as
*passes*: each pass is a loop over the row in chunks of C that computes the row values it needs
and accumulates the reductions over the row that they feed. A value computed after a reduction
(`x - x.amax()`) can only start once that reduction's pass is over, so it goes in a later pass,
where the row values it uses (the load of `x`) are computed again:

    softmax:  pass 0: load x, acc = max(acc, x)          -> m
              pass 1: load x, acc += exp(x - m)          -> s
              pass 2: load x, store exp(x - m) / s

Values without the row axis are computed between the passes, as soon as their inputs exist.
A pass that only sums `exp(x - m)` right after the pass of `m = amax(x)` (softmax, log-softmax,
cross-entropy's log-sum-exp) is folded into that pass (`OnlineSum`): a running max of the row and
sums rescaled to it, so the row is read once for both; on the H100 a 4096 x 32000
cross-entropy read its logits twice otherwise.
`schedule` says what goes where; the backend writes the loops. Nothing here knows Triton.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Mapping

import sympy
import torch

from tessera.ir.graph import MEMORY_OPS, AccessKind, Axis, Block, Node, Op

LOOPABLE_REDUCTIONS = ("sum", "amax", "amin")
"""Reductions that combine chunk by chunk (argmax/argmin would need a value and an index)."""


@dataclasses.dataclass(frozen=True, eq=False)
class OnlineSum:
    """`maximum = amax(value)` and `total = sum(exp(value - maximum))` over the row in one pass:
    a running max `M` of the row (each chunk's max folded in) and per lane a sum `S` of
    `exp(value - M)`, rescaled by `exp(M_old - M_new)` when the max grows; after the loop
    `maximum = M` and `total = sum(S)` (backends/triton/row_loops.py writes the loop)."""

    value: Node
    maximum: Node
    total: Node


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkPass:
    """One loop over the row: the row nodes it computes (body order) and the reductions it feeds
    (`online`: the pair of reductions it computes together instead, see OnlineSum)."""

    index: int
    nodes: tuple[Node, ...]
    reductions: tuple[Node, ...]
    online: OnlineSum | None = None


class NotLoopable(Exception):
    """The body cannot be split into passes over this row; the message says which line stops it."""


def schedule(block: Block, row: set[Axis]) -> list[Node | ChunkPass]:
    """The body as top-level nodes and chunk passes in execution order, or `NotLoopable`."""
    return _Scheduler(block, row).run()


def why_not_loopable(block: Block, row: set[Axis]) -> str | None:
    try:
        schedule(block, row)
    except NotLoopable as reason:
        return str(reason)
    return None


class _Scheduler:
    def __init__(self, block: Block, row: set[Axis]) -> None:
        self.nodes = block.nodes
        self.row = row
        self.by_name = {node.name: node for node in self.nodes}
        self.phase: dict[Node, int] = {}  # row nodes: the first pass that can compute them
        self.ready: dict[Node, int] = {}  # other nodes: computed before pass `ready` (after the last)

    def has_row(self, node: Node) -> bool:
        return any(axis in self.row for axis in node.shape)

    def run(self) -> list[Node | ChunkPass]:
        for node in self.nodes:
            self._place(node)
        roots: dict[int, list[Node]] = {}
        for node in self.nodes:
            if self.has_row(node) and node.op is Op.STORE:
                roots.setdefault(self.phase[node], []).append(node)
            elif node in self.ready and _reduces_row(node, self.row):
                roots.setdefault(self.ready[node] - 1, []).append(node)
        passes = [self._pass(index, roots.get(index, [])) for index in range(max(roots, default=-1) + 1)]
        self._check_memory_order(passes)
        items: list[Node | ChunkPass] = []
        for level in range(len(passes) + 1):
            items += [n for n in self.nodes if self.ready.get(n) == level and not _reduces_row(n, self.row)]
            if level < len(passes):
                items.append(passes[level])
        return _fold_online_sums(items)

    def _place(self, node: Node) -> None:
        inputs = list(dependencies(node, self.by_name))
        if self.has_row(node):
            if node.op in (Op.LOOP, Op.CARRIED) or _nested_uses(node, self.row):
                raise NotLoopable(f"{_where(node)}: the row is used inside an inner loop")
            if node.op is Op.SCAN and node.params["axis"] in self.row:
                raise NotLoopable(f"{_where(node)}: a scan along the row cannot be computed in chunks")
            self.phase[node] = max((self.phase[d] if d in self.phase else self.ready.get(d, 0) for d in inputs),
                                   default=0)
            return
        row_inputs = [d for d in inputs if d in self.phase]
        if row_inputs:
            if not _reduces_row(node, self.row):
                what = f"{node.params.get('fn')} reduction" if node.op is Op.REDUCE else f"'{node.op.value}'"
                raise NotLoopable(f"{_where(node)}: a {what} of the row cannot be computed in chunks")
            self.ready[node] = self.phase[node.inputs[0]] + 1
            return
        if _nested_uses(node, self.row):
            raise NotLoopable(f"{_where(node)}: the row is used inside an inner loop")
        self.ready[node] = max((self.ready.get(d, 0) for d in inputs), default=0)

    def _pass(self, index: int, roots: list[Node]) -> ChunkPass:
        needed: set[Node] = set()
        work = [r.inputs[0] if r.op is Op.REDUCE else r for r in roots]
        while work:
            node = work.pop()
            if node in needed:
                continue
            needed.add(node)
            work += [d for d in dependencies(node, self.by_name) if d in self.phase]
        nodes = [n for n in self.nodes if n in needed]
        return ChunkPass(index, tuple(nodes), tuple(r for r in roots if r.op is Op.REDUCE))

    def _check_memory_order(self, passes: list[ChunkPass]) -> None:
        """A tensor both read and written keeps the order of those accesses: a load computed
        again in a later pass must not see what an earlier pass stored."""
        position: dict[Node, list[int]] = {}  # top-level at level L: 2L; in pass p: 2p + 1
        for chunk in passes:
            for node in chunk.nodes:
                position.setdefault(node, []).append(2 * chunk.index + 1)
        for node, level in self.ready.items():
            position.setdefault(node, []).append(2 * level)
        accesses = [n for n in _walk(self.nodes) if n.op in MEMORY_OPS]
        for store in (n for n in accesses if n.op is Op.STORE):
            name = store.params["tensor"].name
            for load in (n for n in accesses if n.op is Op.LOAD and n.params["tensor"].name == name):
                if not self._ordered(load, store, position):
                    raise NotLoopable(f"{_where(load)}: reads {name}, which {_where(store)} writes; "
                                      "splitting the row into passes would reorder them")

    def _ordered(self, load: Node, store: Node, position: dict[Node, list[int]]) -> bool:
        loads, stores = position.get(_top(load, self.nodes), []), position.get(_top(store, self.nodes), [])
        if not loads or not stores:
            return True  # never computed (dead): nothing to reorder
        store_at = stores[0]  # a store runs once, in one pass or between passes
        load_first = self.nodes.index(_top(load, self.nodes)) < self.nodes.index(_top(store, self.nodes))
        plain = _plain_row_access(load, self.row) and _plain_row_access(store, self.row)

        def kept(at: int) -> bool:
            if at == store_at:  # between passes: body order; in one pass: chunk c only touches chunk c
                return at % 2 == 0 or plain
            return at < store_at if load_first else at > store_at
        return all(kept(at) for at in loads)


def _fold_online_sums(items: list[Node | ChunkPass]) -> list[Node | ChunkPass]:
    """`items` with each pass that only sums `exp(x - amax(x))` folded into the pass before it,
    which computes that amax (OnlineSum); the values between the two now follow the folded
    pass (they need only the max). Passes are numbered again in order."""
    passes = [item for item in items if isinstance(item, ChunkPass)]
    folded: dict[ChunkPass, ChunkPass] = {}
    dropped: set[ChunkPass] = set()
    for first, second in zip(passes, passes[1:]):
        if first in dropped or first in folded:
            continue
        online = _online_sum(first, second)
        if online is not None:
            folded[first] = dataclasses.replace(first, reductions=(), online=online)
            dropped.add(second)
    if not folded:
        return items
    result: list[Node | ChunkPass] = []
    for item in items:
        if isinstance(item, ChunkPass):
            if item in dropped:
                continue
            item = dataclasses.replace(folded.get(item, item), index=sum(isinstance(r, ChunkPass) for r in result))
        result.append(item)
    return result


def _online_sum(first: ChunkPass, second: ChunkPass) -> OnlineSum | None:
    """The OnlineSum of `first` (only `m = amax(x)`) and `second` (only `sum(exp(x - m))`, with no
    row value of its own but that difference and its exp), or None when they are not that pair.
    Only for float32/64 `x`: the folded form computes in `x`'s dtype, as the two passes do."""
    if len(first.reductions) != 1 or len(second.reductions) != 1 or first.online or second.online:
        return None
    maximum, total = first.reductions[0], second.reductions[0]
    if maximum.params["fn"] != "amax" or total.params["fn"] != "sum":
        return None
    value = maximum.inputs[0]
    if value.dtype not in (torch.float32, torch.float64) or total.params["accumulate"] != value.dtype:
        return None
    exp = total.inputs[0]
    if exp.op is not Op.ELEMENTWISE or exp.params["fn"] != "exp" or exp.dtype != value.dtype:
        return None
    difference = exp.inputs[0]
    if difference.op is not Op.ELEMENTWISE or difference.params["fn"] != "sub" or difference.dtype != value.dtype:
        return None
    if difference.inputs[0] is not value or not _layout_of(difference.inputs[1], maximum):
        return None
    if maximum.params["axis"] is not total.params["axis"] or maximum.params["dim"] != total.params["dim"]:
        return None
    if set(second.nodes) - set(first.nodes) != {difference, exp}:
        return None
    return OnlineSum(value, maximum, total)


def _layout_of(node: Node, source: Node) -> bool:
    """`node` is `source` seen through views and broadcasts only (`m[:, None]`)."""
    while node is not source:
        if node.op not in (Op.VIEW, Op.BROADCAST, Op.RESHAPE) or not node.inputs:
            return False
        node = node.inputs[0]
    return True


def _reduces_row(node: Node, row: set[Axis]) -> bool:
    return node.op is Op.REDUCE and node.params.get("axis") in row and node.params.get("fn") in LOOPABLE_REDUCTIONS


def _plain_row_access(node: Node, row: set[Axis]) -> bool:
    """The row is addressed by its own index (no gather), so chunk c touches only chunk c."""
    return all(access.kind is not AccessKind.VALUE for access in node.params["accesses"])


def _where(node: Node) -> str:
    if node.location is None:
        return f"IR node {node.name}"
    return f"line {node.location.lineno} ({node.location.source_line().strip()})"


def _top(node: Node, top_level: list[Node]) -> Node:
    """The top-level node that contains `node` (itself, or the inner loop it is in)."""
    if node in top_level:
        return node
    for candidate in top_level:
        if any(node is inner for inner in _walk(b.nodes for b in candidate.blocks)):
            return candidate
    return node


def _walk(nodes: Iterable[Any]) -> Iterator[Node]:
    for item in nodes:
        if isinstance(item, Node):
            yield item
            for inner in item.blocks:
                yield from _walk(inner.nodes)
        else:  # a list of nodes
            yield from _walk(item)


def _nested_uses(node: Node, row: set[Axis]) -> bool:
    return any(any(axis in row for axis in inner.shape) for b in node.blocks for inner in _walk(b.nodes))


def dependencies(node: Node, by_name: dict[str, Node]) -> Iterator[Node]:
    """The top-level nodes `node` reads: its inputs, values its inner blocks read from outside,
    and runtime scalars (`v7` symbols in sizes, bounds and offsets)."""
    inside = set(_walk(b.nodes for b in node.blocks)) | set(node.params.get("carried", ()))
    for item in [node, *inside]:
        for value in _flatten(item.inputs):
            if isinstance(value, Node) and value not in inside:
                yield value
        for symbol in _free_symbols([item.params, item.shape]):
            found = by_name.get(symbol)
            if found is not None and found is not node and found not in inside:
                yield found


def _flatten(values: Any) -> Iterator[Any]:
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _flatten(value)
        else:
            yield value


def _free_symbols(value: Any, depth: int = 0) -> Iterator[str]:
    """Names of the symbols in the sympy expressions reachable from IR params (bounded walk)."""
    if depth > 8:
        return
    if isinstance(value, sympy.Basic):
        yield from (s.name for s in value.free_symbols)
    elif isinstance(value, Axis):
        yield from _free_symbols([value.begin, value.end], depth + 1)
    elif isinstance(value, Mapping):
        yield from _free_symbols(list(value.values()), depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _free_symbols(item, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, (Node, type)):
        yield from _free_symbols([getattr(value, f.name) for f in dataclasses.fields(value)], depth + 1)
