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
property or `__getattr__`). So are a helper's closure cells (a `nonlocal` may rebind one) and
the attribute chains the body reads through an object it captures (`cfg.scale` of an object
passed as an argument: the variant is keyed by the object's identity, and a changed attribute
must not reuse it). Not seen (README, "Current limits (honest list)"): attributes reached through a property
or `__getattr__` (an `nn.Module`'s parameters), globals read through `getattr`/`eval`.
"""
from __future__ import annotations

import dis
import types
from typing import Any, Callable, Iterator

import torch

from tessera.compiler import captured_cells, holds_tensors
from tessera.runtime.constant_keys import IdentityKey, constant_key

# Modules whose functions and classes are library code: they are not rebound at run time, and
# their globals are not the user's; skipping them keeps the recorded set small.
_LIBRARY_PREFIXES = ("tessera", "torch", "triton", "numpy", "sympy", "math", "builtins", "operator",
                     "functools", "itertools", "typing", "collections", "dataclasses", "enum")
_MAX_HELPER_DEPTH = 8


def _is_library(value: Any) -> bool:
    if isinstance(value, torch.Tensor):  # a user's data (its class's module is torch's)
        return False
    module = getattr(value, "__module__", None)
    if not isinstance(module, str):
        return False
    return module.split(".", 1)[0] in _LIBRARY_PREFIXES


_ATTRIBUTE_LOADS = ("LOAD_ATTR", "LOAD_METHOD")


def _is_library_module(module: types.ModuleType) -> bool:
    return module.__name__.split(".", 1)[0] in _LIBRARY_PREFIXES


def _reads(code: types.CodeType, nested: bool = True) -> Iterator[tuple[bool, str, tuple[str, ...]]]:
    """(is a global, name, attribute chain) for each global or closure variable the code loads:
    `cfg.inner.eps` gives (True, "cfg", ("inner", "eps")), a bare `SCALE` (True, "SCALE", ()).
    Closure variables (LOAD_DEREF) are read in `code` itself only: a function defined inside it
    has cells of its own, found when it is called as a helper."""
    instructions = list(dis.get_instructions(code))
    for position, instruction in enumerate(instructions):
        is_global = instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME")
        if not is_global and instruction.opname != "LOAD_DEREF":
            continue
        attributes: list[str] = []
        for following in instructions[position + 1:]:
            if following.opname not in _ATTRIBUTE_LOADS:
                break
            attributes.append(following.argval)
        yield is_global, instruction.argval, tuple(attributes)
    if nested:
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                yield from ((g, n, a) for g, n, a in _reads(constant, nested=True) if g)


class _CellRoot:
    """A closure cell read like a namespace: `get(name)` is the cell's current contents."""

    __slots__ = ("cell",)

    def __init__(self, cell: types.CellType) -> None:
        self.cell = cell

    def get(self, _name: str, default: Any) -> Any:
        try:
            return self.cell.cell_contents
        except ValueError:  # an empty cell
            return default


class _ObjectRoot:
    """A captured object read like a namespace, held weakly where it can be (IdentityKey): the
    variant is keyed by the object's identity, so its attributes are read from that object."""

    __slots__ = ("key",)

    def __init__(self, value: Any) -> None:
        self.key = IdentityKey(value)

    def get(self, _name: str, default: Any) -> Any:
        value = self.key.target()
        return default if value is None else value


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


def _resolve(namespace: Any, name: str, attributes: tuple[str, ...]) -> Any:
    value = namespace.get(name, _MISSING)
    for attribute in attributes:
        if value is _MISSING:
            break
        value = _plain_attribute(value, attribute)
    return value


def _layout(tensor: torch.Tensor) -> tuple:
    return (tensor.dtype, tensor.device, tuple(tensor.shape), tensor.stride(), tensor.storage_offset(),
            tensor.data_ptr())


class _TensorKey(IdentityKey):
    """A global tensor: this very tensor, with the layout it was traced with. The generated code
    reads it as a pointer argument with these sizes and strides compiled in, so a change of
    them in place (`resize_`, `set_`) counts as a change as well."""

    __slots__ = ("layout",)

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__(tensor)
        self.layout = _layout(tensor)

    def holds(self, current: Any) -> bool:
        return self.target() is current and _layout(current) == self.layout


def fingerprint(value: Any) -> tuple[Any, bool]:
    """What a recorded global is compared by, and whether that is its identity: plain data by
    its typed value (so `2` -> `2.0`, or a list mutated in place, counts as a change), anything
    else by identity (held weakly where possible: see IdentityKey), a tensor with its layout."""
    if isinstance(value, torch.Tensor):
        return _TensorKey(value), True
    key = constant_key(value)
    return (key, False) if key is not None else (IdentityKey(value), True)


class GlobalReads:
    """The globals one body read when it compiled: (namespace, name, attribute chain, fingerprint,
    by identity)."""

    __slots__ = ("entries",)

    def __init__(self, entries: tuple[tuple[Any, str, tuple[str, ...], Any, bool], ...]) -> None:
        self.entries = entries

    @classmethod
    def of(cls, body: Callable[..., Any], captured: list[Any] = ()) -> GlobalReads | None:  # type: ignore[assignment]
        """The user globals `body` reads (through its helpers too), or None when there is none.

        `captured` are the body's closure values: a helper function passed in that way is
        followed into the globals it reads as well.
        """
        entries: dict[tuple[int, str, tuple[str, ...]], tuple[Any, str, tuple[str, ...], Any, bool]] = {}
        roots: dict[int, Any] = {}  # id(cell or captured object) -> its root (one per object)
        seen: set[int] = set()

        def record(root: Any, name: str, attributes: tuple[str, ...], value: Any, depth: int) -> None:
            entries.setdefault((id(root), name, attributes), (root, name, attributes, *fingerprint(value)))
            if isinstance(value, types.FunctionType):
                visit(value, depth + 1)

        def record_chain(root: Any, name: str, attributes: tuple[str, ...], depth: int, bare: bool) -> None:
            value = root.get(name, _MISSING)
            if value is _MISSING or _is_library(value) or (
                    isinstance(value, types.ModuleType) and _is_library_module(value)):
                return
            if bare and not isinstance(value, types.ModuleType):
                record(root, name, (), value, depth)
            # Each plain step of `cfg.inner.eps` is recorded: rebinding `cfg.inner` or
            # setting `eps` on it are both changes. Steps reaching library objects stop.
            for length in range(1, len(attributes) + 1):
                value = _resolve(root, name, attributes[:length])
                if value is _MISSING or isinstance(value, types.ModuleType) or _is_library(value):
                    break
                record(root, name, attributes[:length], value, depth)

        def cell_root(function: types.FunctionType, name: str) -> Any:
            if name not in function.__code__.co_freevars or function.__closure__ is None:
                return None
            cell = function.__closure__[function.__code__.co_freevars.index(name)]
            return roots.setdefault(id(cell), _CellRoot(cell))

        def visit(function: types.FunctionType, depth: int, captured_by_body: bool = False) -> None:
            """A helper the body calls: its globals, and its closure cells (a `nonlocal` may
            rebind one), with their attribute chains. The tensors in the cells of a closure the
            body captures are not recorded: they are launch arguments already (`LaunchBinding`
            binds them, `call_keys` keys them), and a fresh closure per call must not pin the
            first call's tensors."""
            code = function.__code__
            if id(code) in seen or depth > _MAX_HELPER_DEPTH:
                return
            seen.add(id(code))
            for is_global, name, attributes in _reads(code):
                if is_global:
                    if name in function.__globals__:  # else a builtin: not rebound by user programs
                        record_chain(function.__globals__, name, attributes, depth, bare=True)
                else:
                    root = cell_root(function, name)
                    if root is None:
                        continue
                    value = root.get(name, _MISSING)
                    if captured_by_body and (isinstance(value, torch.Tensor) or holds_tensors(value)):
                        continue
                    if captured_by_body and captured_cells(value) is not None:
                        visit(value, depth + 1, captured_by_body=True)  # keyed per launch as well
                        continue
                    record_chain(root, name, attributes, depth, bare=True)

        if getattr(body, "__globals__", None) is None:
            return None
        # The body itself: its captured values are keyed per launch (call_keys.py), bare; what
        # it reads *through* them (`cfg.scale` of an object passed in) is recorded here.
        seen.add(id(body.__code__))
        freevars = body.__code__.co_freevars
        for is_global, name, attributes in _reads(body.__code__):
            if is_global:
                if name in body.__globals__:
                    record_chain(body.__globals__, name, attributes, 0, bare=True)
            elif attributes and name in freevars and len(captured) == len(freevars):
                value = captured[freevars.index(name)]
                if constant_key(value) is None and not isinstance(value, (torch.Tensor, types.ModuleType)):
                    root = roots.setdefault(id(value), _ObjectRoot(value))
                    record_chain(root, name, attributes, 0, bare=False)
        for value in captured:
            if isinstance(value, types.FunctionType) and not _is_library(value):
                visit(value, 1, captured_by_body=True)
        return cls(tuple(entries.values())) if entries else None

    def changed(self) -> str | None:
        """The name of the first recorded global whose value changed (or was deleted), else None."""
        for namespace, name, attributes, recorded, by_identity in self.entries:
            current = _resolve(namespace, name, attributes) if attributes else namespace.get(name, _MISSING)
            if by_identity:
                if not (recorded.holds(current) if isinstance(recorded, _TensorKey) else recorded.target() is current):
                    return ".".join((name, *attributes))
            elif current is _MISSING or constant_key(current) != recorded:
                return ".".join((name, *attributes))
        return None

    def hold(self) -> bool:
        """Whether every recorded global still has its recorded value."""
        return self.changed() is None

    def tensors(self) -> tuple[tuple[str, torch.Tensor], ...]:
        """(name, tensor) of each recorded global that is a tensor (`SCALE_TABLE`, `cfg.weight`,
        a helper's captured tensor): the trace reads each as a kernel argument of its own."""
        found = []
        for _namespace, name, attributes, recorded, _by_identity in self.entries:
            tensor = recorded.target() if isinstance(recorded, _TensorKey) else None
            if tensor is not None:
                found.append(("__".join((name, *attributes)), tensor))
        return tuple(found)

    def names(self) -> tuple[str, ...]:
        return tuple(".".join((entry[1], *entry[2])) for entry in self.entries)


_MISSING = object()
