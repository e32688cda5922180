"""Matrix products on tiles: `hl.dot`, and the promotion rule shared with torch.mm & co."""
from __future__ import annotations

from typing import Any

import torch

from tessera.ir.primitive import Primitive


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


def _dot_trace(tracer: Any, a: Any, b: Any, acc: Any, *, out_dtype: torch.dtype | None) -> Any:
    from tessera import exc
    from tessera.location import user_location
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise exc.ShapeMismatchError(f"hl.dot needs two 2-D or two 3-D tiles, got ranks {a.dim()} and {b.dim()}",
                                     location=user_location())
    k = tracer.unify_axes(a.axes[-1], b.axes[-2], "matrix product inner dimension")
    batch = tuple(tracer.broadcast([a.axes[:-2], b.axes[:-2]], "batch dims"))
    shape = batch + (a.axes[-2], b.axes[-1])
    operand_axes = (a.axes[-2], k, b.axes[-1])
    tracer.dot_axes.update(operand_axes)
    # tl.dot needs every block >= 16; smaller tiles multiply-and-sum instead (exact, fp32)
    small = any(axis.block < 16 for axis in operand_axes)
    whole = set(tracer.full_axes())
    if not tracer.interpret and any((axis in whole or axis.is_unit) and axis.block < 16 for axis in operand_axes):
        # Known bug: on the GPU the multiply-sum path gives wrong sums when a whole dimension
        # narrower than 16 (e.g. x[tile, :] with 2 columns) feeds the product; refuse it loudly.
        raise exc.UnsupportedOperationError(
            "a matrix product over a whole dimension narrower than 16 is not supported in compiled mode",
            location=user_location(),
            hint="tile that dimension with hl.tile(...) instead of `:`, or run the kernel with mode='eager'")
    # hl.dot without acc/out_dtype returns its accumulator's dtype, as eager mode does (torch.mm
    # and friends pass the promoted input dtype as out_dtype instead)
    dtype = out_dtype or (acc.dtype if acc is not None else _accumulator_dtype(product_dtype(a, b)))
    accumulate = torch.float32 if dtype.is_floating_point else torch.int32
    inputs = [a.node, b.node, acc.node if acc is not None else None]
    if acc is not None:
        tracer.broadcast([acc.axes, shape], "matrix product accumulator")
    return tracer.emit("dot", inputs, shape, dtype, accumulate=accumulate, k_axis=k,
                       precision=tracer.dot_precision, interpret=tracer.interpret, small=small)


dot_p.def_trace(_dot_trace)


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int32


def _register_torch_products() -> None:
    from tessera.trace.proxy import register_torch

    def mm(tracer: Any, a: Any, b: Any, *, out: Any = None) -> Any:
        return _dot_trace(tracer, a, b, None, out_dtype=product_dtype(a, b))

    def addmm(tracer: Any, acc: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1, out: Any = None) -> Any:
        if beta != 1 or alpha != 1:
            from tessera import exc
            raise exc.UnsupportedOperationError("addmm with beta/alpha != 1 inside a compiled kernel")
        return _dot_trace(tracer, a, b, acc, out_dtype=product_dtype(acc, a, b))

    T = torch.Tensor
    register_torch(torch.mm, T.mm, torch.bmm, T.bmm, torch.matmul, T.matmul, T.__matmul__)(mm)
    register_torch(torch.addmm, T.addmm, torch.baddbmm, T.baddbmm)(addmm)

    # `a @ b`, `a.T` and `a.mT` on tile values (Python operators and properties, not torch calls)
    from tessera.trace.proxy import TileValue
    from tessera.trace.tracer import current_tracer
    TileValue.__matmul__ = lambda self, other: mm(current_tracer(), self, other)  # type: ignore[attr-defined]
    TileValue.__rmatmul__ = lambda self, other: mm(current_tracer(), other, self)  # type: ignore[attr-defined]
    TileValue.T = property(lambda self: self.permute(*reversed(range(self.dim()))))  # type: ignore[attr-defined]
    TileValue.mT = property(lambda self: self.transpose(-2, -1))  # type: ignore[attr-defined]


_register_torch_products()
