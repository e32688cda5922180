"""Symbols of a traced kernel: the runtime scalars it takes and the guards it relies on."""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from tessera import exc
from tessera.location import user_location
from tessera.trace.proxy import HostScalar


@dataclasses.dataclass
class SymbolTable:
    """Named symbols with their dtype and, while tracing, the value of the call being traced."""

    dtypes: dict[sympy.Symbol, torch.dtype] = dataclasses.field(default_factory=dict)
    values: dict[sympy.Symbol, Any] = dataclasses.field(default_factory=dict)
    # equalities the trace relied on: symbol -> the expression it was unified with
    replacements: dict[sympy.Symbol, sympy.Expr] = dataclasses.field(default_factory=dict)
    guards: list[tuple[sympy.Basic, str]] = dataclasses.field(default_factory=list)
    # runtime scalars computed inside the kernel (`m = hl.load(sizes, [g])`): a symbol named
    # after its IR node, so printed code reads the node's variable; never evaluated on the host
    device: set[sympy.Symbol] = dataclasses.field(default_factory=set)

    def new(self, name: str, dtype: torch.dtype, value: Any) -> sympy.Symbol:
        symbol = HostScalar(name, integer=not dtype.is_floating_point)
        self.dtypes[symbol] = dtype
        self.values[symbol] = value
        return symbol

    def device_symbol(self, name: str) -> sympy.Symbol:
        """The symbol standing for the device scalar held by IR node `name`."""
        symbol = sympy.Symbol(name, integer=True)
        self.device.add(symbol)
        return symbol

    def on_device(self, expr: Any) -> bool:
        """Whether an expression depends on a runtime scalar computed inside the kernel."""
        return isinstance(expr, sympy.Basic) and bool(expr.free_symbols & self.device)

    def canonical(self, expr: Any) -> Any:
        if isinstance(expr, sympy.Basic) and self.replacements:
            return expr.xreplace(self.replacements)
        return expr

    def evaluate(self, expr: Any) -> Any:
        """The value of an expression for the call being traced."""
        if not isinstance(expr, sympy.Basic):
            return expr
        if self.on_device(expr):
            raise DeviceScalarError(f"{expr} depends on values loaded inside the kernel")
        try:
            value = sympy.sympify(expr.xreplace(self.values))
        except TypeError:  # sympy refuses to compare a NaN; Python's answer (False) is the kernel's
            names = sorted(expr.free_symbols, key=str)
            return sympy.lambdify(names, expr, modules="math")(*(self.values[name] for name in names))
        return int(value) if value.is_Integer else (bool(value) if value in (sympy.true, sympy.false) else float(value))

    def evaluate_or_none(self, expr: Any) -> Any:
        """`evaluate`, or None for an expression of values loaded inside the kernel."""
        return None if self.on_device(expr) else self.evaluate(expr)

    def guard(self, condition: sympy.Basic, reason: str) -> None:
        """Record a fact this trace assumes; it is checked before the variant is reused."""
        if condition is sympy.true or condition is True:
            return
        if self.on_device(condition):
            # a host-side check cannot read device data: the generated code masks instead
            raise DeviceScalarError(f"guard {condition} ({reason}) depends on values loaded inside the kernel")
        self.guards.append((condition, reason))

    def guard_equal(self, a: sympy.Expr, b: sympy.Expr, reason: str) -> None:
        """Make two symbolic sizes one: record the guard and substitute from now on."""
        a, b = self.canonical(a), self.canonical(b)
        if a == b:
            return
        self.guard(sympy.Eq(a, b), reason)
        if isinstance(b, sympy.Symbol) and b in self.dtypes:
            self.replacements[b] = a
        elif isinstance(a, sympy.Symbol) and a in self.dtypes:
            self.replacements[a] = b


class DeviceScalarError(exc.UnsupportedOperationError):
    """A compile-time decision needed a runtime scalar's value (one loaded inside the kernel)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, location=user_location(),
                         hint="this value is only known on the device; use it as a loop bound, slice bound "
                              "or view size, or compute it on the host and pass it as an argument")
