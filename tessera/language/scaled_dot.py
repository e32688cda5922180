"""Block-scaled products: `hl.dot_scaled` (the microscaling formats of Triton's `tl.dot_scaled`).

Each operand comes with a format and a uint8 e8m0 scale per 32 elements along K: element
`a[m, k]` stands for `a[m, k] * 2**(a_scale[m, k // 32] - 127)` and `b[k, n]` for
`b[k, n] * 2**(b_scale[n, k // 32] - 127)`. Formats: "e4m3", "e5m2" (fp8 tensors, or their uint8
bits), "bf16", "fp16", and "e2m1" (fp4, two per uint8 byte along K, low nibble first; eager
mode only). Compiled code dequantizes each operand in registers and multiplies in fp32 (exact:
a scaled fp8/bf16/fp16 value is a tf32 value), so it runs on any GPU and in the interpreter.

>>> acc = hl.dot_scaled(x[tm, :], xs[tm, :], "e4m3", y[:, tn], ys[tn, :], "e4m3", acc=acc)   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.primitive import Primitive
from tessera.language.math import dot_trace, exact_matmul
from tessera.language.quantized import e2m1_to_float
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
GROUP = 32  # elements along K per scale
_FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def dot_scaled(mat1: Any, mat1_scale: Any, mat1_format: str, mat2: Any, mat2_scale: Any, mat2_format: str,
               acc: Any = None, out_dtype: torch.dtype | None = None) -> Any:
    """`dequant(mat1) @ dequant(mat2)` (+ `acc`): mat1 [M, K] with mat1_scale [M, K // 32], mat2
    [K, N] with mat2_scale [N, K // 32]; uint8 scales are powers of two (`2**(s - 127)`). The
    result has `out_dtype` (default float32), or with `acc` the accumulator's dtype.

    >>> out[tm, tn] = hl.dot_scaled(x[tm, :], xs[tm, :], "bf16", y[:, tn], ys[tn, :], "bf16")   # doctest: +SKIP
    """
    for name, fmt in (("mat1_format", mat1_format), ("mat2_format", mat2_format)):
        if fmt not in FORMATS:
            raise exc.TesseraError(f"hl.dot_scaled: {name} {fmt!r} is not a format", location=user_location(),
                                   hint=f"use one of {', '.join(FORMATS)}")
    for name, value in (("mat1", mat1), ("mat1_scale", mat1_scale), ("mat2", mat2), ("mat2_scale", mat2_scale),
                        ("acc", acc)):
        if value is not None and value.dim() != 2:
            raise exc.ShapeMismatchError(f"hl.dot_scaled: {name} must be 2-D, got {value.dim()}-D",
                                         location=user_location(), hint="index 2-D tiles (batches: loop over them)")
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise exc.TesseraError(f"hl.dot_scaled: out_dtype {out_dtype!r} is not a torch.dtype", location=user_location())
    return dot_scaled_p.bind(mat1, mat1_scale, mat2, mat2_scale, acc, formats=(mat1_format, mat2_format),
                             out_dtype=out_dtype)


def _result_dtype(acc: Any, out_dtype: torch.dtype | None) -> torch.dtype:
    return acc.dtype if acc is not None else out_dtype or torch.float32


# -- eager: dequantize, multiply in fp32 ----------------------------------------------------------
def _dequantized(data: torch.Tensor, scale: torch.Tensor, fmt: str, rows: bool) -> torch.Tensor:
    """The operand's fp32 values, K along dim 1 (`rows`: mat1) or dim 0 (mat2)."""
    if fmt == "e2m1":
        packed = data.view(torch.uint8).to(torch.int32)
        low, high = e2m1_to_float(packed & 15, torch.float32), e2m1_to_float(packed >> 4, torch.float32)
        values = torch.stack([low, high], dim=2 if rows else 1)
        values = values.reshape(data.size(0), -1) if rows else values.reshape(-1, data.size(1))
    elif fmt in _FP8 and data.dtype == torch.uint8:
        values = data.view(_FP8[fmt]).to(torch.float32)
    else:
        values = data.to(torch.float32)
    factor = torch.pow(2.0, scale.to(torch.float32) - 127.0).repeat_interleave(GROUP, dim=1)
    k = values.size(1 if rows else 0)
    if factor.size(1) < k:
        raise exc.ShapeMismatchError(f"hl.dot_scaled: {scale.size(1)} scales per row cover {factor.size(1)} of "
                                     f"{k} elements along K", location=user_location(2),
                                     hint="pass one scale per 32 elements of K")
    factor = factor[:, :k]
    return values * (factor if rows else factor.T)


def _dot_scaled_eager(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                      acc: torch.Tensor | None, *, formats: tuple[str, str],
                      out_dtype: torch.dtype | None) -> torch.Tensor:
    product = exact_matmul(_dequantized(a, a_scale, formats[0], True), _dequantized(b, b_scale, formats[1], False))
    if acc is not None:
        return (acc.to(torch.float32) + product).to(acc.dtype)
    return product.to(_result_dtype(acc, out_dtype))


# -- trace: each operand dequantized in registers (Op.DEQUANTIZE), then the usual product ---------
def _dequantize_trace(tracer: Tracer, data: Any, scale: Any, fmt: str, rows: bool, name: str) -> TileValue:
    if not isinstance(data, TileValue) or not isinstance(scale, TileValue):
        raise exc.TesseraError(f"hl.dot_scaled: {name} and its scale must be tile values", location=user_location())
    if fmt == "e2m1":
        raise exc.UnsupportedOperationError(
            "hl.dot_scaled with e2m1 (packed fp4) operands in a compiled tile loop", location=user_location(),
            hint="run the kernel with mode='eager', or unpack with hl.float4_e2m1fn_x2_to_float32 and use "
                 "hl.dot_scaled's bf16 format")
    expected = _FP8.get(fmt, {"bf16": torch.bfloat16, "fp16": torch.float16}.get(fmt))
    if data.dtype not in (expected, torch.uint8 if fmt in _FP8 else expected):
        raise exc.DtypeError(f"hl.dot_scaled: {name} has dtype {data.dtype}, not the {fmt} format",
                             location=user_location(), hint=f"pass {expected} values (fp8: or their uint8 bits)")
    if scale.dtype != torch.uint8:
        raise exc.DtypeError(f"hl.dot_scaled: the scale of {name} has dtype {scale.dtype}", location=user_location(),
                             hint="scales are uint8 exponents (e8m0): 2**(s - 127)")
    outer, k = (data.axes[0], data.axes[1]) if rows else (data.axes[1], data.axes[0])
    tracer.unify_axes(scale.axes[0], outer, f"the rows of {name}'s scale")
    if scale.axes[1].block * GROUP != k.block:
        raise exc.ShapeMismatchError(
            f"hl.dot_scaled: {name}'s K block holds {k.block} elements but its scale block {scale.axes[1].block} "
            f"scales (one per {GROUP})", location=user_location(),
            hint="index K and the scales whole (x[tile_m, :], x_scale[tile_m, :]), or with blocks of K a multiple of 32")
    return tracer.emit(Op.DEQUANTIZE, [data.node, scale.node], data.axes, torch.float32, format=fmt, rows=rows)


def _dot_scaled_trace(tracer: Tracer, a: Any, a_scale: Any, b: Any, b_scale: Any, acc: Any, *,
                      formats: tuple[str, str], out_dtype: torch.dtype | None) -> TileValue:
    a_values = _dequantize_trace(tracer, a, a_scale, formats[0], True, "mat1")
    b_values = _dequantize_trace(tracer, b, b_scale, formats[1], False, "mat2")
    return dot_trace(tracer, a_values, b_values, acc, out_dtype=_result_dtype(acc, out_dtype))


dot_scaled_p = Primitive("dot_scaled")
dot_scaled_p.def_eager(_dot_scaled_eager)
dot_scaled_p.def_trace(_dot_scaled_trace)
