"""The code of a K loop split over `split_k` programs per output tile (ir/split_reduction.py).

The grid has S = split_k programs per output tile (`split_id` in [0, S): program_ids.py's split
form, flat). Program s runs the iterations [s * per, (s + 1) * per) of the loop's n iterations,
per = ceil(n / S) (a slice may be empty: its partial is zeros), then writes its accumulators to a
float32 workspace, S consecutive programs' partials side by side. Each program then counts itself
in on its tile's counter; the one that arrives last adds the S partials in the order s = 0..S-1
(the same sum whoever arrives last: deterministic), resets the counter for the next launch, and
runs the code after the loop:

    split_steps = (((k) - (0) + (64) - 1) // (64))
    split_per = (((split_steps) + (4) - 1) // (4))
    for k1_0 in tl.range(0 + split_id * split_per * 64, tl.minimum(0 + (split_id + 1) * split_per * 64, k), 64):
        ...
    tl.store(split_partials + split_program * 8192 + split_offsets_0, v1)
    tl.debug_barrier()  # every thread's partial is written before the count says so
    split_arrived = tl.atomic_add(split_counters + split_tile, 1, sem='acq_rel', scope='gpu')
    if split_arrived == 3:
        ...
        v1 = (v1 + tl.load(...))   # partials 0..3 in order
        <the code after the loop>

The barrier then the one-thread release atomic publish the whole program's stores (the PTX model's
cumulativity); the last program's loads bypass L1 (`.cg`), so no stale line of its SM answers them.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from tessera.backends.base import ScratchBuffer
from tessera.backends.triton.printer import cdiv_text, print_expr
from tessera.ir.graph import LoopDim
from tessera.ir.split_reduction import SplitReduction

PARTIALS = "split_partials"
COUNTERS = "split_counters"
PARAMETERS = (PARTIALS, COUNTERS)


def partial_elements(plan: SplitReduction) -> int:
    """Workspace elements one program writes: every accumulator's block."""
    return sum(math.prod(axis.block for axis in value.shape) for value in plan.accumulators)


def scratch_buffers(plan: SplitReduction) -> tuple[ScratchBuffer, ScratchBuffer]:
    """The partial sums (float32, unwritten) and one arrival counter per program (zeroed: only
    the first program of each tile's S uses its own, and the last arrival resets it)."""
    return (ScratchBuffer(torch.float32, partial_elements(plan)), ScratchBuffer(torch.int32, 1, zeroed=True))


def slice_bounds(emitter: Any, dim: LoopDim, splits: int) -> tuple[str, str]:
    """Emit the slice arithmetic; the (begin, end) texts of this program's `tl.range`."""
    begin, end, step = print_expr(dim.begin), print_expr(dim.end), dim.step
    emitter.line(f"split_steps = {cdiv_text(f'({end}) - ({begin})', str(step))}")
    emitter.line(f"split_per = {cdiv_text('split_steps', str(splits))}")
    return (f"({begin}) + split_id * split_per * {step}",
            f"tl.minimum(({begin}) + (split_id + 1) * split_per * {step}, {end})")


def emit_partial_sums(emitter: Any, plan: SplitReduction, splits: int) -> None:
    """After the sliced loop: write this program's partials, count in, and open the last
    arrival's branch (the indent stays one deeper: the rest of the body runs there)."""
    per_program = partial_elements(plan)
    emitter.line(f"# split_k={splits}: partial sums to the workspace; the tile's last program adds them")
    emitter.line("split_program = tl.program_id(0).to(tl.int64)")
    emitter.line(f"split_tile = split_program // {splits}")
    placed = []
    offset = 0
    for number, value in enumerate(plan.accumulators):
        offsets = f"split_offsets_{number}"
        emitter.line(f"{offsets} = {offset} + {_block_offsets([axis.block for axis in value.shape])}")
        placed.append((value, offsets))
        emitter.line(f"tl.store({PARTIALS} + split_program * {per_program} + {offsets}, {emitter.name_of(value)})")
        offset += math.prod(axis.block for axis in value.shape)
    emitter.line("tl.debug_barrier()  # every thread's partial is written before the count says so")
    emitter.line(f"split_arrived = tl.atomic_add({COUNTERS} + split_tile, 1, sem='acq_rel', scope='gpu')")
    emitter.line(f"if split_arrived == {splits - 1}:")
    emitter.indent += 1
    emitter.line(f"tl.store({COUNTERS} + split_tile, 0)  # ready for the next launch")
    emitter.line(f"split_first = split_tile * {splits * per_program}")
    for value, offsets in placed:
        name = emitter.name_of(value)
        parts = [f"tl.load({PARTIALS} + split_first + {part * per_program} + {offsets}, cache_modifier='.cg')"
                 for part in range(splits)]
        emitter.line(f"{name} = {parts[0]}")
        for part in parts[1:]:  # in order of s: the same rounding whichever program arrived last
            emitter.line(f"{name} = {name} + {part}")


def _block_offsets(blocks: list[int]) -> str:
    """Row-major offsets of a block of these sizes, as a tensor of that shape ('0' for a scalar)."""
    if not blocks:
        return "0"
    terms = []
    stride = 1
    for position in range(len(blocks) - 1, -1, -1):
        index = f"tl.arange(0, {blocks[position]})"
        if len(blocks) > 1:
            index += "[" + ", ".join(":" if d == position else "None" for d in range(len(blocks))) + "]"
        terms.append(f"{index} * {stride}" if stride != 1 else index)
        stride *= blocks[position]
    return "(" + " + ".join(reversed(terms)) + ")"


__all__ = ["PARAMETERS", "emit_partial_sums", "partial_elements", "scratch_buffers", "slice_bounds"]
