"""Products that are not matrix products, and `torch.einsum`: `torch.outer`, `torch.mv`,
`a @ v` / `v @ b` with a 1-D operand, and einsum equations.

A vector product is a broadcast multiply and a sum: the operands are widened first (16-bit floats
to fp32, integers to int64), multiplied lane by lane and summed over the contracted dim, then
rounded once to torch's result dtype. An einsum equation is parsed here: a matrix product of two
2-D (or batched 3-D) floating-point operands becomes a matrix product on the tensor cores,
everything else (transposes, outer and batched broadcast products, sums) a permute, a broadcast
multiply and a sum. Forms outside that (`...`, a letter repeated within one operand, three or
more operands) are refused, located, in every mode.

>>> scores = torch.einsum("md,nd->mn", q[tile, :], k[:, :])                      # doctest: +SKIP
>>> row_dots = x[tile, :] @ w[:]                                                 # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tessera import exc
from tessera.ir.graph import UNIT
from tessera.ir.primitive import defined_primitive
from tessera.language.elementwise import apply_elementwise
from tessera.language.math import dot_trace, multiply_and_sum, product_dtype, vector_product, wide_dtype
from tessera.language.reductions import record_reduction
from tessera.language.statistics import only_tile_value
from tessera.language.view import cast, permute, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor


def _vectors(what: str, *operands: Any) -> list[TileValue]:
    return [only_tile_value(what, operand) for operand in operands]


def _outer_trace(tracer: Tracer, a: Any, b: Any) -> TileValue:
    a, b = _vectors("torch.outer", a, b)
    if a.dim() != 1 or b.dim() != 1:
        raise exc.ShapeMismatchError(f"torch.outer of values of rank {a.dim()} and {b.dim()}",
                                     location=user_location(), hint="torch.outer takes two 1-D values (torch too)")
    result = product_dtype(a, b)
    column = view_axes(tracer, a, (a.axes[0], UNIT), "outer rows")
    row = view_axes(tracer, b, (UNIT, b.axes[0]), "outer columns")
    return cast(tracer, apply_elementwise(tracer, "mul", column, row), result)


def _mv_trace(tracer: Tracer, matrix: Any, vector: Any) -> TileValue:
    matrix, vector = _vectors("torch.mv", matrix, vector)
    if matrix.dim() != 2 or vector.dim() != 1:
        raise exc.ShapeMismatchError(f"torch.mv of values of rank {matrix.dim()} and {vector.dim()}",
                                     location=user_location(), hint="torch.mv takes a 2-D matrix and a 1-D vector")
    return vector_product(tracer, matrix, vector, product_dtype(matrix, vector))


def _vector_dot_trace(tracer: Tracer, a: Any, b: Any) -> TileValue:
    """torch.dot / torch.vdot (real values: the same): two 1-D values of one dtype, as torch asks."""
    a, b = _vectors("torch.dot", a, b)
    if a.dim() != 1 or b.dim() != 1:
        raise exc.ShapeMismatchError(f"torch.dot of values of rank {a.dim()} and {b.dim()}", location=user_location(),
                                     hint="torch.dot takes two 1-D values (torch too); use torch.inner or @ for more")
    if a.dtype != b.dtype or a.dtype == torch.bool:
        raise exc.DtypeError(f"torch.dot of {a.dtype} and {b.dtype} values", location=user_location(),
                             hint="torch.dot takes two values of one numeric dtype (torch too): convert one first")
    return vector_product(tracer, a, b, a.dtype)


def _inner_trace(tracer: Tracer, a: Any, b: Any) -> TileValue:
    """torch.inner: the sum over both operands' last dims, every other dim kept (a's, then b's)."""
    a, b = _vectors("torch.inner", a, b)
    if a.dim() == 0 or b.dim() == 0:
        return apply_elementwise(tracer, "mul", a, b)
    if a.dtype != b.dtype or a.dtype == torch.bool:  # torch's rule at every size (einsum's allows one-element dims)
        raise exc.DtypeError(f"torch.inner of {a.dtype} and {b.dtype} values", location=user_location(),
                             hint="torch.inner takes two values of one numeric dtype (torch too): convert one first")
    letters = "abcdefghijklmnopqrstuvwxy"
    first, second = letters[:a.dim() - 1], letters[a.dim() - 1:a.dim() + b.dim() - 2]
    return _einsum_trace(tracer, f"{first}z,{second}z->{first}{second}", a, b)


# -- torch.einsum ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Equation:
    """An einsum equation: the letters of each operand and of the result."""

    inputs: tuple[str, ...]
    output: str

    @property
    def contracted(self) -> str:
        """Letters summed away, in order of first appearance."""
        seen = "".join(dict.fromkeys("".join(self.inputs)))
        return "".join(letter for letter in seen if letter not in self.output)


def parse_equation(equation: Any, ranks: list[int]) -> Equation:
    """`equation` checked against the operands' ranks; the forms Tessera computes, else a located error."""
    if not isinstance(equation, str):
        raise exc.UnsupportedOperationError(f"torch.einsum with equation {equation!r}: give the equation as a string",
                                            location=user_location())
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    inputs = tuple(left.split(","))
    unsupported = None
    if "." in text:
        unsupported = "an ellipsis (`...`)"
    elif len(inputs) > 2:
        unsupported = f"{len(inputs)} operands"
    elif any(not part.isalpha() for part in (*inputs, right) if part):
        unsupported = "characters other than letters"
    elif any(len(set(part)) != len(part) for part in (*inputs, right)):
        unsupported = "a letter repeated within one operand or the result (a diagonal)"
    if unsupported:
        raise exc.UnsupportedOperationError(
            f"torch.einsum({equation!r}) uses {unsupported}: inside a tile loop einsum computes products, "
            "transposes and broadcast multiply-and-sums of one or two operands", location=user_location(),
            hint="write the dims out (permute, v[:, None] * w, .sum(d)) or split it into two einsums")
    if len(inputs) != len(ranks) or any(len(part) != rank for part, rank in zip(inputs, ranks)):
        raise exc.ShapeMismatchError(
            f"torch.einsum({equation!r}) names {[len(p) for p in inputs]} dims for operands of ranks {ranks}",
            location=user_location(), hint="one letter per dim of each operand (torch refuses it too)")
    if not arrow:  # torch's implicit result: the letters met once, in alphabetical order
        letters = "".join(inputs)
        right = "".join(sorted(letter for letter in set(letters) if letters.count(letter) == 1))
    if any(letter not in "".join(inputs) for letter in right):
        raise exc.ShapeMismatchError(f"torch.einsum({equation!r}): a result letter names no operand dim",
                                     location=user_location(), hint="torch refuses it too")
    return Equation(inputs, right)


def _aligned(tracer: Tracer, value: TileValue, letters: str, order: str) -> TileValue:
    """`value` (dims named by `letters`) permuted and viewed to the dims of `order` (size 1 where absent)."""
    present = [letter for letter in order if letter in letters]
    permutation = [letters.index(letter) for letter in present]
    if permutation != list(range(len(permutation))):
        value = permute(tracer, value, permutation)
    if len(present) == len(order):
        return value
    axes = iter(value.axes)
    return view_axes(tracer, value, tuple(next(axes) if letter in letters else UNIT for letter in order),
                     "einsum operand")


def _matrix_product(tracer: Tracer, parsed: Equation, operands: list[TileValue], result: torch.dtype) -> Any:
    """The einsum as a (batched) matrix product when it is one: two floating-point operands of equal
    rank 2 or 3, one contracted letter, one letter of each operand's own and a shared batch letter."""
    if len(operands) != 2 or not all(o.dtype.is_floating_point for o in operands):
        return None
    (a_letters, b_letters), contracted = parsed.inputs, parsed.contracted
    batch = [letter for letter in parsed.output if letter in a_letters and letter in b_letters]
    rows = [letter for letter in a_letters if letter not in b_letters]
    columns = [letter for letter in b_letters if letter not in a_letters]
    if not (len(contracted) == 1 and len(rows) == 1 and len(columns) == 1 and len(batch) == len(a_letters) - 2
            and len(a_letters) == len(b_letters) and len(a_letters) in (2, 3)):
        return None
    a = _aligned(tracer, operands[0], a_letters, "".join(batch) + rows[0] + contracted)
    b = _aligned(tracer, operands[1], b_letters, "".join(batch) + contracted + columns[0])
    product = dot_trace(tracer, a, b, None, out_dtype=result)
    produced = "".join(batch) + rows[0] + columns[0]
    return _aligned(tracer, product, produced, parsed.output)


def _einsum_operands(operands: tuple) -> list[Any]:
    return list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)


def _einsum_trace(tracer: Tracer, equation: Any, *operands: Any) -> TileValue:
    values = _vectors("torch.einsum", *_einsum_operands(operands))
    parsed = parse_equation(equation, [v.dim() for v in values])
    # torch's result dtype (a sum of one int operand gives int64) and refusals (bools in a product,
    # mixed dtypes in a contraction), asked of stand-ins with the operands' one-element dims and two
    # elements in every other: torch multiplies across a one-element contracted dim, which promotes
    try:
        stand_ins = (torch.zeros([1 if tracer.canonical_axis(axis) is UNIT else 2 for axis in v.axes], dtype=v.dtype)
                     for v in values)
        result = torch.einsum(equation, *stand_ins).dtype
    except (RuntimeError, NotImplementedError) as error:
        raise exc.DtypeError(f"torch.einsum({equation!r}) of {[str(v.dtype) for v in values]}: PyTorch refuses it "
                             f"({str(error).splitlines()[0]})", location=user_location(),
                             hint="give the operands one dtype first (v.to(torch.float32))") from None
    matrix = _matrix_product(tracer, parsed, values, result)
    if matrix is not None:
        return matrix
    order = parsed.output + parsed.contracted
    aligned = [_aligned(tracer, value, letters, order) for value, letters in zip(values, parsed.inputs)]
    summed = list(range(len(parsed.output), len(order)))
    if len(aligned) == 1:
        only = aligned[0]
        if not summed:
            return cast(tracer, only, result)
        return cast(tracer, record_reduction(tracer, "sum", cast(tracer, only, wide_dtype(result)), summed, False,
                                             dtype=wide_dtype(result)), result)
    return multiply_and_sum(tracer, aligned[0], aligned[1], summed, result)


def _einsum_eager(equation: Any, *operands: Any) -> torch.Tensor:
    values = _einsum_operands(operands)
    parse_equation(equation, [v.dim() for v in values])  # the forms the trace computes, refused alike
    return torch.einsum(equation, *values)


outer_p = defined_primitive("outer", torch.outer, _outer_trace, torch_functions=(torch.outer, T.outer, torch.ger, T.ger))
mv_p = defined_primitive("mv", torch.mv, _mv_trace, torch_functions=(torch.mv, T.mv))
einsum_p = defined_primitive("einsum", _einsum_eager, _einsum_trace, torch_functions=(torch.einsum,))
vector_dot_p = defined_primitive("vector_dot", torch.dot, _vector_dot_trace,
                                 torch_functions=(torch.dot, T.dot, torch.vdot, T.vdot))
inner_p = defined_primitive("inner", torch.inner, _inner_trace, torch_functions=(torch.inner, T.inner))
