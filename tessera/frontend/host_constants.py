"""Host locals that are compile-time constants, as Helion reads them: `block_m = 8` in the kernel's
host code, then `hl.arange(block_m)`, `hl.zeros([block_m, block_n])` or `range(block_m)` inside
the tile loop. A captured host int is otherwise a runtime argument (a symbol), which a register
size cannot be. A local counts when the kernel binds it exactly once, at the top level of its
body, to an expression of int literals and other such locals (`block_k = block_m * 2`); the
frontend wraps that value in `host_constant`, whose int is a `SpecializedInt` (each value its own
variant, as `hl.specialize` makes it).

>>> sorted(constant_locals(ast.parse("def f(x):\\n    b = 8\\n    c = b * 2\\n    d = x.size(0)").body[0]))
['b', 'c']
"""
from __future__ import annotations

import ast
from typing import Any

from tessera.language.constexpr import SpecializedInt

HOST_CONSTANT = "_tessera_host_constant"  # the rewritten host code's name for `host_constant`
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift,
              ast.BitAnd, ast.BitOr, ast.BitXor)


def constant_locals(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names the function binds once, at the top level of its body, to an int expression."""
    stores: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                stores[name] = stores.get(name, 0) + 2
    parameters = {arg.arg for arg in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    found: set[str] = set()
    for statement in function.body:
        target = _single_target(statement)
        if target is not None and target not in parameters and stores.get(target) == 1 \
                and _is_int_expression(statement.value, found):  # type: ignore[attr-defined]
            found.add(target)
    return found


def _single_target(statement: ast.stmt) -> str | None:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value is not None:
        return statement.target.id
    return None


def _is_int_expression(node: ast.expr, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        return _is_int_expression(node.operand, constants)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _OPERATORS):
        return _is_int_expression(node.left, constants) and _is_int_expression(node.right, constants)
    return False


def host_constant(value: Any) -> Any:
    """`value` as a compile-time int where it is an int (a `SpecializedInt`), else as it is."""
    return SpecializedInt(value) if type(value) is int else value


def wrap_constants(statement: ast.stmt, names: set[str]) -> ast.stmt:
    """`b = 8` -> `b = host_constant(8)` for a name of `names` (the statement as it is otherwise)."""
    target = _single_target(statement)
    if target is None or target not in names:
        return statement
    value = statement.value  # type: ignore[attr-defined]
    statement.value = ast.copy_location(ast.Call(ast.Name(HOST_CONSTANT, ast.Load()), [value], []), value)  # type: ignore[attr-defined]
    return statement
