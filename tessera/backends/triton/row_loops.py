"""Triton code for a body whose whole row is processed in chunks (`Config.reduction_loops`).

`ir/rolling.py` splits the body into top-level nodes and chunk passes (the `schedule_row_passes`
pass records them in `KernelIR.row_schedule`); here each pass becomes

    acc_v5 = tl.full([R, C], float('-inf'), tl.float32)   # one per reduction the pass feeds
    for chunk_r0 in tl.range(0, n, C):
        idx_r0 = chunk_r0 + tl.arange(0, C); mask_r0 = idx_r0 < n
        ...row nodes, named v3_p0 ...
        acc_v5 = tl.maximum(acc_v5, tl.where(mask_r0[None, :], v3_p0, float('-inf')))
    v5 = tl.max(acc_v5, axis=1)

Accumulators keep the chunk's lanes and are reduced once after the loop, so each iteration
is elementwise work. Row nodes get a per-pass suffix: a value computed again in a later pass
is a fresh variable there, not something Triton must carry between loops.
"""
from __future__ import annotations

import torch

from tessera.backends.triton.emitter import TRITON_DTYPES, Emitter
from tessera.backends.triton.loop_stages import loop_stages
from tessera.backends.triton.lowering import emit_block, reduction_identity, reduction_text, working_dtype
from tessera.backends.triton.printer import print_expr
from tessera.ir.graph import UNIT, Axis, Block, Node
from tessera.ir.rolling import ChunkPass

# per-lane combines; NaN propagates as in torch's amax/amin (Triton's default maximum drops it)
_COMBINE = {"sum": "{acc} + {value}", "amax": "tl.maximum({acc}, {value}, propagate_nan=tl.PropagateNan.ALL)",
            "amin": "tl.minimum({acc}, {value}, propagate_nan=tl.PropagateNan.ALL)"}


def emit_row_schedule(emitter: Emitter, items: tuple[Node | ChunkPass, ...], row: Axis) -> None:
    """Emit a body scheduled into top-level nodes and chunk passes over `row` (ir/passes.py)."""
    for item in items:
        if isinstance(item, Node):
            emit_block(emitter, Block((item,)))
        else:
            _emit_pass(emitter, item, row)


def _emit_pass(emitter: Emitter, chunk: ChunkPass, row: Axis) -> None:
    if chunk.online is not None:
        _emit_online_pass(emitter, chunk, row)
        return
    accumulators = {}
    for reduction in chunk.reductions:
        source = reduction.inputs[0]
        dtype = working_dtype(reduction.params["accumulate"])
        name = f"acc_{reduction.name}"
        accumulators[reduction] = (name, dtype)
        identity = reduction_identity(reduction.params["fn"], source.dtype)
        emitter.line(f"{name} = tl.full({emitter.block_shape(source.shape)}, {identity}, {TRITON_DTYPES[dtype]})")
    _open_chunk_loop(emitter, chunk, row, {r.params["axis"] for r in chunk.reductions})
    for reduction, (name, dtype) in accumulators.items():
        emitter.line(f"{name} = {_accumulate(emitter, reduction, name, dtype)}")
    _close_chunk_loop(emitter, chunk)
    for reduction, (name, dtype) in accumulators.items():
        text = reduction_text(emitter, reduction.params["fn"], name, dtype, reduction.params["dim"],
                              reduction.params["keepdim"], reduction.inputs[0].shape)
        text = emitter.cast(text, dtype, reduction.dtype)
        emitter.line(f"{emitter.name_of(reduction)} = {text}")


def _open_chunk_loop(emitter: Emitter, chunk: ChunkPass, row: Axis, reduced: set[Axis]) -> None:
    """The chunk loop's header and the pass's row nodes (per-pass names), indented into it."""
    stages = loop_stages(chunk.nodes, emitter.config)
    options = f", num_stages={stages}" if stages else ""
    emitter.line(f"for {row.begin} in tl.range(0, {print_expr(row.end)}, {row.block}{options}):")
    emitter.indent += 1
    if row in {axis for node in chunk.nodes for axis in node.shape} | reduced:
        emitter.define_axis(row)
    emitter.last_comment = None  # each pass names its lines again
    for node in chunk.nodes:  # a value computed again in this pass is a fresh variable here
        emitter.renamed[node] = f"{node.name}_p{chunk.index}"
    emit_block(emitter, Block(chunk.nodes))


def _close_chunk_loop(emitter: Emitter, chunk: ChunkPass) -> None:
    for node in chunk.nodes:
        del emitter.renamed[node]
    emitter.indent -= 1


def _emit_online_pass(emitter: Emitter, chunk: ChunkPass, row: Axis) -> None:
    """amax(x) and sum(exp(x - amax(x))) in one loop (ir/rolling.py's OnlineSum).

    Per chunk: the chunk's max over the row (one cross-lane reduction), the row's running max
    `M`, and per lane a sum `S` of `exp(x - M)`, rescaled by `exp(M_old - M)` (one exp per row)
    when the max grows. Per element that is a max, a subtraction, an exp and a fused multiply-add:
    a per-lane running max (an exp of min - max and a select per element, to rescale lane by lane)
    cost 22 instructions an element on the H100, enough to make a 4096 x 32000 cross-entropy
    bound by instruction issue instead of memory. While the max is -inf the sums are taken
    against 0 (exp(-inf - 0) adds nothing); a row of only -inf gives NaN as torch's
    exp(-inf - -inf) does; +inf and NaN give NaN (tests/test_reduction_loops.py)."""
    online = chunk.online
    value, maximum, total = online.value, online.maximum, online.total
    dtype = TRITON_DTYPES[value.dtype]
    dim = maximum.params["dim"]
    shape = emitter.block_shape(value.shape)
    kept_shape = emitter.block_shape(tuple(UNIT if index == dim else axis for index, axis in enumerate(value.shape)))
    running, summed = f"acc_{maximum.name}", f"acc_{total.name}"
    emitter.line(f"{running} = tl.full({kept_shape}, -float('inf'), {dtype})")
    emitter.line(f"{summed} = tl.full({shape}, 0, {dtype})")
    axis = maximum.params["axis"]
    _open_chunk_loop(emitter, chunk, row, {axis})
    lanes = emitter.name_of(value)
    if axis.needs_mask:  # lanes past the row's end hold -inf: they add nothing
        emitter.line(f"{lanes}_online = tl.where({emitter.axis_mask(axis, value.shape)}, {lanes}, -float('inf'))")
        lanes = f"{lanes}_online"
    chunk_max = reduction_text(emitter, "amax", lanes, value.dtype, dim, True, value.shape)
    emitter.line(f"{running}_new = tl.maximum({running}, {chunk_max}, propagate_nan=tl.PropagateNan.ALL)")
    emitter.line(f"{running}_ref = tl.where({running}_new == -float('inf'), 0.0, {running}_new)")
    term = _exp_term(emitter, value.dtype, f"{lanes} - {running}_ref")
    emitter.line(f"{summed} = {summed} * tl.exp({running} - {running}_ref) + {term}")
    emitter.line(f"{running} = {running}_new")
    _close_chunk_loop(emitter, chunk)
    text = reduction_text(emitter, "amax", running, value.dtype, dim, maximum.params["keepdim"], value.shape)
    emitter.line(f"{emitter.name_of(maximum)} = {emitter.cast(text, value.dtype, maximum.dtype)}")
    keepdim = total.params["keepdim"]
    text = reduction_text(emitter, "sum", summed, value.dtype, dim, keepdim, value.shape)
    # a row whose every element is -inf: each term is exp(-inf - -inf), NaN in torch
    row_max = reduction_text(emitter, "amax", running, value.dtype, dim, keepdim, value.shape)
    text = f"tl.where(({row_max} == -float('inf')) & ({print_expr(row.end)} > 0), float('nan'), {text})"
    emitter.line(f"{emitter.name_of(total)} = {emitter.cast(text, value.dtype, total.dtype)}")


def _exp_term(emitter: Emitter, dtype: torch.dtype, argument: str) -> str:
    """`exp(argument)` for the terms of an online sum. Compiled float32: `ex2.approx.ftz` of the scaled
    argument (libdevice's fast_expf): a result it flushes to zero is below 2**-126, and each row's
    sum holds a term of 1 (its max), so the flush changes no sum; tl.exp's non-flushing ex2 costs
    three more instructions an element. The interpreter has no libdevice."""
    if emitter.interpret or dtype != torch.float32:
        return f"tl.exp({argument})"
    return f"libdevice.fast_expf({argument})"


def _accumulate(emitter: Emitter, reduction: Node, accumulator: str, dtype: torch.dtype) -> str:
    source = reduction.inputs[0]
    fn = reduction.params["fn"]
    value = emitter.cast(emitter.name_of(source), source.dtype, dtype)
    axis = reduction.params["axis"]
    if axis.needs_mask:  # lanes past the row's end must not count
        value = f"tl.where({emitter.axis_mask(axis, source.shape)}, {value}, {reduction_identity(fn, source.dtype)})"
    return _COMBINE[fn].format(acc=accumulator, value=value)
