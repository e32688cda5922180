"""The passes between tracing and a backend, in order. Each is `KernelIR -> KernelIR`.

    ir = run_passes(traced)          # what the compiler does after tracing

`TESSERA_LOG=ir` prints the IR after tracing and after each pass that changed it.
"""
from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any, Callable, Iterator, Mapping

import sympy

from tessera import exc
from tessera.ir.graph import UNIT, Axis, AxisKind, DimAccess, KernelIR, LoopDim, Node, walk, with_axes
from tessera.ir.loop_peel import peel_loop_tails
from tessera.ir.scale_fold import fold_scales_out_of_extrema
from tessera.ir.rolling import NotLoopable, schedule, why_not_loopable
from tessera.ir.verify import verify


def next_power_of_two(value: int) -> int:
    return 1 if value <= 1 else 1 << (int(value) - 1).bit_length()


def whole_dim_bucket(extent: Any, block: int) -> sympy.Basic:
    """The sizes a whole dimension held in one block of `block` lanes may have: the block is baked
    into the code, so the variant is reused only for extents in its power-of-two bucket."""
    return sympy.And(extent <= block, extent > block // 2) if block > 1 else sympy.Le(extent, 1)


def settle_row_loop(ir: KernelIR) -> KernelIR:
    """A row looped in chunks only because it is long (no `reduction_loops` entry asked for it)
    whose uses cannot be split into passes goes back to one block, guarded to its size bucket.
    An explicit entry is left for `schedule_row_passes` to refuse loudly."""
    row = ir.row_loop
    if row is None or row.requested or why_not_loopable(ir.body, {row.axis}) is None:
        return ir
    extent = row.axis.end
    block = next_power_of_two(int(sympy.sympify(extent).xreplace(dict(ir.example))))
    guards = ir.guards
    if isinstance(extent, sympy.Basic) and not extent.is_Integer:
        guards = guards + ((whole_dim_bucket(extent, block), f"whole dimension of size {extent} fits block {block}"),)
    one_block = dataclasses.replace(row.axis, begin=sympy.Integer(0), block=block)
    return with_axes(ir.replace(row_loop=None, guards=guards), {row.axis: one_block})


def decide_masks(ir: KernelIR) -> KernelIR:
    """An axis needs a mask unless its block provably divides its extent (a tile loop over a
    multiple of its block, a whole dimension exactly one block long). Sizes the guards pin to a
    constant count as that constant: attention's `k[b, tile, :]` is a whole head dim of size
    `k_size2`, which a product's `Eq(128, k_size2)` guard makes exactly one block of 128."""
    changed = {}
    offsets = {**_launch_offsets(ir), **pinned_sizes(ir)}
    for axis in _axes(ir):
        needs_mask = _needs_mask(axis, offsets)
        if needs_mask != axis.needs_mask:
            changed[axis] = dataclasses.replace(axis, needs_mask=needs_mask)
    return with_axes(ir, changed)


def peel_tails(ir: KernelIR) -> KernelIR:
    """Loops that reduce over a tile their block may not divide: whole tiles unmasked, then the
    masked last tile in a loop of its own (ir/loop_peel.py)."""
    offsets = _launch_offsets(ir)
    return peel_loop_tails(ir, lambda axis: _needs_mask(axis, offsets))


def _launch_offsets(ir: KernelIR) -> dict[sympy.Symbol, sympy.Expr]:
    """Each tile launch dim's offset symbol as `begin + block * p` (p a program number): a loop
    bounded by a tile's begin (causal attention's keys before the query tile) then provably
    covers whole blocks when the launch block is a multiple of the loop's."""
    if not ir.launch_axes:
        return {}
    return {sympy.Symbol(f"offset_{dim}", integer=True):
            grid.begin + grid.step * sympy.Symbol(f"program_{dim}", integer=True, nonnegative=True)
            for dim, grid in enumerate(ir.grid)}


def pinned_sizes(ir: KernelIR) -> dict[sympy.Symbol, sympy.Integer]:
    """Host symbols the guards make equal to a constant, through chains of equalities
    (`Eq(k_size2, q_size2)` and `Eq(128, k_size2)` pin both): the variant only runs where they hold."""
    equalities = [condition.args for condition, _ in ir.guards if isinstance(condition, sympy.Eq)]
    pinned: dict[sympy.Symbol, sympy.Integer] = {}
    changed = True
    while changed:
        changed = False
        for left, right in equalities:
            left, right = left.xreplace(pinned), right.xreplace(pinned)
            for symbol, value in ((left, right), (right, left)):
                if isinstance(symbol, sympy.Symbol) and isinstance(value, sympy.Integer):
                    pinned[symbol], changed = value, True
    return pinned


def _needs_mask(axis: Axis, offsets: Mapping[sympy.Symbol, sympy.Expr] = types.MappingProxyType({})) -> bool:
    """`offsets`: launch offsets as program expressions (`_launch_offsets`) and pinned sizes."""
    if axis.kind is AxisKind.UNIT:
        return False
    if axis.kind is AxisKind.WHOLE:
        end = sympy.sympify(axis.end).xreplace(offsets)
        if is_chunked(axis):
            return not (sympy.Mod(end, axis.block) == 0)
        return not (sympy.Integer(axis.block) == end)
    if axis.block == 1:  # one lane, at an index the loop or the grid only reaches below the extent
        return False
    if axis.end is not axis.range_end and sympy.Mod(sympy.sympify(axis.end - axis.range_begin), axis.block) == 0:
        return False  # a peeled loop's whole tiles: it ends at `begin + 64 * (extent // 64)` (ir/loop_peel.py)
    pinned = {symbol: value for symbol, value in offsets.items() if isinstance(value, sympy.Integer)}
    extent = sympy.sympify(axis.range_end - axis.range_begin).xreplace(pinned)
    if extent.is_Integer:
        return int(extent) % axis.block != 0
    if axis.kind is AxisKind.LOOP and offsets and extent.free_symbols <= set(offsets):
        return sympy.Mod(extent.xreplace(offsets), axis.block) != 0
    return True


def is_chunked(axis: Axis) -> bool:
    """A whole dimension looped over in chunks: its begin is the chunk loop's variable."""
    return axis.kind is AxisKind.WHOLE and not (isinstance(axis.begin, sympy.Integer) and axis.begin == 0)


def schedule_row_passes(ir: KernelIR) -> KernelIR:
    """A row looped in chunks: which nodes run in which pass over the row (ir/rolling.py)."""
    if ir.row_loop is None:
        return ir
    try:
        items = schedule(ir.body, {ir.row_loop.axis})
    except NotLoopable as reason:
        raise exc.ConfigError(
            f"reduction_loops[{ir.launch_index}] asks to process a whole row in chunks, but {reason}",
            hint=f"set reduction_loops[{ir.launch_index}] to None (the row in one block)") from None
    return ir.replace(row_schedule=tuple(items))


@dataclasses.dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[KernelIR], KernelIR]
    why: str


PIPELINE: tuple[Pass, ...] = (
    Pass("settle_row_loop", settle_row_loop,
         "first: whether the row is chunked changes its block, which the masks depend on"),
    Pass("fold_scales_out_of_extrema", fold_scales_out_of_extrema,
         "before peeling, so both copies of a loop get it: one multiply per row, not per element"),
    Pass("peel_tails", peel_tails, "before the masks: the whole tiles' loop then provably needs none"),
    Pass("decide_masks", decide_masks, "after every block is final; backends read `needs_mask`"),
    Pass("schedule_row_passes", schedule_row_passes, "last: it records nodes, which a later pass would rebuild"),
)


def run_passes(ir: KernelIR, log: bool = False) -> KernelIR:
    """Apply `PIPELINE` in order, verifying the IR after tracing and after each pass that changed
    it (ir/verify.py: microseconds against a compile's milliseconds); with `log`, print it too."""
    if log:
        print(f"[tessera] IR of {ir.name} after tracing:\n{ir}", file=sys.stderr)
    verify(ir)
    for step in PIPELINE:
        result = step.run(ir)
        if result is not ir:
            if log:
                print(f"[tessera] IR of {ir.name} after {step.name}:\n{result}", file=sys.stderr)
            verify(result, after=step.name)
        ir = result
    return ir


def _axes(ir: KernelIR) -> Iterator[Axis]:
    """Every axis of the IR, each once, in a deterministic order."""
    seen: dict[Axis, None] = {}
    for axis in (*ir.launch_axes, *ir.whole_axes):
        seen.setdefault(axis)
    for node in walk(ir.body):
        for axis in _node_axes(node):
            seen.setdefault(axis)
    seen.pop(UNIT, None)
    return iter(seen)


def _node_axes(node: Node) -> Iterator[Axis]:
    yield from node.shape
    for carried in node.params.get("carried", ()):
        yield from carried.shape
    for value in node.params.values():
        yield from _param_axes(value)


def _param_axes(value: Any) -> Iterator[Axis]:
    if isinstance(value, Axis):
        yield value
    elif isinstance(value, LoopDim) and value.axis is not None:
        yield value.axis
    elif isinstance(value, tuple):
        for item in value:
            yield from _param_axes(item)
    elif isinstance(value, DimAccess) and value.axis is not None:
        yield value.axis
