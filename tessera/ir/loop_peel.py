"""Peel the masked last tile off a device loop whose body reduces over its tiles.

A loop `for tile_n in hl.tile(begin, end)` over an extent its block may not divide masks every
tile: loads, and, costlier, each reduction over the tile's lanes (`tl.where(mask, x, -inf)`
before a row max, `tl.where(mask, p, 0)` before a row sum: one select per element per tile, in
attention's inner loop beside its exp2). Only the last tile can be partial, so the loop is split:

    for k in tl.range(begin, begin + 64 * (max(end - begin, 0) // 64), 64):   # whole tiles, no masks
        ...
    for k in tl.range(<that end>, end, 64):                                  # at most one, masked
        ...

The second loop is a copy of the first (its nodes named `<name>_tail`) that carries on from the
first loop's results; uses after the loop read the copy's. The iterations run in the same order
as before, so results are bit for bit the same. Only loops with carried values and a reduction
over the loop's tile (or products that recompute a block over the tile and sum over it, as
attention's backward does), over an extent known only at run time, are peeled: elsewhere a mask
costs a predicate on a load, not a select per element, and a second copy of the body would only
cost compile time.

>>> peel_loop_tails(ir, lambda axis: axis.needs_mask)   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import sympy

from tessera.ir.graph import Axis, AxisKind, KernelIR, LoopDim, Node, Op, clone_node, rewrite_block, walk, walk_blocks, with_axes

TAIL_SUFFIX = "_tail"


def peel_loop_tails(ir: KernelIR, needs_mask: Callable[[Axis], bool]) -> KernelIR:
    """`ir` with each loop that `_peelable` accepts split into whole tiles and a masked tail loop."""
    if ir.row_loop is not None:  # a chunked row's passes are scheduled over the body's nodes as traced
        return ir
    # one loop at a time: a later loop may read an earlier one's results, which peeling redirects
    while (loop := next((node for node in walk(ir.body) if _peelable(node, needs_mask)), None)) is not None:
        whole_axis, whole, tail = _split(loop)
        redirect = {loop: whole, tail: tail}  # the tail reads the whole tiles' results: keep it as built
        redirect.update(zip(loop.params["carried"], tail.params["carried"]))
        redirect.update((placeholder, placeholder) for placeholder in tail.params["carried"])
        body = rewrite_block(ir.body, redirect, insert_after={loop: (tail,)})
        ir = with_axes(ir.replace(body=body), {loop.params["loops"][0].axis: whole_axis})
    return ir


def _peelable(node: Node, needs_mask: Callable[[Axis], bool]) -> bool:
    """An innermost one-dim tile loop with carried values, a tile that needs a mask and a
    reduction over it."""
    if node.op is not Op.LOOP or len(node.params["loops"]) != 1 or not node.params["carried"]:
        return False
    if "tail_of" in node.params:  # already peeled
        return False
    dim: LoopDim = node.params["loops"][0]
    axis = dim.axis
    if axis is None or axis.kind is not AxisKind.LOOP or dim.step != axis.block or not needs_mask(axis):
        return False
    if sympy.sympify(dim.end - dim.begin).is_Integer:
        # a static extent keeps one loop (static-shape kernels, which the TPU backend compiles, keep their code)
        return False
    if any(axis in placeholder.shape for placeholder in node.params["carried"]):
        return False
    inside = list(walk_blocks(node.blocks))
    if any(inner.op is Op.LOOP for inner in inside):
        return False
    return any(inner.op in (Op.REDUCE, Op.SCAN) and inner.params.get("axis") is axis for inner in inside) or \
        _recomputed_products(inside, axis)


def _recomputed_products(inside: list[Node], axis: Axis) -> bool:
    """Attention's backward: each tile's scores are recomputed by a product over the tile's lanes
    (`k q^T`: the tile is an output dim) and summed by another over them (`dS^T q`: the tile is
    K). Its masked loads then cost as much as the math around them (sm_90 SASS of the dk/dv loop:
    1840 instructions with the masks, 1304 without, and no register spills). A plain GEMM's K loop
    (the tile only ever a K) keeps one loop."""
    products = [inner for inner in inside if inner.op is Op.DOT]
    return any(p.params.get("k_axis") is axis for p in products) and any(axis in p.shape for p in products)


def _split(loop: Node) -> tuple[Axis, Node, Node]:
    """The whole tiles' axis (it replaces the loop's own everywhere after), their loop, and the
    tail loop, which starts from that loop's results."""
    dim: LoopDim = loop.params["loops"][0]
    axis = dim.axis
    whole_end = dim.begin + axis.block * sympy.floor(sympy.Max(dim.end - dim.begin, 0) / axis.block)
    # both keep the loop's range: random numbers are numbered over it, whatever loop draws them
    whole = dataclasses.replace(axis, end=whole_end)
    tail_axis = dataclasses.replace(axis, name=axis.name + TAIL_SUFFIX)
    placeholders = {placeholder: dataclasses.replace(placeholder, inputs=(placeholder,),
                                                     name=placeholder.name + TAIL_SUFFIX)
                    for placeholder in loop.params["carried"]}
    tail = clone_node(loop, {axis: tail_axis}, placeholders, TAIL_SUFFIX)
    params = dict(tail.params)
    params["loops"] = (dataclasses.replace(dim, begin=whole_end, axis=tail_axis),)
    first = dataclasses.replace(loop, params=type(loop.params)({**loop.params, "loops": (
        dataclasses.replace(dim, end=whole_end),)}))
    params["tail_of"] = first
    tail = dataclasses.replace(tail, inputs=tuple(loop.params["carried"]), params=type(loop.params)(params))
    return whole, first, tail


__all__ = ["TAIL_SUFFIX", "peel_loop_tails"]
