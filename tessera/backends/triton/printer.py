"""Sympy expressions printed as Triton scalar code."""
from __future__ import annotations

from typing import Any

from tessera.backends.source_text import ExprPrinter, print_with


class TritonExprPrinter(ExprPrinter):
    """Prints Min/Max as tl.minimum/tl.maximum and integer floor/ceil divisions as // and cdiv."""

    minimum = "tl.minimum"
    maximum = "tl.maximum"
    float_floor = "tl.floor"
    float_ceil = "tl.ceil"
    power = "libdevice.pow"
    absolute = "tl.abs"
    where = "tl.where"

    def cdiv(self, numerator: str, denominator: str) -> str:
        return cdiv_text(numerator, denominator)


def cdiv_text(numerator: str, denominator: str) -> str:
    """Ceiling division written out, as `tl.cdiv` computes it: the same code once compiled, but
    Triton's interpreter runs each call of a library function (`tl.cdiv` is one) by re-patching
    the language, about 10 ms per call per program."""
    return f"((({numerator}) + ({denominator}) - 1) // ({denominator}))"


_PRINTER = TritonExprPrinter()


def print_expr(expr: Any) -> str:
    return print_with(_PRINTER, expr)
