"""Triton code for a body whose whole row is processed in chunks (`Config.reduction_loops`).

`ir/rolling.py` splits the body into top-level nodes and chunk passes; here each pass becomes

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

from typing import Any

import torch

from tessera import exc
from tessera.backends.triton.printer import print_expr
from tessera.ir.graph import Axis, Block, Node
from tessera.ir.rolling import ChunkPass, NotLoopable, schedule
from tessera.language.reduce import REDUCTION_FUNCTIONS, reduction_identity, sum_accumulator_dtype

_COMBINE = {"sum": "{acc} + {value}", "amax": "tl.maximum({acc}, {value})", "amin": "tl.minimum({acc}, {value})"}


def emit_looped_row(emitter: Any, root: Block, row: set[Axis], launch_index: int) -> None:
    """Emit `root` with the axes in `row` (one whole row and its aliases) looped in chunks."""
    from tessera.backends.triton.codegen import TRITON_DTYPES, emit_block
    try:
        items = schedule(root, row)
    except NotLoopable as reason:
        raise exc.ConfigError(
            f"reduction_loops[{launch_index}] asks to process a whole row in chunks, but {reason}",
            hint=f"set reduction_loops[{launch_index}] to None (the row in one block)") from None
    for item in items:
        if isinstance(item, Node):
            emit_block(emitter, Block([item]))
        else:
            _emit_pass(emitter, item, row, TRITON_DTYPES, emit_block)


def _emit_pass(emitter: Any, chunk: ChunkPass, row: set[Axis], dtypes: dict[torch.dtype, str], emit_block: Any) -> None:
    lead = min(row, key=lambda axis: int(axis.name[1:]))  # the loop's first whole dim; aliases share its chunk
    accumulators = {}
    for reduction in chunk.reductions:
        source = reduction.inputs[0]
        dtype = sum_accumulator_dtype(reduction) or source.dtype
        name = f"acc_{reduction.name}"
        accumulators[reduction] = (name, dtype)
        identity = reduction_identity(reduction.params["fn"], source.dtype)
        emitter.line(f"{name} = tl.full({emitter.block_shape(source.shape)}, {identity}, {dtypes[dtype]})")
    emitter.line(f"for {lead.begin} in tl.range(0, {print_expr(lead.end)}, {lead.block}):")
    emitter.indent += 1
    used = {axis for node in chunk.nodes for axis in node.shape} | {r.params["axis"] for r in chunk.reductions}
    for axis in sorted(row & used, key=lambda a: a.name):
        emitter.define_axis(axis)
    emitter._last_comment = None  # each pass names its lines again
    original = {node: node.name for node in chunk.nodes}
    try:
        for node in chunk.nodes:
            node.name = f"{node.name}_p{chunk.index}"
        emit_block(emitter, Block(list(chunk.nodes)))
        for reduction, (name, dtype) in accumulators.items():
            emitter.line(f"{name} = {_accumulate(emitter, reduction, name, dtype)}")
    finally:
        for node, name in original.items():
            node.name = name
    emitter.indent -= 1
    for reduction, (name, dtype) in accumulators.items():
        function = REDUCTION_FUNCTIONS[reduction.params["fn"]]
        keep = ", keep_dims=True" if reduction.params["keepdim"] else ""
        text = f"{function}({name}, axis={reduction.params['dim']}{keep})"
        if reduction.params["fn"] != "sum":
            text = emitter.cast(text, dtype, reduction.dtype)
        emitter.line(f"{reduction.name} = {text}")


def _accumulate(emitter: Any, reduction: Node, accumulator: str, dtype: torch.dtype) -> str:
    source = reduction.inputs[0]
    fn = reduction.params["fn"]
    value = emitter.cast(source.name, source.dtype, dtype)
    axis = reduction.params["axis"]
    if axis.needs_mask:  # lanes past the row's end must not count
        value = f"tl.where({emitter.axis_mask(axis, source.shape)}, {value}, {reduction_identity(fn, source.dtype)})"
    return _COMBINE[fn].format(acc=accumulator, value=value)
