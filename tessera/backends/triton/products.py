"""Lowering of products (Op.DOT) to `tl.dot`, whatever their block shapes.

`tl.dot` takes 2-D or 3-D blocks of at least 16 (32 in K for 8-bit operands). A product below
that is padded with zeros to 16 and its result split back (`_padded_dot`); a product over a whole
K too big for shared memory runs as a loop over K chunks (`_chunked_dot`, planned in
chunked_dots.py); a batched product of one matrix per program is multiplied in 2-D, where it
gets the tensor-core path (`squeezed_product`).

>>> emit_dot(emitter, product_node, emit_block)     # writes `v7 = tl.dot(v3, v5, acc=v6, ...)`  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Callable

import torch

from tessera.backends.triton.emitter import FP8_DTYPES, TRITON_DTYPES, Emitter
from tessera.backends.triton.printer import print_expr
from tessera.ir.graph import Axis, Block, Node, Op

def emit_dot(emitter: Emitter, node: Node, emit_block: Callable[[Emitter, Block], None]) -> None:
    """`node` (Op.DOT) as tl.dot; `emit_block`: the lowering of a block (a chunked product's body)."""
    a, b, acc = node.inputs
    common = torch.promote_types(a.dtype, b.dtype)
    if emitter.interpret and common in (torch.float16, torch.bfloat16):
        common = torch.float32  # triton 3.6's interpreter gets 16-bit tl.dot wrong; fp32 is exact here
    accumulate = node.params["accumulate"]
    if node.params.get("small") or node.params["k_axis"].block < min_dot_depth(common):
        _padded_dot(emitter, node, common)
        return
    if node in emitter.chunked_dots:
        _chunked_dot(emitter, node, common, emit_block)
        return
    left, right = _batched(k_operand(emitter, a, common, node), a, node), _batched(k_operand(emitter, b, common, node), b, node)
    accumulator = emitter.operand(acc, accumulate) if acc is not None else None
    # A batched (3-D) tl.dot whose batch blocks are all 1 is a plain matrix product: as 2-D it
    # gets the tensor-core path (wgmma on Hopper), which 3-D dots do not.
    squeeze = squeezed_product(node)
    if squeeze:
        left = f"tl.reshape({left}, {emitter.block_shape(a.shape[-2:])})"
        right = f"tl.reshape({right}, {emitter.block_shape(b.shape[-2:])})"
        if acc in emitter.flat:
            accumulator = emitter.flat[acc]
        elif accumulator is not None:
            accumulator = f"tl.reshape({accumulator}, {emitter.block_shape(node.shape[-2:])})"
    precision = _dot_options(emitter, common, node.params["k_axis"].block)
    if accumulator is not None:
        text = f"tl.dot({left}, {right}, acc={accumulator}{precision}, out_dtype={TRITON_DTYPES[accumulate]})"
    else:
        text = f"tl.dot({left}, {right}{precision}, out_dtype={TRITON_DTYPES[accumulate]})"
    if node in emitter.flat:
        emitter.line(f"{emitter.flat[node]} = {text}")
        text = emitter.flat[node]
    emitter.line(f"{emitter.name_of(node)} = {f'tl.reshape({text}, {emitter.block_shape(node.shape)})' if squeeze else text}")
    if node.dtype != accumulate:
        emitter.line(f"{emitter.name_of(node)} = {emitter.cast(emitter.name_of(node), accumulate, node.dtype)}")


def k_operand(emitter: Emitter, operand: Node, common: torch.dtype, node: Node, axis: Axis | None = None) -> str:
    """An operand of the product `node` over K (`axis`, or the product's k_axis) in dtype `common`.
    Its lanes past K's extent hold what the ops before the product made of the padding (`1 / x`:
    inf, a sort's padding key: NaN), and 0 * inf is NaN in every sum of the product: they are
    zeroed, unless the operand is a load (or a cast of one), which reads 0 there already."""
    text = emitter.operand(operand, common)
    axis = axis if axis is not None else node.params["k_axis"]
    if axis.needs_mask and axis in operand.shape and not _zero_padded(operand):
        text = f"tl.where({emitter.axis_mask(axis, operand.shape)}, {text}, 0)"
    return text


def _zero_padded(operand: Node) -> bool:
    while operand.op is Op.CAST and isinstance(operand.inputs[0], Node):
        operand = operand.inputs[0]
    return operand.op is Op.LOAD


MIN_DOT_BLOCK = 16  # tl.dot's smallest M, N and K
FP8_PROMOTION_STEP = 128  # K elements an fp8 product sums in the tensor cores before adding into float32


def _dot_options(emitter: Emitter, common: torch.dtype, depth: int) -> str:
    """tl.dot's keyword arguments for operands of dtype `common` and a K block of `depth` (text
    starting with ', ' or empty).

    float32: the kernel's `dot_precision`. 8-bit floats: Triton's sm_90 default lets Hopper's fp8
    tensor cores add the whole K in their reduced-precision accumulator (torch._scaled_mm's
    `use_fast_accum=True`): at 4096^3 the H100 gave 23701 elements outside 1e-2 of torch's answer
    (max error 1.74, Helion's fp8_gemm failed at 1024^3). torch's default, eager and interpret mode
    add in float32; here each 128-deep step (or the K block, if shorter) is added into float32:
    max error 0.151 there, as cuBLAS's precise mode, where every 32 gave 0.135 at 0.85x the speed
    (0 would make Triton convert the operands to fp16 for Ampere's mma). `fp8_fast_accum=True`
    (a kernel setting) keeps Triton's fast way."""
    if common == torch.float32:
        return f", input_precision='{emitter.dot_precision}'"
    if common in FP8_DTYPES and not emitter.interpret and not emitter.fp8_fast_accum:
        return f", max_num_imprecise_acc={min(FP8_PROMOTION_STEP, depth)}"
    return ""


def min_dot_depth(common: torch.dtype) -> int:
    """tl.dot's smallest K: 32 for 8-bit operands (Hopper's 8-bit products take K in steps of 32;
    Triton refuses int8 at K = 16), else 16."""
    return 2 * MIN_DOT_BLOCK if common.itemsize == 1 else MIN_DOT_BLOCK


def _chunked_dot(emitter: Emitter, node: Node, common: torch.dtype,
                 emit_block: Callable[[Emitter, Block], None]) -> None:
    """A product over a whole K too big for shared memory, as a loop over K (chunked_dots.py)."""
    plan = emitter.chunked_dots[node]
    chunk, acc = plan.chunk, node.inputs[2]
    name, accumulate = emitter.name_of(node), node.params["accumulate"]
    total = f"{name}_acc"
    emitter.line(f"{total} = tl.zeros({emitter.block_shape(node.shape)}, {TRITON_DTYPES[accumulate]})"
                 + (f" + {emitter.operand(acc, accumulate)}" if acc is not None else ""))
    emitter.line(f"for {chunk.begin} in tl.range(0, {print_expr(chunk.end)}, {chunk.block}):")
    emitter.indent += 1
    emitter.define_axis(chunk)
    for copy in plan.nodes:
        emitter.renamed[copy] = f"{copy.name}_{chunk.name}"
    emit_block(emitter, Block(plan.nodes))
    precision = _dot_options(emitter, common, chunk.block)
    left, right = (k_operand(emitter, operand, common, node, chunk) for operand in (plan.left, plan.right))
    emitter.line(f"{total} = tl.dot({left}, {right}, "
                 f"acc={total}{precision}, out_dtype={TRITON_DTYPES[accumulate]})")
    emitter.indent -= 1
    emitter.line(f"{name} = {emitter.cast(total, accumulate, node.dtype)}")


def _padded_dot(emitter: Emitter, node: Node, common: torch.dtype) -> None:
    """A product with a block below tl.dot's 16: each narrow operand dim is padded with zeros to 16
    (`tl.join` with zeros doubles a last dim, interleaved), the tl.dot runs at 16, and the padding
    is split off its result again. (A multiply-sum instead gave wrong sums on the H100.)"""
    a, b, acc = node.inputs
    name = emitter.name_of(node)
    accumulate = node.params["accumulate"]
    batch = [axis.block for axis in node.shape[:-2]]
    m, k, n = a.shape[-2].block, node.params["k_axis"].block, b.shape[-1].block

    def swap(text: str) -> str:  # the last two dims exchanged
        return f"tl.trans({text})" if not batch else f"tl.permute({text}, (0, 2, 1))"

    def pad(text: str, rows: int, width: int, suffix: str, target: int = MIN_DOT_BLOCK) -> str:
        """`text` ([*batch, rows, width]) with its last dim doubled until it is `target`: a new variable."""
        while width < target:
            emitter.line(f"{name}_{suffix} = tl.reshape(tl.join({text}, tl.zeros_like({text})), "
                         f"{[*batch, rows, 2 * width]})")
            text, width = f"{name}_{suffix}", 2 * width
        return text

    least_k = min_dot_depth(common)
    depth = max(k, least_k)
    left = pad(_batched(k_operand(emitter, a, common, node), a, node), m, k, "a", least_k)  # K padded
    if m < MIN_DOT_BLOCK:
        left = swap(pad(swap(left), depth, m, "at"))  # M padded
    right = _batched(k_operand(emitter, b, common, node), b, node)
    if k < least_k:
        right = swap(pad(swap(right), n, k, "bt", least_k))  # K padded
    right = pad(right, depth, n, "b")  # N padded
    precision = _dot_options(emitter, common, depth)
    emitter.line(f"{name} = tl.dot({left}, {right}{precision}, out_dtype={TRITON_DTYPES[accumulate]})")
    rows, width = max(m, MIN_DOT_BLOCK), max(n, MIN_DOT_BLOCK)
    while width > n:  # the padding's columns were interleaved: the first of each pair is kept
        width //= 2
        emitter.line(f"{name} = tl.split(tl.reshape({name}, {[*batch, rows, width, 2]}))[0]")
    if rows > m:
        emitter.line(f"{name} = {swap(name)}")
        while rows > m:
            rows //= 2
            emitter.line(f"{name} = tl.split(tl.reshape({name}, {[*batch, n, rows, 2]}))[0]")
        emitter.line(f"{name} = {swap(name)}")
    emitter.line(f"{name} = tl.reshape({name}, {emitter.block_shape(node.shape)})")
    if acc is not None:
        emitter.line(f"{name} = {emitter.operand(acc, accumulate)} + {name}")
    if node.dtype != accumulate:
        emitter.line(f"{name} = {emitter.cast(name, accumulate, node.dtype)}")


def _batched(text: str, operand: Node, node: Node) -> str:
    """An operand of a batched product whose batch dims are 1 where the product's are not
    (`x[t, :, :] @ w[None, :, :]`), broadcast to the product's batch: tl.dot does not broadcast."""
    batch = [axis.block for axis in node.shape[:-2]]
    if len(operand.shape) != len(node.shape) or [axis.block for axis in operand.shape[:-2]] == batch:
        return text
    return f"tl.broadcast_to({text}, {[*batch, operand.shape[-2].block, operand.shape[-1].block]})"


def squeezed_product(node: Node) -> bool:
    """A batched product of one matrix per program (`emit_dot` multiplies it in 2-D)."""
    return len(node.shape) > 2 and all(axis.block == 1 for axis in node.shape[:-2])
