"""Sympy expressions printed as JAX scalar code (host symbols are scalars read at the kernel top)."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

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


class BlockedJaxExprPrinter(JaxExprPrinter):
    """The blocked (TPU) form's printer: integer floor and ceiling divisions through the module's
    `int_floordiv` helper, as Mosaic lowers `//`'s sign correction only on a TPU host."""

    def _print_floor(self, expr: Any) -> str:
        division = self.integer_division(expr.args[0])
        if division is not None:
            return f"int_floordiv({division[0]}, {division[1]})"
        return super()._print_floor(expr)

    def cdiv(self, numerator: str, denominator: str) -> str:
        return f"(-int_floordiv(-({numerator}), {denominator}))"


_PRINTERS = {False: JaxExprPrinter(), True: BlockedJaxExprPrinter()}
_BLOCKED = contextvars.ContextVar("tessera_pallas_blocked_printing", default=False)


@contextlib.contextmanager
def blocked_printing(blocked: bool) -> Iterator[None]:
    """Print with the blocked form's printer inside the block when `blocked`."""
    token = _BLOCKED.set(blocked)
    try:
        yield
    finally:
        _BLOCKED.reset(token)


def print_expr(expr: Any) -> str:
    """`expr` as a JAX expression: `print_expr(sympy.Min(n, 64)) == 'jnp.minimum(64, n)'`."""
    return print_with(_PRINTERS[_BLOCKED.get()], expr)
