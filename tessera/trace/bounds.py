"""The lower end of every access: what the trace can prove nonnegative, and what it must check.

Upper ends are proved by guards or masked (`indexing._tile_bound`); this module does the same
for lower ends. A tile of `hl.tile(begin, end)` starts at `begin`, a grid index at the grid's
begin, and either may be negative (a host int, or a jagged offset loaded on the device). An
index is known nonnegative when it is a nonnegative int, or an expression over loop variables
(program ids, tile offsets, inner-loop variables) whose loops provably start at or above 0.
Everything else is checked: host values by a guard (or an error when this call's value is
negative), device values by a mask in the generated code.

>>> minimums = {pid: sympy.Integer(0)}                       # doctest: +SKIP
>>> provably_nonnegative(pid * 6 + 1, minimums)              # doctest: +SKIP
True
>>> lower_bound(begin + pid * 4, minimums)                   # doctest: +SKIP
begin
"""
from __future__ import annotations

from typing import Any, Mapping

import sympy


def lower_bound(expr: Any, minimums: Mapping[sympy.Symbol, Any]) -> sympy.Expr | None:
    """An expression free of loop variables that `expr` never goes below, or None if none is found.

    Each loop variable is at least its loop's begin (`minimums`, whose begins may name outer
    loop variables); where `expr` grows with every loop variable (`begin + pid * 4`), its least
    value is at the loops' begins.
    """
    expr = sympy.sympify(expr)
    slack: dict[sympy.Symbol, sympy.Expr] = {}
    for symbol in expr.free_symbols & set(minimums):
        low = lower_bound(minimums[symbol], minimums)
        if low is None:
            return None
        slack[symbol] = low + sympy.Dummy(symbol.name, integer=True, nonnegative=True)
    if not slack:
        return expr
    shifted = expr.xreplace(slack)
    dummies = {dummy: sympy.Integer(0) for dummy in shifted.free_symbols if isinstance(dummy, sympy.Dummy)}
    least = shifted.xreplace(dummies)
    return least if sympy.expand(shifted - least).is_nonnegative else None


def provably_nonnegative(expr: Any, minimums: Mapping[sympy.Symbol, Any]) -> bool:
    """Whether `expr >= 0` holds on every run, without a guard (host symbols prove nothing)."""
    least = lower_bound(expr, minimums)
    return least is not None and bool(least.is_nonnegative)
