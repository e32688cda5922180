"""Primitives: one named operation with its rules, bound through the active interpreter.

A primitive carries its eager rule (the meaning of the op) and its shape rule; other layers
(the Triton backend, the printer) keep their own tables keyed by primitive. Public `hl.`
functions normalize their arguments and call `prim.bind(...)`; whichever interpreter is active
(eager execution or tracing) decides what happens, so op code never asks "am I tracing?".

>>> double_p = Primitive("double")
>>> double_p.def_eager(lambda x: 2 * x)  # doctest: +ELLIPSIS
<function ...>
"""
from __future__ import annotations

from typing import Any, Callable

from tessera.ir import interpreter as _interpreter

ALL_PRIMITIVES: dict[str, Primitive] = {}


class Primitive:
    """A named tile operation. `bind` routes it to the active interpreter."""

    def __init__(self, name: str, *, device_only: bool = True) -> None:
        if name in ALL_PRIMITIVES:
            raise ValueError(f"primitive {name!r} defined twice")
        self.name = name
        # device-only primitives must run inside a tile loop; host-safe ones may run anywhere
        # in a kernel (hl.specialize, hl.register_block_size).
        self.device_only = device_only
        self.eager_rule: Callable[..., Any] | None = None
        self.shape_rule: Callable[..., Any] | None = None
        # trace_rule(tracer, *args, **params) records IR; absent means "no compiled lowering"
        self.trace_rule: Callable[..., Any] | None = None
        ALL_PRIMITIVES[name] = self

    def __repr__(self) -> str:
        return f"{self.name}_p"

    def bind(self, *args: Any, **params: Any) -> Any:
        return _interpreter.current(self.name).process(self, args, params)

    def def_eager(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        self.eager_rule = rule
        return rule

    def def_trace(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        self.trace_rule = rule
        return rule

    def def_shape(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        self.shape_rule = rule
        return rule
