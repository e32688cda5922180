"""The expression rewrite of a tile loop body: Python operations whose meaning on traced
scalars (sympy expressions) or device values must be Tessera's become calls of helpers.

`a == b` / `a != b` -> `_tessera_compare(a, "eq", b)`: sympy's own `==` compares structure
instead of building a condition. `a if c else b` -> the `if` helper, so a condition on a
program id or a loaded value selects on the device. `for i in range(k)` -> `for i in _tessera_range(range, k)`:
a bound known only at run time is a located error, not sympy's TypeError. `min(a, b)` ->
`_tessera_minmax(min, a, b)`: sympy's Min on symbolic sizes and tile bounds. `print(...)` ->
`_tessera_print(print, ...)`: a device print of tile values. `torch.fn(...)` ->
`_tessera_torch_call(torch.fn, ...)`: a runtime scalar expression reaches fn's primitive.
`a and b`, `a or b`, `not a` and chained comparisons (`3 < v < 7`) -> helpers that keep
Python's meaning for host values and join conditions on runtime scalars or device values
(Python would ask each for a bool).

Each helper is named by a constant here; the runtime supplies them (runtime/kernel.py), and
`PYTHON_MEANINGS` gives each its plain Python meaning, for host code and for callers that
supply none. The statement rewrite (rewrite.py) runs this on every tile loop body.

>>> ast.unparse(DeviceExpressions().visit(ast.parse("y = a == b")))           # doctest: +SKIP
"y = _tessera_compare(a, 'eq', b)"
"""
from __future__ import annotations

import ast
from typing import Any

from tessera.language.control import bitwise_helper, chain_helper, logical_helper, not_helper

DEVICE_IF = "_tessera_if"  # (condition, then_fn, else_fn, values) -> values
COMPARE = "_tessera_compare"  # (left, "eq" | "ne", right) -> a relation when a side is symbolic
RANGE = "_tessera_range"  # (the name `range` as the kernel sees it, *arguments) -> range, or a located error
MINMAX = "_tessera_minmax"  # (the name `min` / `max` as the kernel sees it, *arguments) -> a symbolic Min/Max or Python's
TORCH_CALL = "_tessera_torch_call"  # (torch.fn, *arguments, **keywords) -> the call, symbolic scalars allowed
LOGICAL = "_tessera_logical"  # ("and" | "or", *thunks of the operands) -> Python's value, or one condition
CHAIN = "_tessera_chain"  # (thunk, "lt", thunk, "lt", thunk, ...) -> `a < b < c`, each operand evaluated once
NOT = "_tessera_not"  # (value) -> `not value`, or the negated condition
PRINT = "_tessera_print"  # (the name `print` as the kernel sees it, *arguments, **keywords) -> a device print or Python's
BITWISE = "_tessera_bitwise"  # ("rshift" | "lshift" | "and" | "or" | "xor", a, b) -> Python's, or on symbolic ints
BREAKPOINT = "_tessera_breakpoint"  # (the name `breakpoint` as the kernel sees it) -> hl.breakpoint, or the call


def _on_torch_module(function: ast.expr) -> bool:
    """`torch.name` or `torch.a.b.name` (the module as the kernel names it: `torch`), or `F.name`
    (torch.nn.functional's usual alias: the helper calls anything else as it is)."""
    while isinstance(function, ast.Attribute):
        function = function.value
        if isinstance(function, ast.Name):
            return function.id in ("torch", "F")
    return False


_OPERATOR_NAMES = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
                   ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}


_BITWISE_NAMES = {ast.RShift: "rshift", ast.LShift: "lshift", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}


def _thunk(value: ast.expr) -> ast.Lambda:
    """`lambda: value`: an operand evaluated only when the helper asks for it (short circuit)."""
    return ast.copy_location(ast.Lambda(ast.arguments([], [], None, [], [], None, []), value), value)


def _binds_names(node: ast.AST) -> bool:
    return any(isinstance(inner, ast.NamedExpr) for inner in ast.walk(node))


class DeviceExpressions(ast.NodeTransformer):
    """The rewrite of one tile loop body's expressions (see the module docstring)."""

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        call = node.iter
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range" \
                and not call.keywords and not any(isinstance(a, ast.Starred) for a in call.args):
            node.iter = ast.copy_location(ast.Call(ast.Name(RANGE, ast.Load()), [call.func, *call.args], []), call)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        """`a if c else b` -> `_tessera_if(c, lambda: (a,), lambda: (b,), ())[0]`: the same decision
        as an `if` statement (a host condition picks one side; a device one selects per program)."""
        self.generic_visit(node)
        def branch(value: ast.expr) -> ast.Lambda:
            return ast.Lambda(ast.arguments([], [], None, [], [], None, []), ast.Tuple([value], ast.Load()))
        call = ast.Call(ast.Name(DEVICE_IF, ast.Load()),
                        [node.test, branch(node.body), branch(node.orelse), ast.Tuple([], ast.Load())], [])
        return ast.copy_location(ast.Subscript(call, ast.Constant(0), ast.Load()), node)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        # `min(tile.end, n)` / `max(...)` of two or more values: on symbolic sizes, sympy's Min/Max
        # (Python's own would ask a symbolic relation for a bool)
        self.generic_visit(node)
        if _on_torch_module(node.func):
            # `torch.clamp(v, 1 - eps, 1 + eps)` with scalar arguments: torch's argument parser
            # refuses sympy expressions before any __torch_function__ could see them
            call = ast.Call(ast.Name(TORCH_CALL, ast.Load()), [node.func, *node.args], node.keywords)
            return ast.copy_location(call, node)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and len(node.args) >= 2 \
                and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
            return ast.copy_location(ast.Call(ast.Name(MINMAX, ast.Load()), [node.func, *node.args], []), node)
        if isinstance(node.func, ast.Name) and node.func.id == "print":
            # `print("x: ", tile)` in a tile body: Helion's device print (values known only on the device)
            return ast.copy_location(ast.Call(ast.Name(PRINT, ast.Load()), [node.func, *node.args], node.keywords),
                                     node)
        if isinstance(node.func, ast.Name) and node.func.id == "breakpoint" and not node.args and not node.keywords:
            # Python's breakpoint() in a tile loop stops in each program, not once while compiling
            return ast.copy_location(ast.Call(ast.Name(BREAKPOINT, ast.Load()), [node.func], []), node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        """`a and b` -> `_tessera_logical("and", lambda: a, lambda: b)`: Python's `and` asks its
        first operand for a bool, which a condition on a runtime scalar or a device value cannot
        give; the helper keeps Python's short circuit for host values and joins conditions."""
        self.generic_visit(node)
        if _binds_names(node):  # `(n := f()) and n > 3`: a lambda would hide the walrus's name
            return node
        kind = "and" if isinstance(node.op, ast.And) else "or"
        call = ast.Call(ast.Name(LOGICAL, ast.Load()), [ast.Constant(kind), *map(_thunk, node.values)], [])
        return ast.copy_location(call, node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        """`a >> b`, `a << b`, `a & b`, `a | b`, `a ^ b` -> `_tessera_bitwise("rshift", a, b)`:
        sympy has no bitwise operators, and a tile's bounds are symbolic ints while tracing."""
        self.generic_visit(node)
        kind = _BITWISE_NAMES.get(type(node.op))
        if kind is None:
            return node
        return ast.copy_location(ast.Call(ast.Name(BITWISE, ast.Load()), [ast.Constant(kind), node.left, node.right], []),
                                 node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(ast.Call(ast.Name(NOT, ast.Load()), [node.operand], []), node)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if len(node.ops) > 1 and not _binds_names(node):
            # `3 < v < 7` is `3 < v and v < 7` with v evaluated once
            parts: list[ast.expr] = [_thunk(node.left)]
            for operator, operand in zip(node.ops, node.comparators):
                parts += [ast.Constant(_OPERATOR_NAMES[type(operator)]), _thunk(operand)]
            return ast.copy_location(ast.Call(ast.Name(CHAIN, ast.Load()), parts, []), node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return node
        operator = "eq" if isinstance(node.ops[0], ast.Eq) else "ne"
        call = ast.Call(ast.Name(COMPARE, ast.Load()), [node.left, ast.Constant(operator), node.comparators[0]], [])
        return ast.copy_location(call, node)


def _python_compare(left: Any, operator: str, right: Any) -> Any:
    """Python's `==` / `!=`: what COMPARE means when the caller supplies no helper for it."""
    return left == right if operator == "eq" else left != right


def _python_range(function: Any, *bounds: Any) -> Any:
    """Python's `range(...)`: what RANGE means when the caller supplies no helper for it."""
    return function(*bounds)


def _python_minmax(function: Any, *values: Any) -> Any:
    """Python's `min(...)` / `max(...)`: what MINMAX means when the caller supplies no helper for it."""
    return function(*values)


def _python_print(function: Any, *values: Any, **keywords: Any) -> Any:
    """Python's `print(...)`: what PRINT means when the caller supplies no helper for it."""
    return function(*values, **keywords)


def _python_call(function: Any) -> Any:
    """A plain call: what BREAKPOINT means when the caller supplies no helper for it."""
    return function()


# the logical helpers are Python's own `and` / `or` / `not` for host values
PYTHON_MEANINGS: dict[str, Any] = {COMPARE: _python_compare, RANGE: _python_range, MINMAX: _python_minmax,
                                   LOGICAL: logical_helper, CHAIN: chain_helper, NOT: not_helper,
                                   BITWISE: bitwise_helper, PRINT: _python_print, BREAKPOINT: _python_call}
"""What each helper of this rewrite means where the caller of `rewrite_kernel` supplies none."""
