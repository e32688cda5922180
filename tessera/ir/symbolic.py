"""Facts about the sympy expressions of sizes, offsets and host scalars that sympy leaves open."""
from __future__ import annotations

import sympy


def is_integral(expr: sympy.Basic) -> bool:
    """Whether a host expression is an int. sympy answers None for `floor(n / floor(a / b))`
    (the divisor might be 0), which made int index math and `loaded * cdiv(n, b)` float32."""
    if expr.is_integer:
        return True
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        return True
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Min, sympy.Max, sympy.Mod)):
        return all(is_integral(arg) for arg in expr.args)
    if isinstance(expr, sympy.Pow):
        return is_integral(expr.base) and bool(expr.exp.is_Integer and expr.exp >= 0)
    return False
