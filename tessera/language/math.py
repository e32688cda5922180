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
