"""Lowering of sorts of tile values (Op.SORT: torch.sort, argsort and topk): 64-bit keys holding an
order-preserving int32 of each value above its lane number, sorted with tl.sort / tl.topk. A 64-bit
value does not fit above its lane: it is first replaced by its rank (emit_wide_sort)."""
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
    if source.dtype.itemsize == 8:
        emit_wide_sort(emitter, node)
        return
    descending, k = node.params["descending"], node.params["k"]
    name = emitter.name_of(node)
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
    lanes = _lane_numbers(emitter, node)
    low = f"((1073741823 - {lanes}).to(tl.int64) << 1)" if descending else f"({lanes}.to(tl.int64) << 1)"
    if floating:
        low = f"({low} | {name}_negative_zero)"
    emitter.line(f"{name}_keys = ({bits}.to(tl.int64) << 32) | {low}")
    lanes_kept = None if k is None else 1 << (k - 1).bit_length()  # tl.topk keeps a power of two: the
    if k is None:                                                   # result's axis of k masks the rest
        emitter.line(f"{name}_keys = tl.sort({name}_keys, descending={bool(descending)})")
    elif k == 1:  # the extreme key (tl.topk of one lane reduces a single row to a scalar it cannot reshape)
        emitter.line(f"{name}_keys = tl.{'max' if descending else 'min'}({name}_keys, axis={len(source.shape) - 1}, keep_dims=True)")
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


def _lane_numbers(emitter: Emitter, node: Node) -> str:
    source, axis = node.inputs[0], node.params["axis"]
    rank = len(source.shape)
    return (f"tl.broadcast_to({Emitter.placed(f'tl.arange(0, {axis.block})', rank - 1, rank)}, "
            f"{emitter.block_shape(source.shape)})")


def emit_wide_sort(emitter: Emitter, node: Node) -> None:
    """Sort 64-bit values (int64, float64) with indices: each value becomes an order-preserving int64
    (a float64's bits with the negatives' magnitude bits flipped, NaN above inf, -0.0 equal to 0.0);
    those sort alone, and a binary search of the sorted row (log2(block) tl.gather steps) gives each
    lane its rank, the number of lanes strictly before it. Ranks fit 32 bits, so the 32-bit key of
    emit_sort (rank above lane) orders ties by lane; the values are gathered back by index, which
    keeps a -0.0. Ranks stay in order whatever the padding lanes hold; padding takes rank `block`."""
    source, axis = node.inputs[0], node.params["axis"]
    descending, k = node.params["descending"], node.params["k"]
    name, rank = emitter.name_of(node), len(source.shape)
    value, key, last = emitter.name_of(source), f"{name}_order", rank - 1
    if source.dtype.is_floating_point:
        emitter.line(f"{key} = {value}.to(tl.int64, bitcast=True)")
        emitter.line(f"{key} = tl.where({value} != {value}, 0x7FF8000000000000, "
                     f"tl.where({key} < 0, {key} ^ 0x7FFFFFFFFFFFFFFF, {key}))")
        emitter.line(f"{key} = tl.where({value} == 0, 0, {key})")
    else:
        emitter.line(f"{key} = {value}.to(tl.int64)")
    emitter.line(f"{name}_sorted = tl.sort({key}, dim={last}, descending={bool(descending)})")
    before = ">" if descending else "<"
    emitter.line(f"{name}_rank = tl.zeros({emitter.block_shape(source.shape)}, dtype=tl.int32)")
    step = axis.block // 2
    while step:  # lanes strictly before: a prefix of the sorted row, found by halving
        emitter.line(f"{name}_probe = tl.gather({name}_sorted, {name}_rank + {step - 1}, {last})")
        emitter.line(f"{name}_rank = tl.where({name}_probe {before} {key}, {name}_rank + {step}, {name}_rank)")
        step //= 2
    if axis.needs_mask:
        emitter.line(f"{name}_rank = tl.where({emitter.axis_mask(axis, source.shape)}, {name}_rank, {axis.block})")
    keys = f"{name}_keys"
    emitter.line(f"{keys} = ({name}_rank.to(tl.int64) << 32) | {_lane_numbers(emitter, node)}.to(tl.int64)")
    emitter.line(f"{keys} = tl.sort({keys}, dim={last})" if k is None else f"{keys} = ~tl.topk(~{keys}, {k}, dim={last})")
    emitter.line(f"{name}_1 = {keys} & 0xFFFFFFFF")
    emitter.line(f"{name}_0 = tl.gather({value}, {name}_1.to(tl.int32), {last})")
