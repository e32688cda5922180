"""Matrix products on tiles: `hl.dot`, and the promotion rule shared with torch.mm & co."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import UNIT, Op
from tessera.ir.primitive import Primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.operands import check_operand
from tessera.language.reductions import record_reduction
from tessera.language.view import cast, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer


def dot(mat1: Any, mat2: Any, acc: Any = None, out_dtype: torch.dtype | None = None) -> Any:
    """`mat1 @ mat2` (2-D or batched 3-D) accumulated in fp32 (or `out_dtype`), plus `acc` if given.

    >>> acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)   # doctest: +SKIP
    """
    if acc is not None and torch.int8 in (getattr(mat1, "dtype", None), getattr(mat2, "dtype", None)) \
            and getattr(acc, "dtype", None) != torch.int32:
        # Helion's rule: int8 products accumulate in int32 (a float accumulator rounds large sums)
        raise exc.AccumulatorDtypeError(f"hl.dot of int8 operands into a {acc.dtype} accumulator",
                                        location=user_location(),
                                        hint="accumulate int8 products in int32: hl.zeros([...], dtype=torch.int32), "
                                             "and convert the result after the loop")
    return dot_p.bind(mat1, mat2, acc, out_dtype=out_dtype)


def product_dtype(*operands: Any) -> torch.dtype:
    """Result dtype of a product over mixed dtypes: PyTorch's promotion of the operands."""
    dtype = operands[0].dtype
    for operand in operands[1:]:
        try:
            dtype = torch.promote_types(dtype, operand.dtype)
        except RuntimeError:  # e.g. float32 with float8: PyTorch defines no common dtype
            raise exc.UnsupportedOperationError(
                f"a matrix product of {dtype} and {operand.dtype} operands: PyTorch has no common dtype for them",
                location=user_location(),
                hint="for float8 operands accumulate with hl.dot(a, b, acc=acc) (fp32), or cast the operands "
                     "to one dtype first") from None
    return dtype


def check_integer_product(a: Any, b: Any) -> None:
    """Refuse integer or bool operands other than int8 with int8: Triton's dot multiplies no other
    integers (every mode refuses, so eager mode is no looser than the compiled one)."""
    dtypes = (a.dtype, b.dtype)
    if any(not dtype.is_floating_point for dtype in dtypes) and dtypes != (torch.int8, torch.int8):
        raise exc.DtypeError(
            f"a matrix product of {dtypes[0]} and {dtypes[1]} operands: the GPU multiplies integer matrices "
            "only as int8 with int8 (accumulating in int32)", location=user_location(),
            hint="cast both operands to torch.int8 if their values fit, else to torch.float32 (exact while "
                 "the sums stay below 2**24) or torch.float64")


def check_vector_product(a: Any, b: Any) -> None:
    """Refuse bool operands of a product with a 1-D operand, as torch does (no bool dot/mv)."""
    if torch.bool in (a.dtype, b.dtype):
        raise exc.DtypeError(f"a product of {a.dtype} and {b.dtype} operands: torch multiplies no bool vectors",
                             location=user_location(), hint="convert first: v.to(torch.int32)")


def exact_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` computed in fp32 (fp64 for fp64 inputs, int64 for ints): the eager oracle's product.

    CPU lacks some low-precision and mixed-dtype kernels, and a compiled kernel accumulates in
    fp32 anyway, so eager mode upcasts instead of calling the low-precision kernel.
    """
    # host code is plain torch; a 1-D operand multiplies and sums without the GPU's matrix unit
    if getattr(interpreter.active(), "loop_depth", 0) and a.dim() > 1 and b.dim() > 1:
        check_integer_product(a, b)
    elif getattr(interpreter.active(), "loop_depth", 0):
        check_vector_product(a, b)
    if a.dtype == torch.float64 or b.dtype == torch.float64:
        wide = torch.float64
    elif a.is_floating_point() or b.is_floating_point():
        wide = torch.float32
    elif a.device.type != "cpu" and {a.dtype, b.dtype} <= _SMALL_INTEGERS:
        # CUDA has no integer matmul; 8-bit products are exact in float64 (|sum| < 2**53 up to K = 2**38)
        return torch.matmul(a.to(torch.float64), b.to(torch.float64)).to(torch.int64)
    else:
        wide = torch.int64
    return torch.matmul(a.to(wide), b.to(wide))


_SMALL_INTEGERS = frozenset({torch.int8, torch.uint8, torch.bool})


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
def dot_trace(tracer: Tracer, a: Any, b: Any, acc: Any, *, out_dtype: torch.dtype | None) -> TileValue:
    for operand in (a, b, acc):
        if isinstance(operand, torch.Tensor):  # made in the loop (torch.eye(8)): no register layout to take
            check_operand(operand, "a matrix product")
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise exc.ShapeMismatchError(f"hl.dot needs two 2-D or two 3-D tiles, got ranks {a.dim()} and {b.dim()}",
                                     location=user_location())
    check_integer_product(a, b)
    k = tracer.contracted_axis(a.axes[-1], b.axes[-2], "matrix product inner dimension")
    if k is not UNIT and (a.axes[-2] is k or b.axes[-1] is k):
        # `s[tm, tm] @ v[tm, tn]`: one tile indexes the inner dim and an outer one; a product's
        # dims must be distinct register dims
        raise exc.UnsupportedOperationError(
            f"a matrix product whose inner dimension and an outer one are the same tile ({k.name})",
            location=user_location(),
            hint="index the block with two different tiles, e.g. an inner `for tile_k in hl.tile(begin, end)` "
                 "over the same range, or run the kernel with mode='eager'")
    try:
        batch = tuple(tracer.broadcast([a.axes[:-2], b.axes[:-2]], "batch dims"))
    except exc.ShapeMismatchError as error:
        raise exc.DotBatchDimensionMismatch(
            f"the operands' batch dimensions differ: {error.detail}", location=error.location,
            hint="index both operands' batch dimension with the same tile (or size 1 to broadcast)") from None
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


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """Where a product sums: fp32 for floats below 64 bits, int64 for integers and bools."""
    if dtype == torch.float64:
        return dtype
    return torch.float32 if dtype.is_floating_point else torch.int64


def multiply_and_sum(tracer: Tracer, a: TileValue, b: TileValue, dims: list[int], result: torch.dtype) -> TileValue:
    """`(a * b).sum(dims)` (a and b already aligned for broadcasting), summed wide, rounded once."""
    wide = wide_dtype(result)
    product = apply_elementwise(tracer, "mul", cast(tracer, a, wide), cast(tracer, b, wide))
    total = record_reduction(tracer, "sum", product, dims, False, dtype=wide) if dims else product
    return cast(tracer, total, result) if total.dtype != result else total


def vector_product(tracer: Tracer, a: TileValue, b: TileValue, result: torch.dtype) -> TileValue:
    """torch.matmul where an operand is 1-D: `v @ w` (a 0-d dot), `m @ v` (rows with v), `v @ m`."""
    check_vector_product(a, b)
    if b.dim() == 1:
        if a.dim() > 1:  # (..., n, k) @ (k,) -> (..., n)
            b = view_axes(tracer, b, (UNIT,) * (a.dim() - 1) + tuple(b.axes), "matrix-vector operand")
        return multiply_and_sum(tracer, a, b, [a.dim() - 1], result)
    # (k,) @ (..., k, n) -> (..., n): the vector stands for a 1 x k matrix whose row is dropped
    column = view_axes(tracer, a, (UNIT,) * (b.dim() - 2) + (a.axes[0], UNIT), "vector-matrix operand")
    return multiply_and_sum(tracer, column, b, [b.dim() - 2], result)


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int32


# -- torch's products: same node, PyTorch's result dtype ----------------------------------------
T = torch.Tensor
_ATEN = torch.ops.aten  # the ATen overloads too (`torch.ops.aten.bmm.dtype(a, b, torch.float32)`)
mm_p = Primitive("mm", torch_functions=(torch.mm, T.mm, torch.bmm, T.bmm, torch.matmul, T.matmul, T.__matmul__,
                                        _ATEN.mm.default, _ATEN.mm.dtype, _ATEN.bmm.default, _ATEN.bmm.dtype))
addmm_p = Primitive("addmm", torch_functions=(torch.addmm, T.addmm, torch.baddbmm, T.baddbmm, _ATEN.addmm.default,
                                              _ATEN.addmm.dtype, _ATEN.baddbmm.default, _ATEN.baddbmm.dtype))


# torch's product signatures, one table for eager and trace rules: operands (positional, or by
# any of their keyword names), then an optional positional `out_dtype` (the `.dtype` overloads:
# `torch.bmm(a, b, torch.float32)`), then keywords `out_dtype`, `out`, and for addmm/baddbmm
# `beta`/`alpha`.
_MM_OPERANDS = (("input", "self"), ("mat2", "other"))
_ADDMM_OPERANDS = (("input", "self"), ("mat1", "batch1"), ("mat2", "batch2"))


@dataclasses.dataclass
class ProductCall:
    """One call of torch.mm/bmm/matmul/addmm/baddbmm, its arguments by meaning."""

    operands: list[Any]
    out_dtype: torch.dtype | None = None
    out: Any = None
    beta: Any = 1
    alpha: Any = 1


def product_call(function: str, names: tuple[tuple[str, ...], ...], args: tuple, kwargs: dict) -> ProductCall:
    """`args`/`kwargs` of a torch product call sorted by meaning, with torch's argument errors.

    >>> product_call("bmm", _MM_OPERANDS, (a, b, torch.float32), {}).out_dtype   # doctest: +SKIP
    torch.float32
    """
    kwargs = dict(kwargs)
    operands: list[Any] = []
    for position, aliases in enumerate(names):
        given = [name for name in aliases if name in kwargs]
        if position < len(args) and given or len(given) > 1:
            raise TypeError(f"torch.{function}() got multiple values for argument {aliases[0]!r}")
        if position < len(args):
            operands.append(args[position])
        elif given:
            operands.append(kwargs.pop(given[0]))
        else:
            raise TypeError(f"torch.{function}() missing required argument {aliases[0]!r}")
    extra = list(args[len(names):])
    if len(extra) > 1 or extra and "out_dtype" in kwargs:
        raise TypeError(f"torch.{function}() takes {len(names)} operands and an optional out_dtype, "
                        f"got {len(args)} positional arguments")
    call = ProductCall(operands, extra[0] if extra else kwargs.pop("out_dtype", None), kwargs.pop("out", None))
    if len(names) == 3:
        call.beta, call.alpha = kwargs.pop("beta", 1), kwargs.pop("alpha", 1)
    if kwargs:
        raise TypeError(f"torch.{function}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if call.out_dtype is not None and not isinstance(call.out_dtype, torch.dtype):
        raise TypeError(f"torch.{function}(): out_dtype must be a torch.dtype, got {call.out_dtype!r}")
    return call


def _written_to_out(result: torch.Tensor, out: Any) -> torch.Tensor:
    """Eager `out=` on the host: torch's meaning (the result written into `out`). Inside a tile
    loop every torch call with `out=` is refused before any rule runs (trace dispatch and eager's
    torch-function mode: `proxy.out_argument_error`)."""
    return result if out is None else out.copy_(result)


@mm_p.def_eager
def _mm_eager(*args: Any, **kwargs: Any) -> torch.Tensor:
    # CPU lacks some low-precision and mixed-dtype products; a compiled kernel accumulates in fp32.
    # `out_dtype` (torch.mm/bmm's `.dtype` overloads, e.g. fp16 inputs -> fp32 result) is the result dtype.
    call = product_call("mm", _MM_OPERANDS, args, kwargs)
    a, b = call.operands
    return _written_to_out(exact_matmul(a, b).to(call.out_dtype or product_dtype(a, b)), call.out)


@mm_p.def_trace
def _mm_trace(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
    call = product_call("mm", _MM_OPERANDS, args, kwargs)
    a, b = call.operands
    if isinstance(a, TileValue) and isinstance(b, TileValue) and 1 in (a.dim(), b.dim()):
        return vector_product(tracer, a, b, call.out_dtype or product_dtype(a, b))
    return dot_trace(tracer, a, b, None, out_dtype=call.out_dtype or product_dtype(a, b))


@addmm_p.def_eager
def _addmm_eager(*args: Any, **kwargs: Any) -> torch.Tensor:
    call = product_call("addmm", _ADDMM_OPERANDS, args, kwargs)
    acc, a, b = call.operands
    product = exact_matmul(a, b)
    total = product * call.alpha if not _is_one(call.alpha) else product
    if not _is_zero(call.beta):  # torch ignores the input (even NaN) when beta is 0
        total = total + (acc.to(total.dtype) * call.beta if not _is_one(call.beta) else acc.to(total.dtype))
    else:
        total = total + torch.zeros_like(acc, dtype=total.dtype)  # still broadcast to its shape
    return _written_to_out(total.to(call.out_dtype or product_dtype(acc, a, b)), call.out)


@addmm_p.def_trace
def _addmm_trace(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
    call = product_call("addmm", _ADDMM_OPERANDS, args, kwargs)
    acc, a, b = call.operands
    out_dtype = call.out_dtype or product_dtype(acc, a, b)
    if _is_one(call.beta) and _is_one(call.alpha):
        return dot_trace(tracer, a, b, acc, out_dtype=out_dtype)
    # scaled: the product in the accumulator dtype, scaled, plus the scaled input
    total = dot_trace(tracer, a, b, None, out_dtype=_accumulator_dtype(product_dtype(acc, a, b)))
    if not _is_one(call.alpha):
        total = total * call.alpha
    if _is_zero(call.beta):
        tracer.broadcast([acc.axes, total.axes], "matrix product accumulator")
    else:
        total = total + (acc.to(total.dtype) * call.beta if not _is_one(call.beta) else acc.to(total.dtype))
    return total.to(out_dtype)


def _is_one(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == 1


def _is_zero(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == 0
