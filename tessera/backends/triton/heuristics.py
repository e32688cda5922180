"""The Triton backend's first Config for a call, from the problem alone: extents, dtypes, op mix.

This is what `autotune_effort="none"` runs and where every search starts, so it encodes what is
known to work with Triton on current GPUs (H100) for the three kernel families Tessera sees most:

- dot kernels (matmul, bmm, attention): 128-wide output tiles, 64-deep K/key loops, 3 stages;
  batch-like launch dims that do not feed the dot get block 1 (one program per batch index).
- row reductions (softmax, norms): whole rows of up to ~4K elements per program, 8 warps for
  wide rows; rows too wide for registers stream in chunks; loops over rows or chunks are
  pipelined 3 stages deep.
- a grid over groups whose inner tile loop programs may share (grouped GEMM, ir/loop_split.py):
  that loop's tiles as output tiles, shared by one program per SM across all groups
  (`pid_type='persistent_interleaved'`) or, for many groups, by `split_programs` programs in all.
- elementwise: ~8 KB of each tensor per program (4096 bf16 / 2048 fp32 elements), the contiguous
  (last) dim widest.

>>> facts = KernelFacts(tunables=(TunableDim(0, 8192, 1, "launch"), TunableDim(1, 8192, 1, "launch")),
...                     dtypes=(torch.bfloat16,))
>>> heuristic_config(config_space(facts))   # doctest: +SKIP
Config(block_sizes=[4, 1024], num_warps=8, num_stages=1, ...)
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from tessera.backends.config_space import Axis, ConfigSpace, KernelFacts
from tessera.config import MAX_BLOCK_SIZE, Config, default_block_size
from tessera.ir.tunables import TunableDim

ELEMENTWISE_BYTES_PER_PROGRAM = 8192
ROW_ELEMENTS_PER_PROGRAM = 4096
MAX_INNER_BLOCK = 1024       # widest contiguous block of an elementwise tile
DOT_OUTPUT_BLOCK = 128
DOT_REDUCTION_BLOCK = 64
NARROW_DOT_BLOCK = 64        # output blocks of a GEMM with fewer 128 x 128 tiles than SMs (_shape_plain_product)
WIDE_DOT_BLOCK = 256         # the N block of a GEMM with a wave of 128 x 256 tiles
DEEP_REDUCTION_BLOCK = 128   # the K block of those narrow or 8-bit products
WIDE_MIN_WAVE = 0.9          # 128 x 256 tiles pay from 90% of a wave (M1024 N4096: 128 programs, 0.92x -> 0.98x)
CHUNK_ROWS_ABOVE = 16384     # rows longer than this stream through a reduction loop
REDUCTION_CHUNK = 4096
BLOCKED_ROW_PROGRAMS = 256   # programs of a kernel that blocks rows with hl.register_block_size
PERSISTENT_SPLIT_MAX_PROGRAMS = 1024  # more grid points: each program visiting all costs more than it balances
# smaller calls share a split loop flat: each persistent program reads every group's bounds in turn
# (dependent loads, ~1 us a group), which a few output tiles cannot amortize. H100, Helion's
# grouped_gemm (4 groups, 640 x 256 x 128, largest tensor 164K elements): persistent 14.5 us, flat
# split 5.7 us (benchmarks/results/helion_examples/session11_parity.md); MoE G8 (67M): persistent
# 0.40 ms, flat 0.58 ms (benchmarks/results/issue17)
PERSISTENT_SPLIT_MIN_ELEMENTS = 1 << 20
SPLIT_PROGRAMS = 1024        # programs sharing an inner loop's tiles: ~8 per H100 SM, so a large group keeps the GPU busy
# the elements one tile value of a kernel without products may hold: Helion's jagged_mean broadcast
# [tile_b, tile_k, tile_m] blocks of [32, 64, 64] (131072 fp32 per value, several values live):
# ptxas spilled for over 4 minutes (H100 runs timed out at 205 s; offline sm_90 compile > 280 s)
REGISTER_TILE_ELEMENTS = 8192
MIN_REGISTERED_BLOCK = 16    # an hl.register_block_size block of 1 runs a program per row: slow
H100_SHARED_MEMORY = 232448  # bytes a program may use on an H100 (the opt-in limit, 227 KB)
WIDE_ROWS = 256              # output rows of an attention-shaped program (_widen_accumulated_rows)
WIDE_ROWS_MIN_WIDTH = 128    # the accumulated whole row (head dim) from which they pay
WIDE_ROWS_MIN_WAVES = 4      # programs per SM the grid must still have with them
SHARED_SM_INNER_BLOCK = 32   # the inner block of a dk/dv-shaped launch that lets two programs share an SM
H100_MULTIPROCESSORS = 132
SPLIT_K_CHOICES = (1, 2, 3, 4, 6, 8)  # the split_k values the heuristic weighs (space.py offers more)
SPLIT_K_COST = 0.02          # a slice's partials written and added, in units of a whole K loop's time
SPLIT_K_MIN_STEPS = 4        # K loop iterations a slice keeps at least (fewer: the pipeline never fills)
# loads of a row loop issued this many iterations ahead, less one (backends/triton/loop_stages.py);
# on the H100 (benchmarks/results/issue17/reductions.md) 3 beat 2 by 10% for layer_norm's and
# rms_norm's backward (16384 x 4096 bf16) and cross-entropy's chunk loop (4096 x 32000); 4 was no faster
LOOP_STAGES = 3
# chunk loops of whole rows (`reduction_loops`): cross-entropy 4096 x 32000 with the per-chunk max
# (results/issue17/reductions_session10.md) ran 2-3% faster at 4 than at 3, in two device calls
CHUNK_STAGES = 4
MAX_ACCUMULATOR_PER_THREAD = 128  # fp32 accumulator elements per thread of a dot kernel; more spills
SHARED_MEMORY_MARGIN = 0.9   # the estimate leaves out Triton's own scratch (barriers, layout conversions)
INTERPRETER_BLOCK = 128      # interpret mode: the widest block _widen_for_interpreter gives a dim
# interpret mode: the most elements of a program's tile it widens to. The interpreter pays
# ~0.1-0.2 ms of Python per op and ~1-2 ns per element, so tiles pay up to a few 100K elements:
# Helion's grpo_loss (8 x 128 tokens x 4000 vocabulary) at 16384 ran 256 programs, 5-8 s a call;
# at 2**18, 16 programs and ~1 s (Triton's own limit on a block is 2**20)
INTERPRETER_ELEMENTS = 1 << 18


def heuristic_config(space: ConfigSpace) -> Config:
    """The heuristic point of `space` (every axis set), snapped onto the space's choices."""
    facts = space.facts
    if facts.launches:
        wanted = _merge_launches([_wanted(launch) for launch in facts.launches], facts.launches)
    else:
        wanted = _wanted(facts)
    if not facts.interpreted:  # the interpreter has no shared memory
        _fit_pipelined_loads(facts, wanted, {axis.name: axis.default for axis in space.axes})
    values = {axis.name: _snap(axis, wanted.get(axis.name, axis.default)) for axis in space.axes}
    return space.to_config(values)


def _merge_launches(wanted: list[dict[str, Any]], launches: tuple[KernelFacts, ...]) -> dict[str, Any]:
    """One Config from each launch's heuristic: each launch's own block sizes and reduction
    loops; the most warps and stages any launch wants (the Config has one of each); the other
    keys from the first launch that uses a dot (the heavy one), else the first."""
    lead = next((w for w, f in zip(wanted, launches) if f.uses_dot), wanted[0])
    merged = {key: value for key, value in lead.items() if not key.startswith(("block_sizes[", "reduction_loops["))}
    for launch_wanted, launch in zip(wanted, launches):
        merged.update({f"block_sizes[{d.index}]": launch_wanted[f"block_sizes[{d.index}]"] for d in launch.tunables
                       if f"block_sizes[{d.index}]" in launch_wanted})
        merged.update({key: value for key, value in launch_wanted.items()
                       if key.startswith("reduction_loops[") and value is not None})
    for key in ("num_warps", "num_stages"):
        merged[key] = max(w.get(key, 1) for w in wanted)
    return merged


def _wanted(facts: KernelFacts) -> dict[str, Any]:
    """The heuristic's wishes for one launch (or a call taken as one), before snapping."""
    if facts.uses_dot:
        wanted = _dot_kernel(facts)
    elif facts.uses_reduction or any(d.role != "launch" for d in facts.tunables):
        wanted = _row_kernel(facts)
    else:
        wanted = _elementwise_kernel(facts)
    if any(d.role == "split" for d in facts.tunables):
        wanted["split_programs"] = SPLIT_PROGRAMS
        # measured on the H100 (benchmarks/results/issue17/moe_session12.md): 128 x 256 persistent
        # tiles grouped by 8 rows run a 64-expert MoE in 2.5 ms (3.5 flat) but slow 8 and 16
        # experts and the seed shapes by 3-32%; the tuner has the axis
        wanted["l2_grouping"] = 1
        if facts.programs <= PERSISTENT_SPLIT_MAX_PROGRAMS and facts.largest_numel >= PERSISTENT_SPLIT_MIN_ELEMENTS:
            if facts.uses_dot:
                _widen_split_product(facts, wanted)
            else:
                # one program per SM dealing out the tiles of all grid points: balanced however skewed
                wanted["pid_type"] = "persistent_interleaved"
    _fit_block_elements(facts, wanted)
    if facts.interpreted:
        _widen_for_interpreter(facts, wanted)
    return wanted


def _widen_split_product(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """A large grouped GEMM (a product over a split loop's tiles, ir/loop_split.py): 128 x 256 output
    tiles shared flat by SPLIT_PROGRAMS programs, what quick tuning picks for the seed's 4 groups.
    H100, bf16, one run (benchmarks/results/issue17/moe_session12.md), seed / MoE G8 / G16 / G64:
    this 0.149 / 0.413 / 0.923 / 3.46 ms; 128 x 128 persistent_interleaved (the heuristic before)
    0.186 / 0.668 / 1.63 / 3.67; 128 x 128 flat 0.181 / 0.572 / 1.33 / 4.11; 128 x 256
    persistent_interleaved with l2_grouping=8 0.153 / 0.544 / 1.21 / 2.54 (best only at 64 groups)."""
    splits = sorted((d for d in facts.tunables if d.role == "split"), key=lambda d: d.index)
    if len(splits) == 2 and wanted.get(f"block_sizes[{splits[1].index}]") == DOT_OUTPUT_BLOCK:
        wanted[f"block_sizes[{splits[1].index}]"] = WIDE_DOT_BLOCK


def _widen_for_interpreter(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Wider blocks for Triton's CPU interpreter, whose cost is Python per op (0.1-1 ms), nearly
    whatever a block's size: each block grows towards its extent (up to INTERPRETER_BLOCK) while a
    program's tile stays within INTERPRETER_ELEMENTS. Inner loops first (fewer iterations, same
    programs), then launch dims (fewer programs). Helion's kl_div at V=4096: 16-wide blocks ran
    4096 loop iterations, 128-wide ones 64. Never narrower than the GPU's choice."""
    keys = {d.index: f"block_sizes[{d.index}]" for d in facts.tunables if f"block_sizes[{d.index}]" in wanted}
    whole = _row_whole_elements(facts)
    # a split loop's block is not widened, but its tiles meet the others' in one program (Helion's
    # grpo_loss backward: 8 x 128 rows widened beside a 4096-wide split block exceeded Triton's 2**20)
    widened = [d for d in facts.tunables if d.index in keys and d.role != "split"]
    for dim in sorted(widened, key=lambda d: d.role in _OUTPUT_ROLES):
        key = keys[dim.index]
        others = math.prod(wanted[k] for k in keys.values() if k != key) * whole
        target = min(INTERPRETER_BLOCK, _ceil_pow2(dim.extent))
        while target > wanted[key] and others * target > INTERPRETER_ELEMENTS:
            target //= 2
        wanted[key] = max(wanted[key], target)


_OUTPUT_ROLES = ("launch", "split")  # a split loop's tiles are output tiles too (ir/loop_split.py)


def _dot_kernel(facts: KernelFacts) -> dict[str, Any]:
    wanted: dict[str, Any] = {}
    for dim in facts.tunables:
        if dim.role in ("launch", "split"):  # a split loop's tiles are output tiles too
            block = DOT_OUTPUT_BLOCK if dim.min_block >= 16 else 1
        else:
            block = DOT_REDUCTION_BLOCK
        wanted[f"block_sizes[{dim.index}]"] = block
    wanted["num_stages"] = 3
    wanted["l2_grouping"] = 8
    _widen_accumulated_rows(facts, wanted)
    _share_multiprocessor(facts, wanted)
    _shape_plain_product(facts, wanted)
    _fit_shared_memory(facts, wanted)
    _split_small_grid(facts, wanted)
    output_blocks = math.prod(wanted[f"block_sizes[{d.index}]"] for d in facts.tunables if d.role in _OUTPUT_ROLES)
    # a whole row held per program (attention's head_dim: the width of its second product's
    # accumulator) is part of each program's output tile
    output_blocks *= max(facts.whole_row, 1)
    wanted["num_warps"] = 8 if output_blocks >= DOT_OUTPUT_BLOCK * DOT_OUTPUT_BLOCK else 4
    _batch_dims_slowest(facts, wanted)
    return wanted


def _batch_dims_slowest(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Dims of one index per program (bmm's batch, `block_size=[1, None, None]`) vary slowest
    across program ids, so programs running together share their operands in L2 and the
    l2_grouping groups the output tiles of one matrix: on the H100, bmm B32 1024^3 0.64x -> 0.84x
    `torch.bmm`, B8 2048^3 0.68x -> 0.89x (CUDA-graph timing). A batch dim whose block is a
    Config slot (Helion's `hl.tile([batch, m])`) counts once this heuristic has set it to 1.

    With one tiled dim left (attention: query or key blocks, then the batch-head index), L2
    grouping pairs that dim with the batch dim: programs running together spread over 8 rows of
    tiles of ~16 heads, each head's operands streamed again for every group of 8 blocks. For
    loops recomputing two score tiles per iteration (attention's backward) grouping is off: on
    the H100 (benchmarks/results/issue17/attention_session12.md, B4 H32 S4096) its key-block
    launch read L2 at 88% hits instead of 77%, and the backward ran 0-6% faster at D128, 2-3% at
    D64, 10% at D64 causal. The forward (one score tile) keeps it: 3-6% slower without at D128."""
    ungrouped = False
    for launch, ndim in enumerate(facts.launch_dims):
        fixed = facts.unit_dims[launch] if launch < len(facts.unit_dims) else ()
        units = sorted({*fixed, *(_one_lane_slots(facts, wanted) if launch == 0 else ())})
        if units and len(units) < ndim:
            wanted[f"loop_orders[{launch}]"] = [d for d in range(ndim) if d not in units] + units
        ungrouped = ungrouped or bool(ndim >= 2 and units and ndim - len(units) < 2)
    if ungrouped and facts.score_tiles >= 2:
        wanted["l2_grouping"] = 1


def _one_lane_slots(facts: KernelFacts, wanted: dict[str, Any]) -> list[int]:
    """Grid dims of a call's one tile loop whose block slot is wanted at 1 (a dim no product
    tiles), when every dim of the loop is a slot: they are then numbered in the loop's order."""
    launch = sorted((d for d in facts.tunables if d.role == "launch"), key=lambda d: d.index)
    if len(facts.launch_dims) != 1 or len(launch) != facts.launch_dims[0]:
        return []
    return [position for position, dim in enumerate(launch) if wanted.get(f"block_sizes[{dim.index}]") == 1]


def _widen_accumulated_rows(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Attention's shape: an inner loop carries one accumulator of a whole row of >= 128 (the head
    dim) per output row. Twice the rows (256: two warpgroups of 128) keep the tensor cores fuller:
    on the H100 at B4 H32 S4096 D128 bf16 the quick tuner's pick, 2.38 -> 2.12 ms (causal 1.26 ->
    1.22). Not with two such accumulators (attention's dk and dv: their registers would spill),
    nor with two score tiles per iteration beside the accumulator (its dq loop: scores and dP; at
    256 rows 255 registers and 168 bytes of spills on sm_90, 256 -> 128 rows ran the backward
    7.44 -> 6.73 ms on the H100), nor when the grid would drop under WIDE_ROWS_MIN_WAVES
    programs per SM."""
    output = [d for d in facts.tunables if d.role == "launch" and d.min_block >= 16]
    if not (WIDE_ROWS_MIN_WIDTH <= facts.whole_row and 0 < facts.carried_row <= facts.whole_row):
        return
    if facts.score_tiles > 1:
        return
    if len(output) != 1 or any(d.role == "split" for d in facts.tunables):
        return
    launch = [d for d in facts.tunables if d.role == "launch"]
    wide = 1
    for dim in launch:
        block = WIDE_ROWS if dim is output[0] else int(wanted.get(f"block_sizes[{dim.index}]", 1))
        wide *= -(-max(dim.extent, 1) // block)
    if _programs_per_tile(facts, launch) * wide >= WIDE_ROWS_MIN_WAVES * _multiprocessors(facts.on_gpu):
        wanted[f"block_sizes[{output[0].index}]"] = WIDE_ROWS


def _share_multiprocessor(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Attention's dk/dv shape (two accumulated whole rows, two score tiles per iteration) with
    accumulators of at most 128 x 128 fp32 per program (head dim 64): a SHARED_SM_INNER_BLOCK
    inner block, so that two programs fit on an SM and one's softmax runs beside the other's
    products. On sm_90 at D64 (128 keys): 192 registers at 64 queries a step, 127 (and 58 KB
    of shared memory) at 32; on the H100 the backward ran 4.09 -> 3.71 ms (SDPA 3.03). At D128
    the accumulators alone take 128 registers: 32 gave 212 registers, one program per SM, and
    ran slower (7.46 against 7.18 ms)."""
    if facts.carried_row <= facts.whole_row or facts.score_tiles < 2:
        return
    output = [d for d in facts.tunables if d.role == "launch" and d.min_block >= 16]
    inner = [d for d in facts.tunables if d.role not in _OUTPUT_ROLES]
    if len(output) != 1 or len(inner) != 1:
        return
    rows = int(wanted[f"block_sizes[{output[0].index}]"])
    if rows * facts.carried_row <= DOT_OUTPUT_BLOCK * DOT_OUTPUT_BLOCK:
        key = f"block_sizes[{inner[0].index}]"
        wanted[key] = min(int(wanted[key]), max(SHARED_SM_INNER_BLOCK, inner[0].min_block))


def _shape_plain_product(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Output tiles of a plain GEMM (two output dims, one K loop, no whole row) by how many
    programs the grid has. Measured on the H100, bf16 (benchmarks/gemm_sweep.py):

    - fewer 128 x 128 tiles than SMs (M of 1-64, or half a wave at M of 128): the product streams the K x N
      operand, so it needs programs more than tile reuse: 64-wide N blocks, M blocks of at most
      64, 128-deep K, 4 stages (M=1 N=K=4096: 0.25x -> 0.84x cuBLAS; M=16 K=14336: 0.48 -> 0.88x);
    - one row of 128-row blocks (M of 65-128) over half a wave of 128 x 128 tiles: 64-wide N
      blocks, 4 warps, 4 stages, so the K x N operand streams through twice the SMs (session 11's
      probe, results/issue17/gemm_session11.md: M128 N11008 K4096 bf16 0.0419 -> 0.0382 ms, fp8
      0.0256 -> 0.0230 ms; torch 0.0343 / 0.0205 ms);
    - 90% of a wave of 128 x 256 tiles with 16- or 8-bit inputs: 256-wide N blocks
      (4096^3: 0.83x -> 0.98x cuBLAS);
    - 8-bit inputs: 128-deep K whatever the tiles (a 64-deep K step moves 64-byte rows; fp8 e4m3
      M128 N11008 K4096 with 128 x 128 x 64 tiles ran at 0.56x `torch._scaled_mm`), 256-deep
      with narrow 64 x 64 tiles (fp8 M128 N4096 K11008: 0.0299 -> 0.0216 ms, torch 0.0191 ms;
      at M16, 16 x 64 tiles, 256 was slower: 0.0087 -> 0.0093 ms)."""
    dims = _plain_product_dims(facts)
    if dims is None:
        return
    m, n, k = dims

    def programs(block_m: int, block_n: int) -> int:
        return _product_programs(facts, m, n, block_m, block_n)

    multiprocessors = _multiprocessors(facts.on_gpu)
    itemsize = min([dtype.itemsize for dtype in facts.dtypes if dtype.is_floating_point] or [4])
    square = programs(DOT_OUTPUT_BLOCK, DOT_OUTPUT_BLOCK)
    deep = DEEP_REDUCTION_BLOCK
    # M above 64 keeps 128-row blocks unless the grid is under half a wave: narrower ones re-read
    # the K x N operand once more per extra M block (M128 N14336: 0.72x narrow, 0.93x square)
    if square < multiprocessors and (m.extent <= NARROW_DOT_BLOCK or 2 * square < multiprocessors):
        wanted[f"block_sizes[{m.index}]"] = _clamp_pow2(m.extent, 16, NARROW_DOT_BLOCK)
        wanted[f"block_sizes[{n.index}]"] = NARROW_DOT_BLOCK
        if itemsize == 1 and wanted[f"block_sizes[{m.index}]"] == NARROW_DOT_BLOCK:
            deep *= 2
        wanted[f"block_sizes[{k.index}]"] = deep
        wanted["num_stages"] = 4
    elif square < multiprocessors and _ceil_pow2(m.extent) <= DOT_OUTPUT_BLOCK:
        wanted[f"block_sizes[{n.index}]"] = NARROW_DOT_BLOCK
        wanted["num_stages"] = 4
    elif (itemsize <= 2 and m.extent > NARROW_DOT_BLOCK
          and programs(DOT_OUTPUT_BLOCK, WIDE_DOT_BLOCK) >= WIDE_MIN_WAVE * multiprocessors):
        wanted[f"block_sizes[{n.index}]"] = WIDE_DOT_BLOCK
    if itemsize == 1:
        wanted[f"block_sizes[{k.index}]"] = max(deep, int(wanted.get(f"block_sizes[{k.index}]", 0)))


def _plain_product_dims(facts: KernelFacts) -> tuple[TunableDim, TunableDim, TunableDim] | None:
    """(M, N, K) of a plain GEMM: two output dims that feed a dot, one K loop, no whole row."""
    output = [d for d in facts.tunables if d.role == "launch" and d.min_block >= 16]
    inner = [d for d in facts.tunables if d.role not in _OUTPUT_ROLES]
    if facts.whole_row or len(output) != 2 or len(inner) != 1 or any(d.role == "split" for d in facts.tunables):
        return None
    return output[0], output[1], inner[0]


def _product_programs(facts: KernelFacts, m: TunableDim, n: TunableDim, block_m: int, block_n: int) -> int:
    """Programs of a plain GEMM's grid under these output blocks: extents rounded up as the size
    buckets are (call_keys.size_bucket), so every call of a bucket gets one Config, whichever of
    its sizes came first; a batch of one matrix per program multiplies every grid."""
    batch = max(_programs_per_tile(facts, [m, n]), 1)
    return batch * -(-_ceil_pow2(m.extent) // block_m) * -(-_ceil_pow2(n.extent) // block_n)


def _split_small_grid(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """split_k for a plain GEMM with narrow output blocks (`_shape_plain_product`: fewer 128 x 128
    tiles than SMs) whose grid is under a wave (ir/split_reduction.py): the S of SPLIT_K_CHOICES
    that minimises the waves of one program per SM a K slice takes, ceil(programs * S / SMs) / S,
    plus SPLIT_K_COST per slice (the partials written and added), with at least
    SPLIT_K_MIN_STEPS iterations of the K loop per slice. Measured on the H100, bf16, kernel time
    (benchmarks/results/issue17/split_k.md): M of 1 and 16 at N=4096 (64 programs) take S=2, K=4096
    0.0163 -> 0.0117 ms (M1), 0.0132 -> 0.0095 ms (M16), K=14336 0.047 -> 0.043 ms; grids of
    128 x 128 tiles (M128 N11008: 86 programs) only lose (S=2: 0.042 -> 0.062 ms), so never."""
    dims = _plain_product_dims(facts)
    if dims is None or not facts.split_reduction or facts.interpreted:  # the interpreter pays per program
        return
    m, n, k = dims
    blocks = [int(wanted.get(f"block_sizes[{d.index}]", 1)) for d in dims]
    if blocks[1] > NARROW_DOT_BLOCK:
        return
    programs = _product_programs(facts, m, n, blocks[0], blocks[1])
    multiprocessors = _multiprocessors(facts.on_gpu)
    steps = -(-_ceil_pow2(k.extent) // blocks[2])

    def cost(splits: int) -> float:
        return -(-programs * splits // multiprocessors) / splits + SPLIT_K_COST * splits
    allowed = [s for s in SPLIT_K_CHOICES if s == 1 or steps >= SPLIT_K_MIN_STEPS * s]
    wanted["split_k"] = min(allowed, key=lambda s: (cost(s), s))


def _programs_per_tile(facts: KernelFacts, dims: list[TunableDim]) -> int:
    """Programs of the planned grid (`facts.programs`, default blocks) per tile of `dims`: the grid
    dims outside them, such as fixed-block batch dims (0 when the plan counted no programs)."""
    planned = math.prod(-(-max(d.extent, 1) // default_block_size(d.min_block)) for d in dims)
    return facts.programs // max(planned, 1)


def _multiprocessors(on_gpu: bool) -> int:
    """The current GPU's SM count, else the H100's."""
    if on_gpu and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    return H100_MULTIPROCESSORS


def _fit_block_elements(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Halve the widest block until a program's tile (its blocks times its whole dims) fits
    Triton's limit on the elements of one block (a whole row of 1024 and 2048 rows is 2M), and
    without products, what registers hold (`REGISTER_TILE_ELEMENTS`; a whole row alone may exceed it)."""
    keys = [f"block_sizes[{d.index}]" for d in facts.tunables if f"block_sizes[{d.index}]" in wanted]
    outer = [f"block_sizes[{d.index}]" for d in facts.tunables if d.role in _OUTPUT_ROLES]

    def largest() -> int:
        if not facts.uses_dot:
            # inner loops over one extent are passes over a row (_row_kernel): one held at a time
            passes: dict[int, int] = {}
            tile = 1
            for dim in facts.tunables:
                key = f"block_sizes[{dim.index}]"
                if key not in wanted:
                    continue
                if dim.role in _OUTPUT_ROLES or dim.role == "register":
                    tile *= wanted[key]
                else:
                    passes[dim.extent] = max(wanted[key], passes.get(dim.extent, 1))
            return tile * math.prod(passes.values()) * _row_whole_elements(facts)
        # a dot kernel's tensors are output tile x whole dims (attention's accumulator) or output
        # tile x inner blocks (its scores), never all three at once
        tile = math.prod(wanted[k] for k in keys if k in outer)
        inner = math.prod(wanted[k] for k in keys if k not in outer)
        tiled_outputs = [wanted[k] for k in keys if k in outer and wanted[k] > 1]
        if len(tiled_outputs) >= 2 and facts.whole_elements == 1:
            # a GEMM's tensors are M x N, M x K and K x N: never all three blocks at once
            return max(tile, max(tiled_outputs) * inner)
        return tile * max(facts.whole_elements, inner)
    # (only where blocks multiply: a whole row held by one block of rows keeps its measured size)
    broadcast = not facts.uses_dot and sum(1 for k in keys if wanted[k] > 1) >= 2
    limit = REGISTER_TILE_ELEMENTS if broadcast else MAX_BLOCK_SIZE
    while keys and largest() > limit:
        widest = max(keys, key=lambda k: wanted[k])
        if wanted[widest] == 1:
            return
        wanted[widest] //= 2


def _row_whole_elements(facts: KernelFacts) -> int:
    """The elements a program of a kernel without products holds along whole dims (`x[tile, :]`).
    With hl.register_block_size dims they were measured at the planning blocks (`hl.zeros([tile,
    block])`), so the blocks alone stand for them: counted, Helion's long_sum (`hl.zeros([tile_m,
    block_n])`, a 32768 planning block) had its chunks cut to 32 elements."""
    if any(d.registered or d.role == "register" for d in facts.tunables):
        return 1
    return max(facts.whole_elements, 1)


def shared_memory_limit(on_gpu: bool) -> int:
    """Bytes of shared memory one program may use: the current GPU's opt-in limit, else the H100's
    (so CPU runs pick the Configs an H100 would)."""
    if on_gpu and torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(getattr(properties, "shared_memory_per_block_optin", H100_SHARED_MEMORY))
    return H100_SHARED_MEMORY


def dot_shared_memory(facts: KernelFacts, wanted: dict[str, Any]) -> tuple[int, int]:
    """Estimated shared memory (bytes) of a dot kernel under the `wanted` blocks: the larger of
    the software pipeline (num_stages copies of both operand tiles, M x K and K x N) and, when the
    kernel reduces its dot result (matmul + layernorm), the fp32 M x N tile that Triton converts
    through shared memory. M is the first dot-feeding launch block; N the other ones times the
    whole dims (`y[tile_k, :]`); K the inner loop blocks. Returns (pipeline, epilogue) bytes:
    the two are live at different times, so the larger one is what must fit."""
    def block(dim: TunableDim) -> int:
        return int(wanted.get(f"block_sizes[{dim.index}]", 1))
    output = [block(d) for d in facts.tunables if d.role in _OUTPUT_ROLES and d.min_block >= 16]
    m = output[0] if output else 1
    n = math.prod(output[1:]) * facts.whole_elements
    k = math.prod(block(d) for d in facts.tunables if d.role not in _OUTPUT_ROLES)
    floats = [dtype.itemsize for dtype in facts.dtypes if dtype.is_floating_point] or [4]
    pipeline = int(wanted.get("num_stages", 1)) * (m * k + k * n) * min(floats)
    epilogue = m * n * 4 if facts.uses_reduction else 0
    return pipeline, epilogue


def pipelined_load_bytes(facts: KernelFacts, blocks: Sequence[int], stages: int) -> int:
    """Shared memory (bytes) of the software-pipelined loops under these block_sizes: Triton keeps
    `stages` copies of each tile a product loop loads per iteration (checked against the compiler
    for sm_90, tests/test_shared_memory.py: Helion's gdn_fwd_h at block 64 and 3 stages, three
    256 x 64 bf16 loads, 288 KB estimated, 290 KB compiled); the loops run one at a time."""
    if stages < 2:
        return 0
    return max((stages * sum(tile.size_under(blocks) for tile in loop) for loop in facts.pipelined_loads), default=0)


def config_fits_shared_memory(facts: KernelFacts, config: Config) -> bool:
    """Whether `config`'s pipelined loops fit the device's shared memory (the tuner skips those that
    do not: they fail to compile or run out of resources at launch)."""
    blocks = list(config.get("block_sizes") or [])
    stages = int(config.get("num_stages", 1) or 1)
    return pipelined_load_bytes(facts, blocks, stages) <= shared_memory_limit(facts.on_gpu)


def config_fits_device(facts: KernelFacts, config: Config) -> bool:
    """Whether the tuner should try `config` at all: its pipelined loops fit the shared memory,
    and a dot kernel's fp32 accumulator fits its threads' registers (`accumulator_fits_registers`)."""
    return config_fits_shared_memory(facts, config) and accumulator_fits_registers(facts, config)


def accumulator_fits_registers(facts: KernelFacts, config: Config) -> bool:
    """Whether a one-launch dot kernel's fp32 output tile (its output blocks times the whole row
    it accumulates, as `_dot_kernel` counts it) leaves each thread at most
    MAX_ACCUMULATOR_PER_THREAD elements. More spills: on the H100 the grouped GEMM's 128 x 256
    tile with 4 warps (256 per thread) ran 1.34 ms against 0.17 ms with 8 warps and took 11.9 s
    to compile, the longest wait of its quick tuning."""
    if not facts.uses_dot or facts.launches:
        return True
    blocks = list(config.get("block_sizes") or [])
    output = math.prod(blocks[d.index] for d in facts.tunables if d.role in _OUTPUT_ROLES and d.index < len(blocks))
    threads = 32 * int(config.get("num_warps") or 4)
    return output * max(facts.whole_row, 1) <= MAX_ACCUMULATOR_PER_THREAD * threads


def _fit_pipelined_loads(facts: KernelFacts, wanted: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Shrink `wanted` until its pipelined loops fit the device's shared memory (with margin):
    fewer stages down to 2, then the widest tunable block the loops load (down to 16 or its
    smallest legal block), then one stage (no pipelining)."""
    if not facts.pipelined_loads:
        return
    limit = int(shared_memory_limit(facts.on_gpu) * SHARED_MEMORY_MARGIN)
    slots = len(facts.tunables) and max(d.index for d in facts.tunables) + 1
    floors = {d.index: max(16 if d.min_block >= 16 else 1, d.min_block) for d in facts.tunables}
    loaded = {slot for loop in facts.pipelined_loads for tile in loop for slot in tile.slots}

    def blocks() -> list[int]:
        return [int(wanted.get(f"block_sizes[{i}]", defaults.get(f"block_sizes[{i}]", 1)) or 1) for i in range(slots)]
    while pipelined_load_bytes(facts, blocks(), int(wanted.get("num_stages", 1))) > limit:
        stages = int(wanted.get("num_stages", 1))
        shrinkable = [i for i in loaded if i in floors and blocks()[i] > floors[i]]
        if stages > 2:
            wanted["num_stages"] = stages - 1
        elif shrinkable:
            widest = max(shrinkable, key=lambda i: (blocks()[i], -i))
            wanted[f"block_sizes[{widest}]"] = blocks()[widest] // 2
        else:
            wanted["num_stages"] = 1
            return


def _fit_shared_memory(facts: KernelFacts, wanted: dict[str, Any]) -> None:
    """Shrink `wanted` until `dot_shared_memory` fits the device (an H100 has 227 KB a program):
    the epilogue tile by a smaller M block; the pipeline by fewer stages, then a shallower K loop,
    then a smaller M block; no block below 16."""
    limit = int(shared_memory_limit(facts.on_gpu) * SHARED_MEMORY_MARGIN)
    output = [d for d in facts.tunables if d.role in _OUTPUT_ROLES and d.min_block >= 16]
    inner = [d for d in facts.tunables if d.role not in _OUTPUT_ROLES]
    while max(dot_shared_memory(facts, wanted)) > limit:
        pipeline, epilogue = dot_shared_memory(facts, wanted)
        m_shrinks = output and wanted[f"block_sizes[{output[0].index}]"] > max(16, output[0].min_block)
        if epilogue > limit and m_shrinks:
            wanted[f"block_sizes[{output[0].index}]"] //= 2
        elif wanted["num_stages"] > 2:
            wanted["num_stages"] -= 1
        elif inner and wanted[f"block_sizes[{inner[0].index}]"] > max(16, inner[0].min_block):
            wanted[f"block_sizes[{inner[0].index}]"] //= 2
        elif m_shrinks:
            wanted[f"block_sizes[{output[0].index}]"] //= 2
        else:
            return  # nothing left to shrink: the kernel's whole dims alone are too wide


def _row_kernel(facts: KernelFacts) -> dict[str, Any]:
    """Rows of `row` elements reduced per program: few whole rows, or chunks of one long row."""
    registered = _blocked_row_dims(facts)
    if registered:
        inner = [d for d in facts.tunables if d not in registered and d.role not in ("launch", "register")]
        return _blocked_rows_kernel(facts, registered, inner)
    launch = [d for d in facts.tunables if d.role == "launch"]
    inner = [d for d in facts.tunables if d.role not in ("launch", "register")]
    row = _row_length(facts, launch, inner)
    if row > CHUNK_ROWS_ABOVE and any(facts.reduction_extents):
        row = REDUCTION_CHUNK  # the row streams through a chunk loop: a chunk is what registers hold
    wanted: dict[str, Any] = {}
    passes: dict[int, int] = {}  # extent -> block: loops over one extent are passes over the row
    for dim in inner:
        block = min(_ceil_pow2(dim.extent), ROW_ELEMENTS_PER_PROGRAM)
        wanted[f"block_sizes[{dim.index}]"] = block
        passes[dim.extent] = max(block, passes.get(dim.extent, 1))
    # a program holds one pass's chunk at a time: two passes over a row (Helion's welford, layer
    # norms: statistics, then the output) are not a 2-D tile. Multiplied, 1024 x 1024 left one row
    # per program on 16 warps (welford 3x slower than torch.compile on the H100)
    inner_block = math.prod(passes.values())
    elements = inner_block if inner else row  # held by one program at a time
    rows = max(1, _floor_pow2(ROW_ELEMENTS_PER_PROGRAM // elements))
    for dim in launch:
        rows_here = min(rows, _ceil_pow2(dim.extent))
        wanted[f"block_sizes[{dim.index}]"] = rows_here
        elements *= rows_here
        rows = 1  # only the first launch dim packs several rows
    wanted["num_warps"] = _clamp_pow2(elements // 512, 1, 16)
    chunked = any(extent > CHUNK_ROWS_ABOVE for extent in facts.reduction_extents)
    wanted["num_stages"] = CHUNK_STAGES if chunked else LOOP_STAGES if inner else 1
    for position, extent in enumerate(facts.reduction_extents):
        wanted[f"reduction_loops[{position}]"] = REDUCTION_CHUNK if extent > CHUNK_ROWS_ABOVE else None
    return wanted


def _blocked_row_dims(facts: KernelFacts) -> list[TunableDim]:
    """The hl.register_block_size entries that block rows for the host (seed 003: a block of rows
    per program, partial results per block, an inner loop of the kernel's own over its rows); []
    for a kernel that merely names its block sizes (Helion's jsd: `hl.tile(BT, block_size=bm)`
    over rows and `hl.tile(V, block_size=bn)` over a row's chunks), which is a row kernel like any
    other: treated as blocked rows it got 32 x 256 tiles on one warp, 25x slower than
    torch.compile on the H100. Entries no loop tiles count as blocked rows, as before."""
    untiled = [d for d in facts.tunables if d.role == "register"]
    launch = [d for d in facts.tunables if d.registered and d.role == "launch"]
    inner = [d for d in facts.tunables if d.role not in ("launch", "register")]
    if untiled:
        return untiled + launch
    if launch and inner and not any(d.registered for d in inner):
        return launch
    return []


def _blocked_rows_kernel(facts: KernelFacts, registered: list[TunableDim], inner: list[TunableDim]) -> dict[str, Any]:
    """The seed-003 shape: an `hl.register_block_size` block of rows per program (partial sums
    per block), an inner loop over its rows. Enough programs to fill the GPU, and inner tiles of
    about ROW_ELEMENTS_PER_PROGRAM elements of whole rows."""
    row = _row_length(facts, registered, inner)
    wanted: dict[str, Any] = {}
    inner_block = 1
    for dim in inner:
        block = max(1, min(_ceil_pow2(dim.extent), _floor_pow2(ROW_ELEMENTS_PER_PROGRAM // row)))
        wanted[f"block_sizes[{dim.index}]"] = block
        inner_block *= block
    for dim in registered:
        per_program = _ceil_pow2(-(-max(dim.extent, 1) // BLOCKED_ROW_PROGRAMS))
        floor = min(MIN_REGISTERED_BLOCK, _ceil_pow2(max(dim.extent, 1)))
        wanted[f"block_sizes[{dim.index}]"] = max(per_program, inner_block, floor)
    wanted["num_warps"] = _clamp_pow2(inner_block * row // 512, 1, 16)
    wanted["num_stages"] = LOOP_STAGES
    return wanted


def _row_length(facts: KernelFacts, launch: list[TunableDim], inner: list[TunableDim]) -> int:
    if any(facts.reduction_extents):  # 0: a row that cannot be chunked, measured below instead
        return _ceil_pow2(max(facts.reduction_extents))
    rows = 1
    for dim in launch:
        rows *= max(dim.extent, 1)
    return _ceil_pow2(max(facts.largest_numel // rows, 1))


def _elementwise_kernel(facts: KernelFacts) -> dict[str, Any]:
    itemsize = min((dtype.itemsize for dtype in facts.dtypes if dtype.is_floating_point), default=4)
    # a program also holds its whole dims (`x[tile, :]`): those elements count against the budget
    budget = max(1, ELEMENTWISE_BYTES_PER_PROGRAM // itemsize // facts.whole_elements)
    wanted: dict[str, Any] = {}
    # the last tunable dim is the contiguous one in the usual row-major case: give it the width
    for position, dim in enumerate(sorted(facts.tunables, key=lambda d: -d.index)):
        cap = MAX_INNER_BLOCK if position == 0 and len(facts.tunables) > 1 else budget
        block = max(1, min(_ceil_pow2(dim.extent), cap, budget))
        wanted[f"block_sizes[{dim.index}]"] = block
        budget = max(1, budget // block)
    elements = ELEMENTWISE_BYTES_PER_PROGRAM // itemsize
    wanted["num_warps"] = _clamp_pow2(elements // 512, 4, 8)
    wanted["num_stages"] = 1
    return wanted


def _snap(axis: Axis, value: Any) -> Any:
    """The axis choice closest to `value` (block sizes: nearest power of two within bounds)."""
    if value in axis.choices:
        return value
    numbers = [c for c in axis.choices if isinstance(c, int)]
    if isinstance(value, int) and numbers:
        return min(numbers, key=lambda c: (abs(c - value), c))
    return axis.default


def _ceil_pow2(value: int) -> int:
    return 1 << max(int(value) - 1, 0).bit_length()


def _floor_pow2(value: int) -> int:
    return 1 << (max(int(value), 1).bit_length() - 1)


def _clamp_pow2(value: int, low: int, high: int) -> int:
    return min(max(_floor_pow2(max(value, 1)), low), high)


__all__ = ["accumulator_fits_registers", "config_fits_device", "config_fits_shared_memory", "heuristic_config",
           "pipelined_load_bytes"]
