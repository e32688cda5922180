"""Sympy expressions printed as JAX scalar code (host symbols are scalars read at the kernel top)."""
from __future__ import annotations

from typing import Any

from tessera.backends.source_text import ExprPrinter, print_with


class JaxExprPrinter(ExprPrinter):
    """Min/Max as jnp.minimum/maximum, integer floor/ceil divisions as `//`."""

    minimum = "jnp.minimum"
    maximum = "jnp.maximum"
    float_floor = "jnp.floor"
    float_ceil = "jnp.ceil"
    power = "jnp.power"
    absolute = "jnp.abs"
    where = "jnp.where"


_PRINTER = JaxExprPrinter()


def print_expr(expr: Any) -> str:
    """`expr` as a JAX expression: `print_expr(sympy.Min(n, 64)) == 'jnp.minimum(64, n)'`."""
    return print_with(_PRINTER, expr)
