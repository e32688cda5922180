"""Which argument sizes and ints the host code pins with `hl.specialize`, read from the source.

`hl.specialize(x.size(1))` makes a size a compile-time constant: each value is its own variant,
and a Config chosen for one value is often no choice for another (row blocks of 32 fit a width of
64; at a width of 5632 they spill registers and take a minute to compile). A call's Config is
chosen before its host code runs, keyed by size buckets (0, 1, >= 2), so the key must learn from
the source which values the host code will pin. Forms found, in the kernel's own body:

    hl.specialize(x.size(1)), hl.specialize(x.shape[-1]), hl.specialize(split)   # split: a parameter
    hl.specialize(x.stride(0))
    n = x.size(1); ...; hl.specialize(n)        m, n = x.shape; ...; hl.specialize(n)

Other forms (a size computed by arithmetic, through a helper) are not seen: their Config is
chosen per bucket, as for any dynamic size (README, "Current limits (honest list)").

>>> specialized_arguments(KernelSource(layer_norm_bwd), resolve)     # doctest: +SKIP
(('x', 1),)
"""
from __future__ import annotations

import ast
from typing import Any, Callable

import torch

from tessera.frontend.source import KernelSource
from tessera.ir import interpreter
from tessera.language.constexpr import specialize

# (parameter name, dim): a tensor parameter's size along dim; (parameter name, ("stride", dim)): its
# stride along dim; (parameter name, None): an int parameter
Pinned = tuple[str, "int | tuple[str, int] | None"]


def specialized_arguments(source: KernelSource, resolve: Callable[[ast.expr], Any]) -> tuple[Pinned, ...]:
    """The argument values the kernel's `hl.specialize` calls pin, in source order, without repeats."""
    function = source.tree
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a lambda: nothing to specialize
        return ()
    parameters = {arg.arg for arg in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    aliases = _size_aliases(function, parameters)
    found: list[Pinned] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and resolve(node.func) is specialize and len(node.args) == 1:
            pinned = _argument_size(node.args[0], parameters) or _argument_stride(node.args[0], parameters) \
                or aliases.get(_name(node.args[0]) or "")
            if pinned is None and _name(node.args[0]) in parameters:
                pinned = (_name(node.args[0]), None)
            if pinned is not None and pinned not in found:
                found.append(pinned)  # type: ignore[arg-type]
    return tuple(found)


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _argument_size(node: ast.expr, parameters: set[str]) -> Pinned | None:
    """`p.size(d)` or `p.shape[d]` with a constant d, of a parameter p."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size"
            and len(node.args) == 1 and not node.keywords):
        owner, dim = node.func.value, node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        owner, dim = node.value.value, node.slice
    else:
        return None
    index = _constant_int(dim)
    name = _name(owner)
    return (name, index) if name in parameters and index is not None else None


def _argument_stride(node: ast.expr, parameters: set[str]) -> Pinned | None:
    """`p.stride(d)` with a constant d, of a parameter p."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "stride"
            and len(node.args) == 1 and not node.keywords):
        return None
    index, name = _constant_int(node.args[0]), _name(node.func.value)
    return (name, ("stride", index)) if name in parameters and index is not None else None


def _constant_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant_int(node.operand)
        return -inner if inner is not None else None
    return None


def _size_aliases(function: ast.FunctionDef, parameters: set[str]) -> dict[str, Pinned]:
    """Names bound exactly once, by `n = p.size(d)` / `n = p.shape[d]` or `m, n = p.shape` / `p.size()`."""
    bindings: dict[str, list[Pinned | None]] = {}
    counted: set[int] = set()  # target Name nodes already counted through their Assign
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                bindings.setdefault(target.id, []).append(_argument_size(value, parameters))
                counted.add(id(target))
            elif isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
                owner = _whole_shape_of(value, parameters)
                for position, element in enumerate(target.elts):
                    if isinstance(element, ast.Name):
                        bindings.setdefault(element.id, []).append((owner, position) if owner else None)
                        counted.add(id(element))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in counted:
            # any other binding (a loop variable, `+=`, `with ... as n`, `a = b = ...`): no alias
            bindings.setdefault(node.id, []).append(None)
    return {name: found[0] for name, found in bindings.items()  # type: ignore[misc]
            if len(found) == 1 and found[0] is not None and name not in parameters}


def _whole_shape_of(node: ast.expr, parameters: set[str]) -> str | None:
    """The parameter p of `p.shape` or `p.size()`."""
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        name = _name(node.value)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size"
          and not node.args and not node.keywords):
        name = _name(node.func.value)
    else:
        return None
    return name if name in parameters else None


def pinned_values(pinned: tuple[Pinned, ...], names: tuple[str, ...], args: tuple, kwargs: dict) -> tuple:
    """This call's values of the pinned sizes and ints (None where one cannot be read)."""
    values = []
    for name, dim in pinned:
        position = names.index(name)
        value = args[position] if position < len(args) else kwargs.get(name)
        try:
            values.append(int(value) if dim is None else int(value.stride(dim[1])) if isinstance(dim, tuple)
                          else int(value.size(dim)))
        except (AttributeError, IndexError, TypeError, ValueError, RuntimeError):
            values.append(None)
    return tuple(values)


def pinned_size(tensor: Any, dim: int | None, value: Any) -> Any:
    """`value` (`tensor.size(dim)`, all sizes when dim is None) for `hl.specialize(x.size(d))`,
    which the frontend rewrites to `hl.specialize(pinned_size(x, d, x.size(d)))` (also for
    `n = x.size(d); ...; hl.specialize(n)`): Helion pins the size itself, so every use of it in
    the kernel (`x.size(d)` inside the loop, the dims unified with it) is the constant, not only
    the int the call returns. The host interpreter of a compiled call pins the dim on the tensor
    for that call (while its size still equals `value`); eager mode needs no pin.

    >>> hl.specialize(pinned_size(x, 1, x.size(1)))    # doctest: +SKIP
    """
    pin = getattr(interpreter.active(), "pin_dims", None)
    if pin is not None and isinstance(tensor, torch.Tensor):
        if _matches(tensor, dim, value):
            pin(tensor, tuple(range(tensor.dim())) if dim is None else (dim % max(tensor.dim(), 1),))
    return value


def _matches(tensor: torch.Tensor, dim: int | None, value: Any) -> bool:
    try:
        return tuple(tensor.size()) == tuple(value) if dim is None else tensor.size(dim) == value
    except (TypeError, IndexError, RuntimeError):
        return False


PINNED_SIZE = "_tessera_pinned_size"  # the rewritten host code's name for `pinned_size`


class SizePins(ast.NodeTransformer):
    """Host statements with `hl.specialize(x.size(d))`, `hl.specialize(x.shape[d])`,
    `hl.specialize(x.shape)` and `hl.specialize(n)` (n bound once to a parameter's size) routed
    through `pinned_size`, so the size is pinned where it is traced, not only where it is returned.
    Functions nested in the statements (launch bodies, helpers) are not entered."""

    def __init__(self, function: ast.FunctionDef, resolve: Callable[[ast.expr], Any]) -> None:
        parameters = {arg.arg for arg in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
        rebound = {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
        self.aliases = {name: pinned for name, pinned in _size_aliases(function, parameters).items()
                        if pinned[0] not in rebound}
        self.resolve = resolve

    def visit_FunctionDef(self, node: ast.AST) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if len(node.args) != 1 or node.keywords or self.resolve(node.func) is not specialize:
            return node
        argument = node.args[0]
        pinned = _size_of_name(argument)
        if pinned is None and isinstance(argument, ast.Name) and argument.id in self.aliases:
            pinned = self.aliases[argument.id]
        if pinned is None:
            return node
        owner, dim = pinned
        call = ast.Call(ast.Name(PINNED_SIZE, ast.Load()),
                        [ast.Name(owner, ast.Load()), ast.Constant(dim), argument], [])
        node.args = [ast.copy_location(call, argument)]
        return node


def _size_of_name(node: ast.expr) -> Pinned | None:
    """(n, d) for `n.size(d)` / `n.shape[d]` with a constant d, (n, None) for `n.size()` / `n.shape`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
            and not node.keywords and len(node.args) <= 1:
        owner, dim = node.func.value, (_constant_int(node.args[0]) if node.args else None)
        if node.args and dim is None:
            return None
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        owner, dim = node.value.value, _constant_int(node.slice)
        if dim is None:
            return None
    elif isinstance(node, ast.Attribute) and node.attr == "shape":
        owner, dim = node.value, None
    else:
        return None
    return (owner.id, dim) if isinstance(owner, ast.Name) else None
