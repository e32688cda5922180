"""Matrix products on tiles: `hl.dot`, and the promotion rule shared with torch.mm & co."""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.primitive import Primitive
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer


def dot(a: Any, b: Any, acc: Any = None, out_dtype: torch.dtype | None = None) -> Any:
    """`a @ b` (2-D or batched 3-D) accumulated in fp32 (or `out_dtype`), plus `acc` if given.

    >>> acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)   # doctest: +SKIP
    """
    return dot_p.bind(a, b, acc, out_dtype=out_dtype)


def product_dtype(*operands: Any) -> torch.dtype:
    """Result dtype of a product over mixed dtypes: PyTorch's promotion of the operands."""
    dtype = operands[0].dtype
    for operand in operands[1:]:
        dtype = torch.promote_types(dtype, operand.dtype)
    return dtype


def exact_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` computed in fp32 (fp64 for fp64 inputs, int64 for ints): the eager oracle's product.

    CPU lacks some low-precision and mixed-dtype kernels, and a compiled kernel accumulates in
    fp32 anyway, so eager mode upcasts instead of calling the low-precision kernel.
    """
    if a.dtype == torch.float64 or b.dtype == torch.float64:
        wide = torch.float64
    elif a.is_floating_point() or b.is_floating_point():
        wide = torch.float32
    else:
        wide = torch.int64
    return torch.matmul(a.to(wide), b.to(wide))


dot_p = Primitive("dot")


@dot_p.def_eager
def _dot_eager(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor | None, *,
               out_dtype: torch.dtype | None) -> torch.Tensor:
    product = exact_matmul(a, b)
    if acc is not None:
        return (acc.to(product.dtype) + product).to(out_dtype or acc.dtype)
    if out_dtype is not None:
        return product.to(out_dtype)
    return product if product.dtype != torch.int64 else product.to(torch.int32)


@dot_p.def_trace
def _dot_trace(tracer: Tracer, a: Any, b: Any, acc: Any, *, out_dtype: torch.dtype | None) -> TileValue:
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise exc.ShapeMismatchError(f"hl.dot needs two 2-D or two 3-D tiles, got ranks {a.dim()} and {b.dim()}",
                                     location=user_location())
    k = tracer.unify_axes(a.axes[-1], b.axes[-2], "matrix product inner dimension")
    batch = tuple(tracer.broadcast([a.axes[:-2], b.axes[:-2]], "batch dims"))
    shape = batch + (a.axes[-2], b.axes[-1])
    operand_axes = (a.axes[-2], k, b.axes[-1])
    tracer.dot_axes.update(operand_axes)
    # tl.dot-like products need every block >= 16; smaller tiles multiply-and-sum instead (exact, fp32)
    small = any(axis.block < 16 for axis in operand_axes)
    # hl.dot without acc/out_dtype returns its accumulator's dtype, as eager mode does (torch.mm
    # and friends pass the promoted input dtype as out_dtype instead)
    dtype = out_dtype or (acc.dtype if acc is not None else _accumulator_dtype(product_dtype(a, b)))
    accumulate = torch.float32 if dtype.is_floating_point else torch.int32
    inputs = [a.node, b.node, acc.node if acc is not None else None]
    if acc is not None:
        tracer.broadcast([acc.axes, shape], "matrix product accumulator")
    return tracer.emit(Op.DOT, inputs, shape, dtype, accumulate=accumulate, k_axis=k, small=small)


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int32


# -- torch's products: same node, PyTorch's result dtype ----------------------------------------
T = torch.Tensor
mm_p = Primitive("mm", torch_functions=(torch.mm, T.mm, torch.bmm, T.bmm, torch.matmul, T.matmul, T.__matmul__))
addmm_p = Primitive("addmm", torch_functions=(torch.addmm, T.addmm, torch.baddbmm, T.baddbmm))


@mm_p.def_eager
def _mm_eager(a: torch.Tensor, b: torch.Tensor, *, out: Any = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    # CPU lacks some low-precision and mixed-dtype products; a compiled kernel accumulates in fp32.
    # `out_dtype` (torch.mm/bmm's `.dtype` overloads, e.g. fp16 inputs -> fp32 result) is the result dtype.
    return exact_matmul(a, b).to(out_dtype or product_dtype(a, b))


@mm_p.def_trace
def _mm_trace(tracer: Tracer, a: Any, b: Any, *, out: Any = None, out_dtype: torch.dtype | None = None) -> TileValue:
    return _dot_trace(tracer, a, b, None, out_dtype=out_dtype or product_dtype(a, b))


@addmm_p.def_eager
def _addmm_eager(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
                 out: Any = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    product = exact_matmul(a, b)
    total = product * alpha if alpha != 1 else product
    if beta != 0:
        total = total + (acc.to(total.dtype) * beta if beta != 1 else acc.to(total.dtype))
    return total.to(out_dtype or product_dtype(acc, a, b))


@addmm_p.def_trace
def _addmm_trace(tracer: Tracer, acc: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1,
                 out: Any = None, out_dtype: torch.dtype | None = None) -> TileValue:
    if beta != 1 or alpha != 1:
        raise exc.UnsupportedOperationError("addmm with beta/alpha != 1 inside a compiled kernel",
                                            location=user_location(), hint="scale the operands or the result instead")
    return _dot_trace(tracer, a, b, acc, out_dtype=out_dtype or product_dtype(acc, a, b))
