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
recorded global. Attribute chains on a global (`cfg.SCALE`, `settings_module.USE_BIAS`,
`cfg.inner.eps`) are recorded the same way when every step is a plain attribute (in a module's
or an instance's `__dict__`, or a class attribute): reading one never runs user code (no
property or `__getattr__`). Not seen (README, "Current limits"): attributes reached through a
property or `__getattr__`, globals read through `getattr`/`eval`, contents of a helper's closure.
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


_ATTRIBUTE_LOADS = ("LOAD_ATTR", "LOAD_METHOD")


def _is_library_module(module: types.ModuleType) -> bool:
    return module.__name__.split(".", 1)[0] in _LIBRARY_PREFIXES


def _global_reads(code: types.CodeType) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(name, attribute chain) for each global the code (and the functions defined in it) loads:
    `cfg.inner.eps` gives ("cfg", ("inner", "eps")), a bare `SCALE` gives ("SCALE", ())."""
    instructions = list(dis.get_instructions(code))
    for position, instruction in enumerate(instructions):
        if instruction.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
            continue
        attributes: list[str] = []
        for following in instructions[position + 1:]:
            if following.opname not in _ATTRIBUTE_LOADS:
                break
            attributes.append(following.argval)
        yield instruction.argval, tuple(attributes)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_reads(constant)


def _plain_attribute(owner: Any, name: str) -> Any:
    """`owner.name` where reading it runs no user code, else _MISSING: a module's or an
    instance's own attribute, or a class attribute that is not a descriptor."""
    namespace = getattr(owner, "__dict__", None)
    if isinstance(namespace, (dict, types.MappingProxyType)) and name in namespace:
        value = namespace[name]
        if isinstance(owner, (types.ModuleType, type)) or not hasattr(type(value), "__get__"):
            return value
        return _MISSING
    for klass in type(owner).__mro__:
        if name in klass.__dict__:
            value = klass.__dict__[name]
            return _MISSING if hasattr(type(value), "__get__") else value
    return _MISSING


def _resolve(namespace: dict, name: str, attributes: tuple[str, ...]) -> Any:
    value = namespace.get(name, _MISSING)
    for attribute in attributes:
        if value is _MISSING:
            break
        value = _plain_attribute(value, attribute)
    return value


def fingerprint(value: Any) -> tuple[Any, bool]:
    """What a recorded global is compared by, and whether that is its identity: plain data by
    its typed value (so `2` -> `2.0`, or a list mutated in place, counts as a change), anything
    else by identity (held weakly where possible: see IdentityKey)."""
    key = constant_key(value)
    return (key, False) if key is not None else (IdentityKey(value), True)


class GlobalReads:
    """The globals one body read when it compiled: (namespace, name, attribute chain, fingerprint,
    by identity)."""

    __slots__ = ("entries",)

    def __init__(self, entries: tuple[tuple[dict, str, Any, bool], ...]) -> None:
        self.entries = entries

    @classmethod
    def of(cls, body: Callable[..., Any], captured: list[Any] = ()) -> GlobalReads | None:  # type: ignore[assignment]
        """The user globals `body` reads (through its helpers too), or None when there is none.

        `captured` are the body's closure values: a helper function passed in that way is
        followed into the globals it reads as well.
        """
        entries: dict[tuple[int, str, tuple[str, ...]], tuple[dict, str, tuple[str, ...], Any, bool]] = {}
        seen: set[int] = set()

        def record(namespace: dict, name: str, attributes: tuple[str, ...], value: Any, depth: int) -> None:
            entries.setdefault((id(namespace), name, attributes), (namespace, name, attributes, *fingerprint(value)))
            if isinstance(value, types.FunctionType):
                visit(value.__code__, value.__globals__, depth + 1)

        def visit(code: types.CodeType, namespace: dict, depth: int) -> None:
            if id(code) in seen or depth > _MAX_HELPER_DEPTH:
                return
            seen.add(id(code))
            for name, attributes in _global_reads(code):
                if name not in namespace:
                    continue  # a builtin: not rebound by user programs
                value = namespace[name]
                if _is_library(value) or (isinstance(value, types.ModuleType) and _is_library_module(value)):
                    continue
                if not isinstance(value, types.ModuleType):
                    record(namespace, name, (), value, depth)
                # Each plain step of `cfg.inner.eps` is recorded: rebinding `cfg.inner` or
                # setting `eps` on it are both changes. Steps reaching library objects stop.
                for length in range(1, len(attributes) + 1):
                    value = _resolve(namespace, name, attributes[:length])
                    if value is _MISSING or isinstance(value, types.ModuleType) or _is_library(value):
                        break
                    record(namespace, name, attributes[:length], value, depth)

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
        for namespace, name, attributes, recorded, by_identity in self.entries:
            current = _resolve(namespace, name, attributes) if attributes else namespace.get(name, _MISSING)
            if by_identity:
                if recorded.target() is not current:
                    return ".".join((name, *attributes))
            elif current is _MISSING or constant_key(current) != recorded:
                return ".".join((name, *attributes))
        return None

    def hold(self) -> bool:
        """Whether every recorded global still has its recorded value."""
        return self.changed() is None

    def names(self) -> tuple[str, ...]:
        return tuple(".".join((entry[1], *entry[2])) for entry in self.entries)


_MISSING = object()
