"""Lowering of sorts of tile values (Op.SORT: torch.sort, argsort and topk): 64-bit keys holding an
order-preserving int32 of each value above its lane number, sorted with tl.sort / tl.topk."""
from __future__ import annotations

import torch

from tessera.backends.triton.emitter import Emitter
from tessera.ir.graph import Node


def emit_sort(emitter: Emitter, node: Node) -> None:
    """Sort 64-bit keys: an order-preserving int32 of each value above its lane number (counted
    down for a descending sort), so ties keep their order and indices travel with the values;
    padding lanes sort last. `~` turns the smallest-k selection into tl.topk's largest-k. -0.0 and
    0.0 are one value to torch's sort (a tie, kept in lane order): both take the key of 0.0, and the
    lowest bit of the key remembers the sign of a -0.0 so the sorted value keeps it."""
    source, axis = node.inputs[0], node.params["axis"]
    descending, k = node.params["descending"], node.params["k"]
    name, rank = emitter.name_of(node), len(source.shape)
    bits = f"{name}_bits"
    floating = source.dtype.is_floating_point
    if floating:
        emitter.line(f"{name}_wide = {emitter.cast(emitter.name_of(source), source.dtype, torch.float32)}")
        emitter.line(f"{bits} = {name}_wide.to(tl.int32, bitcast=True)")
        emitter.line(f"{name}_negative_zero = ({bits} == -2147483648).to(tl.int64)")
        # every NaN as the positive quiet NaN: above inf, as torch sorts NaN (of either sign) last
        emitter.line(f"{bits} = tl.where({name}_wide != {name}_wide, 0x7FC00000, "
                     f"tl.where({bits} < 0, {bits} ^ 0x7FFFFFFF, {bits}))")
        emitter.line(f"{bits} = tl.where({name}_negative_zero != 0, 0, {bits})")
    else:
        emitter.line(f"{bits} = {emitter.name_of(source)}.to(tl.int32)")
    if axis.needs_mask:
        emitter.line(f"{bits} = tl.where({emitter.axis_mask(axis, source.shape)}, {bits}, "
                     f"{-2 ** 31 if descending else 2 ** 31 - 1})")
    lanes = f"tl.broadcast_to({Emitter.placed(f'tl.arange(0, {axis.block})', rank - 1, rank)}, {emitter.block_shape(source.shape)})"
    low = f"((1073741823 - {lanes}).to(tl.int64) << 1)" if descending else f"({lanes}.to(tl.int64) << 1)"
    if floating:
        low = f"({low} | {name}_negative_zero)"
    emitter.line(f"{name}_keys = ({bits}.to(tl.int64) << 32) | {low}")
    lanes_kept = None if k is None else 1 << (k - 1).bit_length()  # tl.topk keeps a power of two: the
    if k is None:                                                   # result's axis of k masks the rest
        emitter.line(f"{name}_keys = tl.sort({name}_keys, descending={bool(descending)})")
    elif k == 1:  # the extreme key (tl.topk of one lane reduces a single row to a scalar it cannot reshape)
        emitter.line(f"{name}_keys = tl.{'max' if descending else 'min'}({name}_keys, axis={rank - 1}, keep_dims=True)")
    elif descending:
        emitter.line(f"{name}_keys = tl.topk({name}_keys, {lanes_kept})")
    else:
        emitter.line(f"{name}_keys = ~tl.topk(~{name}_keys, {lanes_kept})")
    emitter.line(f"{bits} = ({name}_keys >> 32).to(tl.int32)")
    if floating:
        # a -0.0 comes back through its bits (Triton reads a -0.0 constant as +0.0)
        value = (f"tl.where(({name}_keys & 1) != 0, -2147483648, tl.where({bits} < 0, {bits} ^ 0x7FFFFFFF, {bits}))"
                 ".to(tl.float32, bitcast=True)")
        emitter.line(f"{name}_0 = {emitter.cast(value, torch.float32, source.dtype)}")
    else:
        emitter.line(f"{name}_0 = {emitter.cast(bits, torch.int32, source.dtype)}")
    position = f"(({name}_keys & 0xFFFFFFFF) >> 1)"
    emitter.line(f"{name}_1 = {f'(1073741823 - {position})' if descending else position}.to(tl.int64)")
