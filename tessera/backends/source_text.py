"""What every backend's code generator shares: the scalar expression printer, the emitter's line
and axis conventions, the per-node `# file:line` comments, and the lowering-table lookup.

A backend subclasses `ExprPrinter` (its names for min, max, floor, cdiv, pow) and `EmitterBase`
(its casts and memory), and lowers a block with `emit_block(emitter, block, LOWERINGS, "Triton")`.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import sympy
import torch
from sympy.printing.str import StrPrinter

from tessera import exc
from tessera.ir.graph import UNIT, AccessKind, Axis, Block, Node, Op, walk
from tessera.ir.symbolic import is_integral


class ExprPrinter(StrPrinter):
    """Sympy host expressions as scalar code; a backend names its functions in the class attributes."""

    minimum = "min"
    maximum = "max"
    float_floor = "floor"
    float_ceil = "ceil"
    power = "pow"
    absolute = "abs"
    where = "where"

    def _fold(self, function: str, expr: sympy.Basic) -> str:
        args = [self._print(a) for a in expr.args]
        text = args[0]
        for arg in args[1:]:
            text = f"{function}({text}, {arg})"
        return text

    def _print_Min(self, expr: sympy.Min) -> str:
        return self._fold(self.minimum, expr)

    def _print_Max(self, expr: sympy.Max) -> str:
        return self._fold(self.maximum, expr)

    def integer_division(self, expr: Any) -> tuple[str, str] | None:
        """(numerator, denominator) printed, when `expr` is an int divided by an int."""
        numerator, denominator = sympy.fraction(sympy.together(expr))
        if denominator != 1 and is_integral(numerator) and is_integral(denominator):
            return self._print(numerator), self._print(denominator)
        return None

    def _print_floor(self, expr: Any) -> str:
        division = self.integer_division(expr.args[0])
        if division is not None:
            return f"(({division[0]}) // ({division[1]}))"
        return f"{self.float_floor}({self._print(expr.args[0])})"

    def cdiv(self, numerator: str, denominator: str) -> str:
        return f"(-((-({numerator})) // ({denominator})))"

    def _print_ceiling(self, expr: Any) -> str:
        division = self.integer_division(expr.args[0])
        if division is not None:
            return self.cdiv(*division)
        return f"{self.float_ceil}({self._print(expr.args[0])})"

    def _print_Mod(self, expr: sympy.Mod) -> str:
        # sympy's Mod takes the divisor's sign (Python's %); Triton's integer % takes the dividend's,
        # so a dividend that may be negative goes round once more (`(a % b + b) % b`)
        dividend, divisor = (self._print(a) for a in expr.args)
        if expr.args[0].is_nonnegative and expr.args[1].is_positive:
            return f"(({dividend}) % ({divisor}))"
        return f"(((({dividend}) % ({divisor})) + ({divisor})) % ({divisor}))"

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exponent = expr.args
        if exponent == -1:
            return f"(1.0 / ({self._print(base)}))"
        if exponent.is_Integer and exponent > 0:
            return "(" + " * ".join([f"({self._print(base)})"] * int(exponent)) + ")"
        return f"{self.power}({self._print(base)}, {self._print(exponent)})"

    def _print_Relational(self, expr: sympy.Rel) -> str:
        # StrPrinter writes equalities as `Eq(a, b)`; generated code needs the operator (`if row == 1:`)
        return f"({self._print(expr.lhs)} {expr.rel_op} {self._print(expr.rhs)})"

    def _print_Mod(self, expr: Any) -> str:
        # sympy's Mod takes the divisor's sign (Python's %); Triton's integer % takes the dividend's
        # (C's): `((a % b) + b) % b` is sympy's Mod under either, so it stays right in both backends
        value, divisor = (self._print(arg) for arg in expr.args)
        if expr.args[0].is_nonnegative and expr.args[1].is_positive:
            return f"(({value}) % ({divisor}))"
        return f"(((({value}) % ({divisor})) + ({divisor})) % ({divisor}))"

    def _print_Abs(self, expr: Any) -> str:
        return f"{self.absolute}({self._print(expr.args[0])})"

    def _print_sign(self, expr: Any) -> str:
        value = self._print(expr.args[0])
        return f"{self.where}({value} > 0, 1, {self.where}({value} < 0, -1, 0))"

    def _print_Piecewise(self, expr: Any) -> str:
        # (value, condition) pairs, the last one's condition True: nested selects from the back
        text = self._print(expr.args[-1][0])
        for value, condition in reversed(expr.args[:-1]):
            text = f"{self.where}({self._print(condition)}, {self._print(value)}, {text})"
        return text

    def _print_ITE(self, expr: Any) -> str:
        return f"{self.where}({', '.join(self._print(arg) for arg in expr.args)})"

    def _print_BooleanTrue(self, expr: Any) -> str:
        return "True"

    def _print_BooleanFalse(self, expr: Any) -> str:
        return "False"

    def _print_Function(self, expr: Any) -> str:
        # StrPrinter would write the bare sympy name (`Mod(x, 2)`), a NameError in generated code
        raise exc.UnsupportedOperationError(
            f"a size expression uses {type(expr).__name__}, which Tessera cannot write into kernel code: {expr}",
            hint="compute it with integer arithmetic (+, -, *, //, %, min, max) on sizes instead")

    def _print_Infinity(self, expr: Any) -> str:
        return "float('inf')"

    def _print_NegativeInfinity(self, expr: Any) -> str:
        return "float('-inf')"

    def _print_Float(self, expr: sympy.Float) -> str:
        return repr(float(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"({expr.p} / {expr.q})"


def print_with(printer: ExprPrinter, expr: Any) -> str:
    """`expr` (a sympy expression or a Python constant) printed by `printer`."""
    if isinstance(expr, bool):
        return repr(expr)
    if isinstance(expr, float):
        return repr(expr) if expr == expr and abs(expr) != float("inf") else f"float('{expr}')"
    if isinstance(expr, int):
        return str(expr)
    return printer.doprint(expr)


# Elementwise ops that Triton and JAX both spell as Python operators (operands `{0} {1}`, each
# already cast to the dtype the node computes in): shared by the backends' template tables.
PYTHON_OPERATOR_TEMPLATES: dict[str, str] = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "truediv": "({0} / {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "bitwise_and": "({0} & {1})",
    "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})",
    "neg": "(-{0})",
}

class EmitterBase:
    """Lines at an indent, and the names of axes: index vector `idx_t0`, mask `mask_t0`."""

    lines: list[str]
    indent: int
    last_comment: str | None
    locations: dict[int, Any]

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def name_of(self, node: Node) -> str:
        return node.name

    @staticmethod
    def placed(name: str, position: int, rank: int) -> str:
        """`name` (a vector) as dim `position` of a rank-`rank` block: `idx_t0[:, None]`."""
        if rank <= 1:
            return name
        return f"{name}[{', '.join(':' if i == position else 'None' for i in range(rank))}]"

    def axis_index(self, axis: Axis, shape: tuple[Axis, ...]) -> str:
        return self.placed(f"idx_{axis.name}", shape.index(axis), len(shape))

    def axis_mask(self, axis: Axis, shape: tuple[Axis, ...]) -> str:
        return self.placed(f"mask_{axis.name}", shape.index(axis), len(shape))

    def shape_mask(self, shape: tuple[Axis, ...]) -> list[str]:
        return [self.axis_mask(axis, shape) for axis in shape if axis is not UNIT and axis.needs_mask]


def reduction_identity(fn: str, dtype: Any, infinity: str) -> str:
    """The value masked lanes of a reduction take so they never win (`infinity`: the backend's +inf)."""
    if fn == "sum":
        return "0"
    largest = fn in ("amin", "argmin")
    if dtype.is_floating_point:
        return infinity if largest else f"-{infinity}"
    if dtype == torch.bool:
        return "1" if largest else "0"
    info = torch.iinfo(dtype)
    return str(info.max if largest else info.min)


def provably_inside(index: Any, size: Any) -> bool:
    """Whether a scalar index is a constant inside `[0, size)` for a constant size."""
    index, size = sympy.sympify(index), sympy.sympify(size)
    return bool(index.is_Integer and size.is_Integer and 0 <= int(index) < int(size))


def find_run(shape: tuple[Axis, ...], run: tuple[Axis, ...]) -> int:
    """Where a gather index's axes `run` sit among a load's axes `shape`."""
    for start in range(len(shape) - len(run) + 1):
        if all(a is b or b is UNIT for a, b in zip(shape[start:], run)):
            return start
    return 0


def gather_expanders(node: Any) -> dict[int, str]:
    """Per gathered dim of a load/store node, the subscript (`[None, :, :]`) that places its
    index tensor among the node's axes, or "" where it already has the node's rank. Index
    tensors broadcast together as in torch (aligned from the right), and their result dims
    stand where the highest-rank one's axes sit among the node's."""
    accesses = node.params["accesses"]
    gathered = {dim: a.value.shape for dim, a in enumerate(accesses) if a.kind is AccessKind.VALUE}
    if not gathered:
        return {}
    rank, gather_rank = len(node.shape), max(map(len, gathered.values()))
    offset = find_run(node.shape, next(s for s in gathered.values() if len(s) == gather_rank))
    result = {}
    for dim, value_shape in gathered.items():
        pieces = ["None"] * rank
        for i in range(len(value_shape)):
            pieces[offset + gather_rank - len(value_shape) + i] = ":"
        result[dim] = f"[{', '.join(pieces)}]" if len(value_shape) < rank else ""
    return result


def table_lowers(op: Op, fn: str | None, lowerings: Mapping[Op, Any], elementwise: Mapping[str, Any] | set[str],
                 reductions: Mapping[str, Any] | set[str], scans: Mapping[str, Any] | set[str] = frozenset()) -> bool:
    """Whether a backend's tables lower `op` (and, for elementwise ops, reductions and scans, `fn`)."""
    if op not in lowerings:
        return False
    if fn is None:
        return True
    if op is Op.ELEMENTWISE:
        return fn in elementwise
    if op is Op.REDUCE:
        return fn in reductions
    if op is Op.SCAN:
        return fn in scans
    return True


def refuse_unlowered(backend: Any, block: Block, hint: str) -> None:
    """UnsupportedOperationError at the first node of `block` (loop bodies included) that `backend`
    has no lowering for, naming the op, its function and the backend."""
    for node in walk(block):
        fn = node.params.get("fn") if node.op in (Op.ELEMENTWISE, Op.REDUCE, Op.SCAN) else None
        if node.op not in backend.supported_ops or not backend.lowers(node.op, fn):
            raise exc.UnsupportedOperationError(
                f"the {backend.title} backend has no lowering for {node.op.value}{f' {fn}' if fn else ''}",
                location=node.location, hint=hint)


def emit_block(emitter: Any, block: Block, lowerings: Mapping[Op, Callable[[Any, Node], None]],
               backend: str) -> None:
    """Each node's lines, under a `# file:line: source` comment per run of nodes from one line."""
    for node in block.nodes:
        if node.location is not None:
            comment = (f"# {os.path.basename(node.location.filename)}:{node.location.lineno}: "
                       f"{node.location.source_line().strip()}")
            if comment != emitter.last_comment:
                emitter.line(comment)
                emitter.last_comment = comment
            emitter.locations[len(emitter.lines)] = node.location  # the node's first line, 0-based
        rule = lowerings.get(node.op)
        if rule is None:
            raise exc.UnsupportedOperationError(f"no {backend} lowering for IR op {node.op.value!r}",
                                                location=node.location)
        rule(emitter, node)
