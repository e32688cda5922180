"""Rewrite a kernel's control flow so a tracer can see it.

    for tile in hl.tile(n):            def _tessera_body_0(tile):
        acc = hl.zeros([tile])             acc = hl.zeros([tile])
        for k in hl.tile(m):       ->      def _tessera_loop_1(k, acc):
            acc = acc + x[tile, k]             acc = acc + x[tile, k]
        out[tile] = acc                        return (acc,)
                                           (acc,) = _tessera_device_loop(hl.tile(m), _tessera_loop_1, (acc,))
                                           out[tile] = acc
                                       _tessera_launch(hl.tile(n), _tessera_body_0)

A top-level tile loop becomes a launch of a body function; the host values it reads are that
function's free variables (its closure), so Python does the free-variable analysis. An inner
tile loop becomes a device loop whose loop-carried values are the names it assigns that were
bound before it. Only loops over `hl.tile` / `hl.grid` are rewritten; everything else stays
Python and is evaluated (unrolled) while tracing.
"""
from __future__ import annotations

import ast
import dataclasses
import types
from typing import Any, Callable

from tessera import exc
from tessera.frontend.location import SourceLocation
from tessera.frontend.source import KernelSource

LAUNCH = "_tessera_launch"
DEVICE_LOOP = "_tessera_device_loop"
DEVICE_IF = "_tessera_if"  # (condition, then_fn, else_fn, values) -> values


@dataclasses.dataclass
class RewrittenKernel:
    function: Callable[..., Any]
    source_text: str


def _assigned_names(statements: list[ast.stmt]) -> list[str]:
    """Names bound by statements (not looking into nested function definitions), in order."""
    found: list[str] = []

    class _Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Store) and node.id not in found:
                found.append(node.id)

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            if node.name not in found:
                found.append(node.name)

    for statement in statements:
        _Visitor().visit(statement)
    return found


def _names_read(nodes: list[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


class _Rewriter:
    def __init__(self, source: KernelSource, is_tile_call: Callable[[ast.expr], bool]) -> None:
        self.source = source
        self.is_tile_call = is_tile_call
        self.counter = 0

    def _location(self, node: ast.AST) -> SourceLocation:
        return SourceLocation(self.source.filename, node.lineno, node.col_offset,  # type: ignore[attr-defined]
                              getattr(node, "end_col_offset", None), self.source.fn.__name__)

    def _is_tile_loop(self, node: ast.stmt) -> bool:
        return isinstance(node, (ast.For, ast.AsyncFor)) and self.is_tile_call(node.iter)

    def host_block(self, body: list[ast.stmt], bound: list[str]) -> list[ast.stmt]:
        """Statements of host code: top-level tile loops become launches."""
        result: list[ast.stmt] = []
        for index, statement in enumerate(body):
            if self._is_tile_loop(statement):
                self._check_no_device_names_after(statement, body[index + 1:])
                result.extend(self.launch(statement))  # type: ignore[arg-type]
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(statement, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt) \
                            and not isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                        setattr(statement, field, self.host_block(inner, bound))
                result.append(statement)
            bound.extend(_assigned_names([statement]))
        return result

    def _check_no_device_names_after(self, loop: ast.For, rest: list[ast.stmt]) -> None:
        device_names = set(_assigned_names(loop.body)) | set(_assigned_names([ast.Assign([loop.target], ast.Constant(0))]))
        for statement in rest:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    device_names.discard(node.id)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in device_names:
                    raise exc.DeviceValueOnHostError(
                        f"{node.id!r} is computed inside the tile loop at line {loop.lineno} and read by "
                        "host code after it", location=self._location(node),
                        hint="device values live only inside their loop; store them into a tensor "
                             "(out[tile] = value) and read the tensor on the host")

    def launch(self, loop: ast.For) -> list[ast.stmt]:
        name = f"_tessera_body_{self.counter}"
        self.counter += 1
        body = self.device_block(loop.body, _assigned_names([ast.Assign([loop.target], ast.Constant(0))]))
        function = _make_function(name, loop.target, [], body, loop)
        call = ast.Expr(ast.Call(ast.Name(LAUNCH, ast.Load()), [loop.iter, ast.Name(name, ast.Load())], []))
        return [function, ast.copy_location(call, loop)]

    def device_block(self, body: list[ast.stmt], bound: list[str]) -> list[ast.stmt]:
        """Statements inside a tile loop: nested tile loops become device loops."""
        result: list[ast.stmt] = []
        for statement in body:
            self._reject_unsupported(statement)
            if self._is_tile_loop(statement):
                result.extend(self.device_loop(statement, bound))  # type: ignore[arg-type]
            else:
                if isinstance(statement, (ast.For, ast.While, ast.If, ast.With)):
                    statement.body = self.device_block(statement.body, bound)
                    if getattr(statement, "orelse", None):
                        statement.orelse = self.device_block(statement.orelse, bound)
                result.append(statement)
            bound.extend(n for n in _assigned_names([statement]) if n not in bound)
        return result

    def _reject_unsupported(self, statement: ast.stmt) -> None:
        for node in ast.walk(statement):
            if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(node, ast.Return):
                raise exc.UnsupportedSyntaxError(
                    "`return` inside a tile loop is not supported", location=self._location(node),
                    hint="store results into an output tensor and return after the loop")
            if isinstance(node, ast.Break) and self._inside_tile_loop(statement, node):
                raise exc.UnsupportedSyntaxError(
                    "`break` out of a tile loop is not supported", location=self._location(node),
                    hint="mask the remaining work with torch.where or extra_mask instead")

    def _inside_tile_loop(self, root: ast.stmt, target: ast.AST) -> bool:
        # A break inside a plain Python `for`/`while` (unrolled at trace time) is fine.
        for node in ast.walk(root):
            if isinstance(node, (ast.For, ast.While)) and not self._is_tile_loop(node):
                if any(inner is target for inner in ast.walk(node)):
                    return False
        return True

    def device_loop(self, loop: ast.For, bound: list[str]) -> list[ast.stmt]:
        name = f"_tessera_loop_{self.counter}"
        self.counter += 1
        targets = _assigned_names([ast.Assign([loop.target], ast.Constant(0))])
        assigned = [n for n in _assigned_names(loop.body) if n not in targets]
        carried = [n for n in assigned if n in bound]
        body = self.device_block(loop.body, list(bound) + targets)
        carried_tuple = ast.Tuple([ast.Name(n, ast.Load()) for n in carried], ast.Load())
        body.append(ast.Return(ast.Tuple([ast.Name(n, ast.Load()) for n in carried], ast.Load())))
        function = _make_function(name, loop.target, carried, body, loop)
        call = ast.Call(ast.Name(DEVICE_LOOP, ast.Load()),
                        [loop.iter, ast.Name(name, ast.Load()), carried_tuple], [])
        if carried:
            statement: ast.stmt = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in carried], ast.Store())], call)
        else:
            statement = ast.Expr(call)
        return [function, ast.copy_location(statement, loop)]


def _make_function(name: str, target: ast.expr, extra: list[str], body: list[ast.stmt],
                   where: ast.stmt) -> ast.FunctionDef:
    # The loop target (a name or a tuple of names) becomes the first parameter.
    parameter = "_tessera_target"
    unpack = ast.Assign([target], ast.Name(parameter, ast.Load()))
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(parameter)] + [ast.arg(n) for n in extra],
                              kwonlyargs=[], kw_defaults=[], defaults=[])
    function = ast.FunctionDef(name, arguments, [ast.copy_location(unpack, where)] + body, [], None)
    return ast.fix_missing_locations(ast.copy_location(function, where))


def rewrite_kernel(source: KernelSource, is_tile_call: Callable[[ast.expr], bool],
                   helpers: dict[str, Any]) -> RewrittenKernel:
    """Compile the rewritten kernel function; `helpers` supplies the launch and loop callables."""
    tree = source.tree
    rewriter = _Rewriter(source, is_tile_call)
    params = [a.arg for a in tree.args.posonlyargs + tree.args.args + tree.args.kwonlyargs]
    function_def = ast.FunctionDef(tree.name, tree.args, rewriter.host_block(list(tree.body), params), [],
                                   tree.returns)
    ast.copy_location(function_def, tree)
    fn = source.fn
    freevars = fn.__code__.co_freevars
    # Closure variables become parameters of an outer factory so the new function sees them.
    # Closure variables and the helpers become parameters of an outer factory, so the new
    # function sees them while reading the user's module globals live (not a copy).
    factory_params = list(freevars) + list(helpers)
    factory = ast.FunctionDef("_tessera_factory",
                              ast.arguments([], [ast.arg(n) for n in factory_params], None, [], [], None, []),
                              [function_def, ast.Return(ast.Name(tree.name, ast.Load()))], [], None)
    module = ast.fix_missing_locations(ast.Module([ast.copy_location(factory, tree)], []))
    code = compile(module, source.filename, "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    make = types.FunctionType(factory_code, fn.__globals__, "_tessera_factory")
    closure_values = [cell.cell_contents for cell in (fn.__closure__ or ())]
    rewritten = make(*closure_values, *helpers.values())
    rewritten.__defaults__ = fn.__defaults__
    rewritten.__kwdefaults__ = fn.__kwdefaults__
    return RewrittenKernel(rewritten, ast.unparse(module))
