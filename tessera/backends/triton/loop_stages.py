"""Software pipelining of device loops that hold no product: the `num_stages=` of their `tl.range`.

Triton 3.6 pipelines a loop's loads (copies into shared memory issued `num_stages - 1`
iterations ahead) by itself only when the loop feeds `tl.dot`; a loop without one is pipelined
only when its `tl.range` names `num_stages`. Without it every iteration of a row loop (layer
norm's backward over the rows of a block, a chunked row's passes) waits for its own loads: on
the H100 the sm_90 code of that loop had no asynchronous copies at all. So a loop whose body
loads memory, and has no product (Triton pipelines those already), no nested loop (Triton
pipelines innermost loops) and no tensor both read and written inside it (a load issued ahead
would miss the previous iteration's store), gets the Config's `num_stages`, cut down so that
its buffers (`stages - 1` copies of each iteration's loaded tiles) fit PIPELINE_SHARED_BYTES.
User documentation: docs/row_loops.md.

>>> loop_stages(loop_body_nodes, Config(num_stages=3))   # doctest: +SKIP
3
"""
from __future__ import annotations

import math
from typing import Iterable

from tessera.config import Config
from tessera.ir.graph import Block, Node, Op, walk

PIPELINE_SHARED_BYTES = 64 * 1024
"""Shared memory one loop's pipeline may take: a quarter of an H100 SM's, so two or three
programs still fit on one SM beside their reduction scratch."""


def loop_stages(nodes: Iterable[Node], config: Config) -> int | None:
    """The `num_stages` to name on the `tl.range` of a loop whose body is `nodes`, or None to
    leave the loop to Triton (no loads, a product or a nested loop inside, a tensor both read
    and written, fewer than two stages asked for or affordable)."""
    wanted = int(config.get("num_stages", 1) or 1)
    if wanted < 2:
        return None
    body = list(walk(Block(tuple(nodes))))
    if any(node.op in (Op.DOT, Op.LOOP) for node in body):
        return None
    loads = [node for node in body if node.op is Op.LOAD]
    written = {node.params["tensor"].name for node in body if node.op is Op.STORE}
    if not loads or any(node.params["tensor"].name in written for node in loads):
        return None
    loaded = sum(math.prod(axis.block for axis in node.shape) * node.params["tensor"].dtype.itemsize
                 for node in loads)
    affordable = 1 + PIPELINE_SHARED_BYTES // max(loaded, 1)
    stages = min(wanted, affordable)
    return stages if stages >= 2 else None


__all__ = ["PIPELINE_SHARED_BYTES", "loop_stages"]
