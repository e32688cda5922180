"""Sympy expressions printed as Triton scalar code."""
from __future__ import annotations

from typing import Any

import sympy
from sympy.printing.str import StrPrinter

from tessera.ir.symbolic import is_integral


class TritonExprPrinter(StrPrinter):
    """Prints Min/Max as tl.minimum/tl.maximum and integer floor/ceil divisions as // and cdiv."""

    def _fold(self, function: str, expr: sympy.Basic) -> str:
        args = [self._print(a) for a in expr.args]
        text = args[0]
        for arg in args[1:]:
            text = f"{function}({text}, {arg})"
        return text

    def _print_Min(self, expr: sympy.Min) -> str:
        return self._fold("tl.minimum", expr)

    def _print_Max(self, expr: sympy.Max) -> str:
        return self._fold("tl.maximum", expr)

    def _print_floor(self, expr: Any) -> str:
        numerator, denominator = sympy.fraction(sympy.together(expr.args[0]))
        if denominator != 1 and is_integral(numerator) and is_integral(denominator):
            return f"(({self._print(numerator)}) // ({self._print(denominator)}))"
        return f"tl.floor({self._print(expr.args[0])})"

    def _print_ceiling(self, expr: Any) -> str:
        numerator, denominator = sympy.fraction(sympy.together(expr.args[0]))
        if denominator != 1 and is_integral(numerator) and is_integral(denominator):
            return f"tl.cdiv({self._print(numerator)}, {self._print(denominator)})"
        return f"tl.ceil({self._print(expr.args[0])})"

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exponent = expr.args
        if exponent == -1:
            return f"(1.0 / ({self._print(base)}))"
        if exponent.is_Integer and exponent > 0:
            return "(" + " * ".join([f"({self._print(base)})"] * int(exponent)) + ")"
        return f"libdevice.pow({self._print(base)}, {self._print(exponent)})"

    def _print_Relational(self, expr: sympy.Rel) -> str:
        # StrPrinter writes equalities as `Eq(a, b)`; Triton needs the operator (`if row == 1:`)
        return f"({self._print(expr.lhs)} {expr.rel_op} {self._print(expr.rhs)})"

    def _print_Float(self, expr: sympy.Float) -> str:
        return repr(float(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"({expr.p} / {expr.q})"


_PRINTER = TritonExprPrinter()


def print_expr(expr: Any) -> str:
    if isinstance(expr, bool):
        return repr(expr)
    if isinstance(expr, float):
        return repr(expr) if expr == expr and abs(expr) != float("inf") else f"float('{expr}')"
    if isinstance(expr, int):
        return str(expr)
    return _PRINTER.doprint(expr)
