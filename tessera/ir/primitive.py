"""Primitives: one named operation with its rules, bound through the active interpreter.

A primitive carries its eager rule (the meaning of the op: what eager mode runs) and its trace
rule (the shape and dtype rule: it checks the operands, finds the result's axes and dtype, and
records IR nodes). Backends keep their own lowering tables keyed by IR `Op`. Public `hl.`
functions and the torch functions a primitive stands for reach it through `bind`; whichever
interpreter is active (eager execution or tracing) decides what happens, so op code never asks
"am I tracing?".

>>> double_p = Primitive("double")
>>> double_p.def_eager(lambda x: 2 * x)  # doctest: +ELLIPSIS
<function ...>
"""
from __future__ import annotations

from typing import Any, Callable

from tessera.ir import interpreter as _interpreter

ALL_PRIMITIVES: dict[str, Primitive] = {}
TORCH_FUNCTIONS: dict[Callable[..., Any], Primitive] = {}
"""torch callable (function or Tensor method) -> the primitive it means inside a tile loop."""


class Primitive:
    """A named tile operation. `bind` routes it to the active interpreter."""

    def __init__(self, name: str, *, device_only: bool = True,
                 torch_functions: tuple[Callable[..., Any], ...] = ()) -> None:
        if name in ALL_PRIMITIVES:
            raise ValueError(f"primitive {name!r} defined twice")
        self.name = name
        # device-only primitives must run inside a tile loop; host-safe ones may run anywhere
        # in a kernel (hl.specialize, hl.register_block_size).
        self.device_only = device_only
        self.eager_rule: Callable[..., Any] | None = None
        # trace_rule(tracer, *args, **params) checks shapes and dtypes and records IR
        self.trace_rule: Callable[..., Any] | None = None
        self.torch_functions = torch_functions
        for function in torch_functions:
            TORCH_FUNCTIONS[function] = self
        if torch_functions:  # eager mode runs the torch function itself
            self.eager_rule = torch_functions[0]
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


def torch_primitive(name: str, *functions: Callable[..., Any]) -> Callable[[Callable[..., Any]], Primitive]:
    """Decorator: the trace rule of a primitive that stands for these torch callables (and Tensor
    methods); its eager rule is the first of them.

    >>> @torch_primitive("neg", torch.neg, torch.Tensor.neg)     # doctest: +SKIP
    ... def _neg_trace(tracer, x): ...
    """
    def decorate(rule: Callable[..., Any]) -> Primitive:
        primitive = Primitive(name, torch_functions=functions)
        primitive.def_trace(rule)
        return primitive
    return decorate


def defined_primitive(name: str, eager_rule: Callable[..., Any], trace_rule: Callable[..., Any],
                      **options: Any) -> Primitive:
    """A primitive with both rules given at once (the registration line of an op block).

    >>> split_p = defined_primitive("split", _split_eager, _split_trace)    # doctest: +SKIP
    """
    primitive = Primitive(name, **options)
    primitive.def_eager(eager_rule)
    primitive.def_trace(trace_rule)
    return primitive
