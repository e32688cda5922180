"""Module globals a tile-loop body reads, recorded when it compiles and checked when it runs.

A loop body's free variables are its closure (keyed per launch, call_keys.py), but a *global*
it reads (`SCALE`, `if USE_BIAS:`, a helper function and the globals that helper reads) is
looked up while tracing and baked into the generated code. Eager mode reads the global afresh
on every call, so a compiled variant must not outlive the value it was traced with. As Triton
does for `@triton.jit` functions, each variant records the globals its body reads (found in the
bytecode of the body, its nested loop and branch functions and the Python helpers they call)
with their values, and a launch uses a variant only while they are unchanged: a new value
compiles a new variant (eager's answer), never runs a stale one.

>>> reads = GlobalReads.of(body)                          # doctest: +SKIP
>>> reads.changed()        # None while every recorded global keeps its value, else its name

Kept cheap on the hit path: a body that reads no user global records nothing (`of` returns
None) and its launches check nothing; otherwise a check is one dict lookup and compare per
recorded global. Not seen (README, "Current limits (honest list)"): attributes of a module or object read in
the body (`config.SCALE`), globals read through `getattr`/`eval`, contents of a helper's closure.
"""
from __future__ import annotations

import dis
import types
from typing import Any, Callable, Iterator

from tessera.runtime.constant_keys import IdentityKey, constant_key

# Modules whose functions and classes are library code: they are not rebound at run time, and
# their globals are not the user's; skipping them keeps the recorded set small.
_LIBRARY_PREFIXES = ("tessera", "torch", "triton", "numpy", "sympy", "math", "builtins", "operator",
                     "functools", "itertools", "typing", "collections", "dataclasses", "enum")
_MAX_HELPER_DEPTH = 8


def _is_library(value: Any) -> bool:
    module = getattr(value, "__module__", None)
    if not isinstance(module, str):
        return False
    return module.split(".", 1)[0] in _LIBRARY_PREFIXES


def _global_names(code: types.CodeType) -> Iterator[str]:
    """Names the code (and the functions defined in it) loads as globals."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield instruction.argval
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_names(constant)


def fingerprint(value: Any) -> tuple[Any, bool]:
    """What a recorded global is compared by, and whether that is its identity: plain data by
    its typed value (so `2` -> `2.0`, or a list mutated in place, counts as a change), anything
    else by identity (held weakly where possible: see IdentityKey)."""
    key = constant_key(value)
    return (key, False) if key is not None else (IdentityKey(value), True)


class GlobalReads:
    """The globals one body read when it compiled: (namespace, name, fingerprint, by identity)."""

    __slots__ = ("entries",)

    def __init__(self, entries: tuple[tuple[dict, str, Any, bool], ...]) -> None:
        self.entries = entries

    @classmethod
    def of(cls, body: Callable[..., Any], captured: list[Any] = ()) -> GlobalReads | None:  # type: ignore[assignment]
        """The user globals `body` reads (through its helpers too), or None when there is none.

        `captured` are the body's closure values: a helper function passed in that way is
        followed into the globals it reads as well.
        """
        entries: dict[tuple[int, str], tuple[dict, str, Any, bool]] = {}
        seen: set[int] = set()

        def visit(code: types.CodeType, namespace: dict, depth: int) -> None:
            if id(code) in seen or depth > _MAX_HELPER_DEPTH:
                return
            seen.add(id(code))
            for name in _global_names(code):
                if name not in namespace:
                    continue  # a builtin: not rebound by user programs
                value = namespace[name]
                if isinstance(value, types.ModuleType) or _is_library(value):
                    continue
                entries.setdefault((id(namespace), name), (namespace, name, *fingerprint(value)))
                if isinstance(value, types.FunctionType):
                    visit(value.__code__, value.__globals__, depth + 1)

        namespace = getattr(body, "__globals__", None)
        if namespace is None:
            return None
        visit(body.__code__, namespace, 0)
        for value in captured:
            if isinstance(value, types.FunctionType) and not _is_library(value):
                visit(value.__code__, value.__globals__, 1)
        return cls(tuple(entries.values())) if entries else None

    def changed(self) -> str | None:
        """The name of the first recorded global whose value changed (or was deleted), else None."""
        for namespace, name, recorded, by_identity in self.entries:
            current = namespace.get(name, _MISSING)
            if by_identity:
                if recorded.target() is not current:
                    return name
            elif current is _MISSING or constant_key(current) != recorded:
                return name
        return None

    def hold(self) -> bool:
        """Whether every recorded global still has its recorded value."""
        return self.changed() is None

    def names(self) -> tuple[str, ...]:
        return tuple(entry[1] for entry in self.entries)


_MISSING = object()
