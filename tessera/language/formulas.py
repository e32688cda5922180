"""Shared building blocks of the torch functions written with other primitives (activations.py,
transcendentals.py): elementwise ops spelled as methods, the dtype a formula computes in, and the
one-argument primitive factory.

A formula computes 16-bit floats and integers in fp32 (fp64 stays fp64), as torch's kernels do
internally, and rounds once to torch's result dtype at the end.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from tessera import exc
from tessera.ir.primitive import Primitive, torch_primitive
from tessera.language.elementwise import apply_elementwise, scalar_tensor_value
from tessera.language.operands import ask_torch
from tessera.language.statistics import only_tile_value
from tessera.language.view import cast, view_dtype
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

_SAME_WIDTH_INTS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
                    torch.bfloat16: torch.int16}


class Ops:
    """`apply_elementwise` spelled as methods (`e.exp(x)`), plus the helpers formulas share."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def __getattr__(self, name: str) -> Callable[..., TileValue]:
        return lambda *operands: apply_elementwise(self.tracer, name, *operands)

    def isnan(self, value: TileValue) -> TileValue:
        return apply_elementwise(self.tracer, "ne", value, value)

    def signbit(self, value: TileValue) -> TileValue:
        """True where the sign bit is set (-0.0 and negative NaNs too): the bits read as an integer."""
        if value.dtype in _SAME_WIDTH_INTS:
            return apply_elementwise(self.tracer, "lt", view_dtype(self.tracer, value, _SAME_WIDTH_INTS[value.dtype]), 0)
        return apply_elementwise(self.tracer, "lt", value, 0)  # integers (bool is never negative)

    def expm1(self, x: TileValue) -> TileValue:
        """exp(x) - 1 without cancellation near 0: (u - 1) * x / log(u) with u = exp(x) (the
        rounding error of u cancels in the ratio); u == 1, inf and 0 give x, inf and -1."""
        u = self.exp(x)
        um1 = self.sub(u, 1)
        ratio = self.mul(um1, self.truediv(x, self.log(u)))
        exact = self.bitwise_or(self.eq(u, float("inf")), self.eq(um1, -1))
        return self.where(self.eq(u, 1), x, self.where(exact, um1, ratio))

    def copysign(self, magnitude: TileValue, sign: TileValue) -> TileValue:
        size = self.abs(magnitude)
        return self.where(self.signbit(sign), self.neg(size), size)


def horner(e: Ops, t: TileValue, coefficients: tuple[float, ...]) -> Any:
    """sum_k coefficients[k] * t^k (constant term first), by Horner's rule."""
    total: Any = coefficients[-1]
    for coefficient in reversed(coefficients[:-1]):
        total = e.add(e.mul(t, total), coefficient)
    return total


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a formula whose torch result is `dtype` computes in."""
    return torch.float64 if dtype == torch.float64 else torch.float32 if dtype.is_floating_point else dtype


def widened(tracer: Tracer, value: Any, dtype: torch.dtype) -> Any:
    return cast(tracer, value, dtype) if isinstance(value, TileValue) and value.dtype != dtype else value


def refuse_inplace(spelling: str, kwargs: dict[str, Any]) -> None:
    """F.* activations take `inplace=`; a tile value is a copy, so `inplace=True` would change a
    value the kernel never reads again: a located error naming the rebinding instead."""
    if kwargs.pop("inplace", False):
        raise exc.UnsupportedOperationError(
            f"{spelling}(..., inplace=True) on a tile value", location=user_location(),
            hint=f"rebind the name instead: v = {spelling}(v)")


LANE_WISE_FUNCTIONS: set[Callable[..., Any]] = set()
"""The torch functions of formula primitives over two or more tile operands: they combine lane for
lane, so eager mode applies Helion's broadcast by tile to them as the trace does (runtime/eager.py)."""


def formula_primitive(name: str, spelling: str, functions: tuple[Callable[..., Any], ...],
                      formula: Callable[..., TileValue], *, operands: int = 1,
                      integers_as_is: bool = False, widen: bool = True) -> Primitive:
    """A primitive for torch `functions` computed as `formula(ops, *wide_operands, *rest, **kwargs)`:
    the first `operands` arguments are widened to the compute dtype, the result rounds once to
    torch's dtype. `integers_as_is`: an integer result is computed in its own dtype unchanged;
    `widen=False`: the operands enter as they are (a formula that reads their bits)."""
    def rule(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        refuse_inplace(spelling, kwargs)
        args = tuple(scalar_tensor_value(tracer, a) for a in args)
        if not any(isinstance(a, TileValue) for a in args[:operands]):
            only_tile_value(spelling, args[0])
        answer = ask_torch(spelling, functions[0], args, kwargs)
        dtype = answer.dtype
        compute = dtype if integers_as_is and not dtype.is_floating_point else compute_dtype(dtype)
        wide = tuple(widened(tracer, a, compute) if widen else a for a in args[:operands])
        result = formula(Ops(tracer), *wide, *args[operands:], **kwargs)
        return cast(tracer, result, dtype) if result.dtype != dtype else result
    rule.__name__ = f"_{name}_trace"
    if operands > 1:
        LANE_WISE_FUNCTIONS.update(functions)
    return torch_primitive(name, *functions)(rule)
