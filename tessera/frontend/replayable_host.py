"""Whether a kernel's host code may be replayed instead of run, read from its source.

A cache-hit call still runs the kernel's host code: `torch.broadcast_tensors`, `torch.empty`,
`x.size()`... On a GPU that Python costs more than torch's whole `x + y` (issue 17, item 7).
Host code written only with the forms below computes nothing but metadata (sizes, dtypes, views
of the arguments) and fresh allocations, each a function of the arguments' exact facts (shapes,
strides, dtypes, devices, scalar values), and has no other effect. For such a kernel a call
whose arguments repeat a recorded call's facts may skip it: allocate what it allocated, launch
what it launched, return what it returned (runtime/host_replay.py).

Forms accepted, at the top level of the kernel's body (anything else: no replay):

- `name = expr`, `a, b = expr`, `name: T = expr`; `assert test[, message]`; a docstring; `pass`;
- `for ... in hl.tile(...)` / `hl.grid(...)`: a launch (its body is device code, not host code);
- a final `return` of names, constants or a tuple of them.

An expression is a constant, a parameter or earlier local, a global bound to a module or function
listed below (checked again on every replay: a rebound global stops replays) or a closure
variable bound to one (the rewrite reads those once), arithmetic, a tuple
or list, `t.shape` / `t.dtype` / `t.device` / `t.ndim` / `t.T` / `t.mT`, a constant index of
`t.shape`, `t.size()` or `t.stride()`, a call of a listed pure tensor method (sizes and views:
`size`, `view`, `expand`, `transpose`, ...) or of a listed function (`torch.broadcast_tensors`,
`torch.promote_types`, `torch.empty`, ...). `torch.empty` / `zeros` / `empty_strided` must name
`dtype=` and `device=`: their defaults are global state (`torch.set_default_dtype`).

Nothing here can write a tensor, draw random numbers, read a tensor's values (as a size, `if`
or index) or depend on global state other than the checked globals. What the source cannot
show (a copy where a view was expected, a value read from a one-element tensor) the recording
refuses (host_replay.py): only arguments, their views and allocations named here may reach a
launch or the result.

>>> form = replayable_host(KernelSource(add))       # doctest: +SKIP
>>> form.allocations
{'out': 'empty'}
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import textwrap
import types
from typing import Any, Callable

import torch

from tessera.frontend.source import KernelSource
from tessera.language.tile import grid, tile

# functions host code may call: pure, no global state read (`torch.result_type` reads the default dtype)
_PURE_FUNCTIONS = (torch.broadcast_tensors, torch.broadcast_shapes, torch.promote_types, len, min, max, abs)
# allocations: (function, its contents); torch.empty & co. without *_like read default dtype and device
_ALLOCATING_FUNCTIONS = {torch.empty: "empty", torch.empty_like: "empty", torch.empty_strided: "empty",
                         torch.zeros: "zeros", torch.zeros_like: "zeros"}
_NEEDS_DTYPE_AND_DEVICE = (torch.empty, torch.empty_strided, torch.zeros)
_ALLOCATING_METHODS = {"new_empty": "empty", "new_zeros": "zeros"}
_ALLOCATION_KEYWORDS = {"dtype", "device", "memory_format"}
# tensor methods without effects whose results are sizes, flags or views (`contiguous`, `reshape`:
# a copy at most, which the recording refuses wherever it would reach a launch)
_PURE_METHODS = {"size", "stride", "dim", "numel", "element_size", "is_contiguous", "expand", "expand_as",
                 "broadcast_to", "view", "reshape", "contiguous", "unsqueeze", "squeeze", "t", "transpose",
                 "permute"}
_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "T", "mT"}
_SIZE_SOURCES = {"size", "stride"}  # t.size()[i], t.stride()[i]
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_GLOBAL_VALUES = (types.ModuleType, torch.dtype, torch.memory_format)  # a global name may hold these too


@dataclasses.dataclass(frozen=True)
class ReplayableHost:
    """What a replay needs from the source: which locals hold fresh allocations (name -> 'empty'
    or 'zeros'), the names the `return` gives (None: a constant there; () when it returns one
    value that is not a tuple display: `single`), and the globals to check on every replay."""

    allocations: dict[str, str]
    returned: tuple[str | None, ...]
    single: bool
    global_names: tuple[tuple[str, Any], ...]


def replayable_host(source: KernelSource, host: Callable[..., Any]) -> ReplayableHost | None:
    """The replay form of the kernel's host code, or None where it is not replayable. `host`:
    the rewritten function that runs it (rewrite.py), whose closure holds the values the
    kernel's closure variables had when it was rewritten (fixed from then on)."""
    tree = ast.parse(textwrap.dedent(source.text)).body[0]  # a fresh parse: the rewrite edits source.tree
    if not isinstance(tree, ast.FunctionDef):
        return None
    arguments = tree.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs:
        return None
    cells = dict(zip(host.__code__.co_freevars, (cell.cell_contents for cell in host.__closure__ or ())))
    checker = _HostChecker(source, {argument.arg for argument in arguments.args}, cells)
    return checker.check(tree.body)


class _HostChecker:
    """Walks the host statements; `None` from `check` at the first form it does not accept."""

    def __init__(self, source: KernelSource, parameters: set[str], cells: dict[str, Any]) -> None:
        self.fn = source.fn
        self.cells = cells
        self.parameters = parameters
        self.locals: set[str] = set()
        self.stores: dict[str, int] = {}  # how often each local is bound
        self.allocations: dict[str, str] = {}
        self.globals: dict[str, Any] = {}

    def check(self, body: list[ast.stmt]) -> ReplayableHost | None:
        for position, statement in enumerate(body):
            last = position == len(body) - 1
            if isinstance(statement, ast.Return) and last:
                return self._returned(statement.value)
            if not self._statement(statement, first=position == 0):
                return None
        return self._returned(None)

    def _statement(self, statement: ast.stmt, first: bool) -> bool:
        if isinstance(statement, ast.Pass):
            return True
        if isinstance(statement, ast.Expr):  # a docstring only: a bare call would be an effect
            return first and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)
        if isinstance(statement, ast.Assert):  # it passed when recorded, and its facts do not change
            return self._expression(statement.test, comparisons=True)
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if statement.value is None or not self._expression(statement.value):
                return False
            names = [self._target_names(target) for target in targets]
            if any(found is None for found in names):
                return False
            kind = self._allocation_kind(statement.value)
            for found in names:
                for name in found:  # type: ignore[union-attr]
                    self._bind(name)
                if kind is not None and len(found) == 1 and isinstance(targets[0], ast.Name):  # type: ignore[arg-type]
                    self.allocations[found[0]] = kind  # type: ignore[index]
            return True
        if isinstance(statement, ast.For):  # a tile loop: a launch; its body is device code
            if statement.orelse or not isinstance(statement.iter, ast.Call):
                return False
            if self._global_function(statement.iter.func) not in (tile, grid):
                return False
            if not all(self._expression(argument) for argument in (*statement.iter.args,
                                                                    *(k.value for k in statement.iter.keywords))):
                return False
            found = self._target_names(statement.target)
            for name in found or ():
                self._bind(name)  # the loop's index names: bound again on every call, never allocations
                self.stores[name] += 1
            return found is not None
        return False

    def _bind(self, name: str) -> None:
        self.locals.add(name)
        self.stores[name] = self.stores.get(name, 0) + 1

    def _target_names(self, target: ast.expr) -> list[str] | None:
        if isinstance(target, ast.Name):
            return [target.id]
        if isinstance(target, (ast.Tuple, ast.List)):
            names: list[str] = []
            for element in target.elts:
                inner = self._target_names(element)
                if inner is None:
                    return None
                names += inner
            return names
        return None  # a subscript or attribute store: a write

    def _returned(self, value: ast.expr | None) -> ReplayableHost | None:
        if value is None or isinstance(value, ast.Constant):
            returned: tuple[str | None, ...] = (None,)
            single = True
        elif isinstance(value, ast.Name):
            returned, single = (value.id,), True
        elif isinstance(value, (ast.Tuple, ast.List)) and all(isinstance(e, (ast.Name, ast.Constant)) for e in value.elts):
            returned = tuple(e.id if isinstance(e, ast.Name) else None for e in value.elts)
            single = False
        else:
            return None
        if value is not None and not self._expression(value):
            return None
        # an allocation bound twice may be either one: its contents are not known
        allocations = {name: kind for name, kind in self.allocations.items()
                       if self.stores.get(name) == 1 and name not in self.parameters}
        return ReplayableHost(allocations, returned, single, tuple(self.globals.items()))

    def _allocation_kind(self, value: ast.expr) -> str | None:
        if not isinstance(value, ast.Call):
            return None
        function = self._global_function(value.func)
        if function is not None:
            return _ALLOCATING_FUNCTIONS.get(function)
        if isinstance(value.func, ast.Attribute):
            return _ALLOCATING_METHODS.get(value.func.attr)
        return None

    def _global_function(self, node: ast.expr) -> Any:
        """What a callee resolves to through the kernel's globals (recorded for the replay's
        check), or None for a name bound in the kernel or a method of a value."""
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id in self.parameters or node.id in self.locals:
            return None
        value = self._global(node.id)
        for attribute in reversed(chain):
            value = getattr(value, attribute, None)
        return value

    def _global(self, name: str) -> Any:
        if name in self.fn.__code__.co_freevars:  # read once by the rewrite: no check on replay
            return self.cells.get(name)
        namespace = self.fn.__globals__
        value = namespace[name] if name in namespace else getattr(builtins, name, None)
        if value is not None:
            self.globals[name] = value
        return value

    def _expression(self, node: ast.expr, comparisons: bool = False) -> bool:
        """Whether `node` is made only of the accepted forms (see the module docstring)."""
        def accepted(child: ast.expr) -> bool:
            return self._expression(child, comparisons)

        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            if node.id in self.parameters or node.id in self.locals:
                return True
            return isinstance(self._global(node.id), _GLOBAL_VALUES)
        if isinstance(node, (ast.Tuple, ast.List)):
            return all(not isinstance(e, ast.Starred) and accepted(e) for e in node.elts)
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, _OPERATORS) and accepted(node.left) and accepted(node.right)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd)) and accepted(node.operand)
        if isinstance(node, ast.Attribute):
            resolved = self._global_function(node)
            if resolved is not None:
                return isinstance(resolved, _GLOBAL_VALUES)  # torch.float32, torch.contiguous_format
            return node.attr in _ATTRIBUTES and accepted(node.value)
        if isinstance(node, ast.Subscript):
            return self._size_index(node)
        if isinstance(node, ast.Call):
            return self._call(node, comparisons)
        if comparisons and isinstance(node, ast.Compare):
            return accepted(node.left) and all(accepted(c) for c in node.comparators)
        if comparisons and isinstance(node, ast.BoolOp):
            return all(accepted(v) for v in node.values)
        return False

    def _call(self, node: ast.Call, comparisons: bool) -> bool:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return False
        if not all(self._expression(a, comparisons) for a in (*node.args, *(k.value for k in node.keywords))):
            return False
        function = self._global_function(node.func)
        keywords = {k.arg for k in node.keywords}
        if function is not None:
            if any(function is f for f in _PURE_FUNCTIONS):
                return not keywords
            if function in _ALLOCATING_FUNCTIONS:
                if function in _NEEDS_DTYPE_AND_DEVICE and not {"dtype", "device"} <= keywords:
                    return False
                return keywords <= _ALLOCATION_KEYWORDS
            return False
        if not isinstance(node.func, ast.Attribute) or not self._expression(node.func.value, comparisons):
            return False
        if self._global_function(node.func.value) is not None:
            return False  # a method of a module (`torch.view`?): no function of the lists
        if node.func.attr in _ALLOCATING_METHODS:
            return keywords <= _ALLOCATION_KEYWORDS
        return node.func.attr in _PURE_METHODS and not keywords

    def _size_index(self, node: ast.Subscript) -> bool:
        """`t.shape[i]`, `t.size()[i]`, `t.stride()[i]` with constant indexes or slices."""
        value = node.value
        source = (isinstance(value, ast.Attribute) and value.attr == "shape"
                  or isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                  and value.func.attr in _SIZE_SOURCES and not value.args and not value.keywords)
        return source and self._expression(value) and _constant_index(node.slice)


def _constant_index(node: ast.expr) -> bool:
    if isinstance(node, ast.Slice):
        return all(part is None or _constant_index(part) for part in (node.lower, node.upper, node.step))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int
