"""Rewrite a kernel's control flow so a tracer can see it.

    for tile in hl.tile(n):            def _tessera_body_0(tile):
        acc = hl.zeros([tile])             acc = hl.zeros([tile])
        for k in hl.tile(m):       ->      def _tessera_loop_1(k, acc):
            acc = acc + x[tile, k]             acc = acc + x[tile, k]
        out[tile] = acc                        return (acc,)
                                           (acc,) = _tessera_device_loop(hl.tile(m), _tessera_loop_1, (acc,))
                                           out[tile] = acc
                                       _tessera_launch(hl.tile(n), _tessera_body_0, 0)

A top-level tile loop becomes a launch of a body function; the host values it reads are that
function's free variables (its closure), so Python does the free-variable analysis. An inner
tile loop becomes a device loop whose loop-carried values are the names it assigns that were
bound before it; names it binds only inside stay in its function. Only loops over `hl.tile` /
`hl.grid` are rewritten; other loops stay Python and are evaluated (unrolled) while tracing.

An `if` inside a tile loop becomes two branch functions of the names either branch binds:

    if c:                              def _tessera_then_2(y): ...; return (y,)
        y = a                  ->      def _tessera_else_2(y): ...; return (y,)
    else:                              (y,) = _tessera_if(c, _tessera_then_2, _tessera_else_2, (y,))
        y = b

A host condition runs one branch in Python; a device condition is traced as a predicated
branch. A name not bound before the `if` enters as UNDEFINED and is deleted again where it
stays so, so reading it fails as Python would. An `if` holding a `break` / `continue` of an
enclosing Python loop stays a Python `if`.

Inside a tile loop, operators and calls whose meaning on symbolic values must be Tessera's
(`==`, `and`, `min`, `range`, `torch.fn`...) become helper calls too: device_expressions.py.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import types
from typing import Any, Callable

import torch

from tessera import exc
from tessera.location import SourceLocation
from tessera.frontend.device_expressions import DEVICE_IF, PYTHON_MEANINGS, RANGE, TORCH_CALL, DeviceExpressions
from tessera.frontend.source import KernelSource
from tessera.frontend.host_constants import HOST_CONSTANT, constant_locals, host_constant, wrap_constants
from tessera.frontend.specialized import PINNED_SIZE, SizePins, pinned_size
from tessera.language.constexpr import specialize
from tessera.language.math import dot as hl_dot
from tessera.language.control import UNDEFINED

LAUNCH = "_tessera_launch"
DEVICE_LOOP = "_tessera_device_loop"
UNDEFINED_NAME = "_tessera_undefined"
STATIC_RANGE = "_tessera_static_range"  # (the name `range`, *arguments) -> whether the loop is unrolled in Python
DEVICE_RANGE = "_tessera_device_range"  # (the name `range`, *arguments) -> hl.grid over the same indices


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


def _continues(statements: list[ast.stmt]) -> bool:
    """Whether the statements hold a `continue` here or in nested `if`s (not in loops or other blocks)."""
    return any(isinstance(statement, ast.Continue) or
               (isinstance(statement, ast.If) and _continues(statement.body + statement.orelse))
               for statement in statements)


def _safe_read(name: str) -> ast.expr:
    """`locals().get(name, UNDEFINED)`: the value of a local that may not be bound yet."""
    return ast.Call(ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []), "get", ast.Load()),
                    [ast.Constant(name), ast.Name(UNDEFINED_NAME, ast.Load())], [])


def _forget_if_undefined(name: str) -> ast.stmt:
    """`if name is UNDEFINED: del name`, so a later read fails the way Python's would."""
    test = ast.Compare(ast.Name(name, ast.Load()), [ast.Is()], [ast.Name(UNDEFINED_NAME, ast.Load())])
    return ast.If(test, [ast.Delete([ast.Name(name, ast.Del())])], [])


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_NESTED_BLOCKS = ("body", "orelse", "finalbody")


class _Rewriter:
    def __init__(self, source: KernelSource, is_tile_call: Callable[[ast.expr], bool]) -> None:
        self.source = source
        self.is_tile_call = is_tile_call
        self.counter = 0
        self.launch_counter = 0
        tree = source.tree
        is_function = isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
        self.size_pins = SizePins(tree, source.resolver()) if is_function else None
        self.constants = constant_locals(tree) if is_function else set()

    def _location(self, node: ast.AST) -> SourceLocation:
        return SourceLocation(self.source.filename, node.lineno, node.col_offset,  # type: ignore[attr-defined]
                              getattr(node, "end_col_offset", None), self.source.fn.__name__)

    def _is_tile_loop(self, node: ast.AST) -> bool:
        return isinstance(node, (ast.For, ast.AsyncFor)) and self.is_tile_call(node.iter)

    def _next_index(self) -> int:
        self.counter += 1
        return self.counter - 1

    def _level_names(self, statements: list[ast.stmt]) -> list[str]:
        """Names the statements bind in their own scope, in order.

        A device loop's body is a function of its own: what it assigns stays there, except the
        carried names, which were bound before it. Comprehension variables and the locals of
        nested functions are not bound either.
        """
        found: list[str] = []
        rewriter = self

        class _Visitor(ast.NodeVisitor):
            def visit_Name(self, node: ast.Name) -> None:
                if isinstance(node.ctx, ast.Store) and node.id not in found:
                    found.append(node.id)

            def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
                if node.name not in found:
                    found.append(node.name)

            visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

            def visit_Lambda(self, node: ast.Lambda) -> None:
                pass

            def _comprehension(self, node: ast.AST) -> None:
                pass

            visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

            def visit_For(self, node: ast.For) -> None:
                if not rewriter._is_tile_loop(node):
                    self.generic_visit(node)

            visit_AsyncFor = visit_For

        for statement in statements:
            _Visitor().visit(statement)
        return found

    # -- host code -------------------------------------------------------------------------------
    def host_block(self, body: list[ast.stmt], bound: list[str]) -> list[ast.stmt]:
        """Statements of host code: top-level tile loops become launches."""
        result: list[ast.stmt] = []
        for index, statement in enumerate(body):
            if self._is_tile_loop(statement):
                self._check_no_device_names_after(statement, body[index + 1:], bound)
                result.extend(self.launch(statement))  # type: ignore[arg-type]
            else:
                for field in _NESTED_BLOCKS:
                    inner = getattr(statement, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt) \
                            and not isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                        setattr(statement, field, self.host_block(inner, bound))
                statement = self._specialize_in_place(statement)
                if self.size_pins is not None:  # on a copy: the kernel's source tree is read again (specialized.py)
                    statement = wrap_constants(self.size_pins.visit(copy.deepcopy(statement)), self.constants)
                result.append(statement)
            bound.extend(_assigned_names([statement]))
        return result

    def _specialize_in_place(self, statement: ast.stmt) -> ast.stmt:
        """`hl.specialize(n)` as a statement (Helion specializes the size n stands for, in place)
        -> `n = hl.specialize(n)`: the launches then capture n as a compile-time constant."""
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not (isinstance(call, ast.Call) and len(call.args) == 1 and not call.keywords
                and isinstance(call.args[0], ast.Name) and self.source.resolver()(call.func) is specialize):
            return statement
        return ast.copy_location(ast.Assign([ast.Name(call.args[0].id, ast.Store())], call), statement)

    def _check_no_device_names_after(self, loop: ast.For, rest: list[ast.stmt], host_names: list[str]) -> None:
        device_names = set(_assigned_names(loop.body)) | set(_assigned_names([ast.Assign([loop.target], ast.Constant(0))]))
        for statement in rest:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    device_names.discard(node.id)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in device_names:
                    if node.id in host_names:  # the loop rebinds a host variable (`out = v`, not `out[t] = v`)
                        raise exc.CannotModifyHostVariableOnDevice(
                            f"the tile loop at line {loop.lineno} rebinds the host variable {node.id!r}, which "
                            "host code reads after the loop", location=self._location(node),
                            hint=f"write into the tensor instead ({node.id}[tile] = value, or {node.id}[:] += value "
                                 "for a whole-tensor update), or use another name inside the loop")
                    raise exc.CannotReadDeviceVariableOnHost(
                        f"{node.id!r} is computed inside the tile loop at line {loop.lineno} and read by "
                        "host code after it", location=self._location(node),
                        hint="device values live only inside their loop; store them into a tensor "
                             "(out[tile] = value) and read the tensor on the host")

    def launch(self, loop: ast.For) -> list[ast.stmt]:
        loop.body = self._fold_continues(loop.body)
        self._check_jumps(loop.body, innermost_is_tile=True)
        # launch bodies count on their own: the loop's ordinal is passed to the launch, which
        # picks its entries of per-loop Config keys (loop_orders[n], reduction_loops[n])
        ordinal = self.launch_counter
        name = f"_tessera_body_{ordinal}"
        self.launch_counter += 1
        device_code = [DeviceExpressions().visit(statement) for statement in loop.body]
        body = self.device_block(device_code, _assigned_names([ast.Assign([loop.target], ast.Constant(0))]))
        function = _make_function(name, loop.target, [], body, loop)
        call = ast.Expr(ast.Call(ast.Name(LAUNCH, ast.Load()), [loop.iter, ast.Name(name, ast.Load()),
                                                                 ast.Constant(ordinal)], []))
        return [function, ast.copy_location(call, loop)]

    def _fold_continues(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        """A tile loop's `continue` as a predicate on the rest of the iteration: in

            if c:                          if c:
                A                  ->          A
                continue                   else:
            R                                  R

        the statements after an `if` that (directly or in nested `if`s) continues move into its
        branches, up to the `continue`. A `continue` inside a Python loop is that loop's own, and
        one inside another block (`with`, `try`) stays an error (`_check_jumps`)."""
        folded: list[ast.stmt] = []
        for position, statement in enumerate(statements):
            if isinstance(statement, ast.Continue):
                return folded  # the rest of the iteration is skipped
            if self._is_tile_loop(statement):
                statement.body = self._fold_continues(statement.body)  # type: ignore[attr-defined]
            if isinstance(statement, ast.If) and _continues([statement]):
                rest = statements[position + 1:]
                branch = ast.If(statement.test, self._fold_continues(statement.body + copy.deepcopy(rest)) or [ast.Pass()],
                                self._fold_continues(statement.orelse + rest))
                folded.append(ast.copy_location(branch, statement))
                return folded
            folded.append(statement)
        return folded

    def _check_jumps(self, statements: list[ast.stmt], innermost_is_tile: bool) -> None:
        """`return` in a tile loop, and `break` / `continue` of a tile loop, cannot be traced:
        the loop body runs once, as a function. Those of a plain Python loop inside are fine."""
        for statement in statements:
            if isinstance(statement, ast.Return):
                raise exc.NotAllowedOnDevice(
                    "`return` inside a tile loop is not supported", location=self._location(statement),
                    hint="store results into an output tensor and return after the loop")
            if isinstance(statement, (ast.Break, ast.Continue)) and innermost_is_tile:
                word = "break" if isinstance(statement, ast.Break) else "continue"
                raise exc.UnsupportedSyntaxError(
                    f"`{word}` out of a tile loop is not supported", location=self._location(statement),
                    hint="mask the remaining work with torch.where or extra_mask (or an `if`) instead")
            if isinstance(statement, _SCOPES):
                continue
            if isinstance(statement, _LOOPS):
                self._check_jumps(statement.body, self._is_tile_loop(statement))
                self._check_jumps(statement.orelse, innermost_is_tile)
                continue
            for block in self._nested_blocks(statement):
                self._check_jumps(block, innermost_is_tile)

    @staticmethod
    def _nested_blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
        blocks = [getattr(statement, field) for field in _NESTED_BLOCKS if getattr(statement, field, None)]
        blocks += [handler.body for handler in getattr(statement, "handlers", [])]
        blocks += [case.body for case in getattr(statement, "cases", [])]
        return blocks

    # -- device code -----------------------------------------------------------------------------
    def device_block(self, body: list[ast.stmt], bound: list[str]) -> list[ast.stmt]:
        """Statements inside a tile loop: nested tile loops become device loops, and `if`s
        become functional branches. `bound` (names bound so far) grows as statements bind names."""
        result: list[ast.stmt] = []
        for statement in body:
            statement = _InPlaceRebinding(bound).visit(statement)
            names = self._level_names([statement])
            if self._is_tile_loop(statement):
                result.extend(self.device_loop(statement, bound))  # type: ignore[arg-type]
            elif isinstance(statement, ast.If) and not self._jumps_out_of(statement):
                result.extend(self.device_if(statement, bound))
            elif self._is_range_loop(statement):
                result.append(self.range_loop(statement, bound))  # type: ignore[arg-type]
            else:
                if not isinstance(statement, _SCOPES):
                    for field in _NESTED_BLOCKS:
                        if getattr(statement, field, None):
                            setattr(statement, field, self.device_block(getattr(statement, field), bound))
                    for handler in getattr(statement, "handlers", []):
                        handler.body = self.device_block(handler.body, bound)
                result.append(statement)
            bound.extend(n for n in names if n not in bound)
        return result

    def _is_range_loop(self, statement: ast.stmt) -> bool:
        """`for i in range(...)` (as DeviceExpressions left it) with one name as target, no
        `else` and no `break` / `continue` of its own: it can run on the device if need be."""
        if not isinstance(statement, ast.For) or statement.orelse or not isinstance(statement.target, ast.Name):
            return False
        call = statement.iter
        return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == RANGE \
            and not any(self._jumps_out_of(inner) for inner in statement.body)

    def range_loop(self, loop: ast.For, bound: list[str]) -> ast.If:
        """`for i in range(n)`: a Python loop (unrolled while tracing) when its bounds are ints,
        else, on a bound known only when the kernel runs (`range(x.size(1))`, a loaded count),
        a device loop over the same indices (`hl.grid`), decided while tracing:

            if _tessera_static_range(range, n):
                for i in _tessera_range(range, n): ...
            else:
                <device loop over _tessera_device_range(range, n)>
        """
        arguments = loop.iter.args  # type: ignore[attr-defined]
        device = copy.deepcopy(loop)
        device.iter = ast.copy_location(ast.Call(ast.Name(DEVICE_RANGE, ast.Load()), copy.deepcopy(arguments), []),
                                        loop.iter)
        on_device = self.device_loop(device, list(bound))
        loop.body = self.device_block(loop.body, list(bound))
        test = ast.Call(ast.Name(STATIC_RANGE, ast.Load()), copy.deepcopy(arguments), [])
        return ast.fix_missing_locations(ast.copy_location(ast.If(test, [loop], on_device), loop))

    def _jumps_out_of(self, statement: ast.stmt) -> bool:
        """Whether a `break` / `continue` in the statement leaves it (for an enclosing Python loop)."""
        def search(statements: list[ast.stmt]) -> bool:
            for inner in statements:
                if isinstance(inner, (ast.Break, ast.Continue)):
                    return True
                if isinstance(inner, _SCOPES):
                    continue
                if isinstance(inner, _LOOPS):
                    if search(inner.orelse):
                        return True
                    continue
                if any(search(block) for block in self._nested_blocks(inner)):
                    return True
            return False
        return search([statement])

    def _warn_matmul_accumulation(self, loop: ast.For) -> None:
        """`acc += x @ y` in an inner tile loop adds each K tile's product after rounding it to
        the operands' dtype; Helion warns (TiledKMatmulAccumulationWarning), and so does Tessera."""
        resolve = self.source.resolver()
        products = {id(function) for function in (torch.matmul, torch.mm, torch.bmm, hl_dot)}

        def is_product(node: ast.AST) -> bool:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                return True
            if not isinstance(node, ast.Call):
                return False
            function = node.func
            if isinstance(function, ast.Name) and function.id == TORCH_CALL and node.args:
                function = node.args[0]  # `torch.mm(a, b)` as the device-expression rewrite left it
            return id(resolve(function)) in products

        for statement in loop.body:
            for node in ast.walk(statement):
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                        and any(is_product(inner) for inner in ast.walk(node.value)):
                    exc.warn("`acc += <matrix product>` in a loop over K tiles: each tile's product is rounded "
                             "to the operands' dtype before it is added", location=self._location(node),
                             category=exc.TiledKMatmulAccumulationWarning,
                             hint="accumulate in the product itself: acc = torch.addmm(acc, x, y), "
                                  "torch.baddbmm(acc, x, y) or hl.dot(x, y, acc=acc)")

    def device_loop(self, loop: ast.For, bound: list[str]) -> list[ast.stmt]:
        self._warn_matmul_accumulation(loop)
        name = f"_tessera_loop_{self._next_index()}"
        targets = _assigned_names([ast.Assign([loop.target], ast.Constant(0))])
        assigned = [n for n in _assigned_names(loop.body) if n not in targets]
        carried = [n for n in assigned if n in bound]
        body = self.device_block(loop.body, list(bound) + targets)
        # a carried name may be unbound when the loop starts (bound before it only under a host
        # `if` that was false): it enters as UNDEFINED, stays so, and is deleted again after
        carried_tuple = ast.Tuple([_safe_read(n) for n in carried], ast.Load())
        body.append(ast.Return(ast.Tuple([_safe_read(n) for n in carried], ast.Load())))
        function = _make_function(name, loop.target, carried, body, loop)
        call = ast.Call(ast.Name(DEVICE_LOOP, ast.Load()),
                        [loop.iter, ast.Name(name, ast.Load()), carried_tuple], [])
        if carried:
            statement: ast.stmt = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in carried], ast.Store())], call)
        else:
            statement = ast.Expr(call)
        after = [ast.copy_location(_forget_if_undefined(n), loop) for n in carried]
        return [function, ast.copy_location(statement, loop)] + after

    def device_if(self, statement: ast.If, bound: list[str]) -> list[ast.stmt]:
        """`if c: A else: B` -> two branch functions of the names either branch binds, and
        `(names) = _tessera_if(c, then_fn, else_fn, (names))`.

        A name not bound before the `if` enters as UNDEFINED and is deleted again (in the
        branch, and after the `if` when the taken branch did not bind it), so reading it
        fails as it would in Python.
        """
        index = self._next_index()
        branches = statement.body + statement.orelse
        level = self._level_names(branches)
        # names either branch binds at this level, and names a device loop in a branch carries
        names = [n for n in _assigned_names(branches) if n in level or n in bound]
        functions = [self._branch_function(f"_tessera_{kind}_{index}", block, names, bound, statement)
                     for kind, block in (("then", statement.body), ("else", statement.orelse))]
        values = ast.Tuple([_safe_read(n) for n in names], ast.Load())
        call = ast.Call(ast.Name(DEVICE_IF, ast.Load()),
                        [statement.test] + [ast.Name(f.name, ast.Load()) for f in functions] + [values], [])
        if names:
            result: ast.stmt = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())], call)
        else:
            result = ast.Expr(call)
        after = [ast.copy_location(_forget_if_undefined(n), statement) for n in names]
        return functions + [ast.copy_location(result, statement)] + after

    def _branch_function(self, name: str, block: list[ast.stmt], names: list[str], bound: list[str],
                         where: ast.If) -> ast.FunctionDef:
        body = [_forget_if_undefined(n) for n in names]
        body += self.device_block(block, list(bound))
        body.append(ast.Return(ast.Tuple([_safe_read(n) for n in names], ast.Load())))
        arguments = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names],
                                  kwonlyargs=[], kw_defaults=[], defaults=[])
        function = ast.FunctionDef(name, arguments, body, [], None)
        return ast.fix_missing_locations(ast.copy_location(function, block[0] if block else where))


class _InPlaceRebinding(ast.NodeTransformer):
    """`v.mul_(2)` -> `(v := v.mul_(2))` for torch's in-place methods on a name, wherever the call
    stands in a tile loop (`u = v.clamp_(0, 1) * 2` too): a tile value is a copy in registers, so
    the name must see the new value (a tensor's in-place method returns the tensor itself, so
    eager code means the same). Only names bound inside the loop are rebound (a tensor argument's
    name stays the host's). Nested functions, lambdas and comprehensions keep their own scope."""

    def __init__(self, bound: list[str]) -> None:
        self.bound = bound

    def _own_scope(self, node: ast.AST) -> ast.AST:
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = _own_scope  # type: ignore
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _own_scope  # type: ignore

    def visit_NamedExpr(self, node: ast.NamedExpr) -> ast.expr:
        if isinstance(node.value, ast.Call) and self._in_place_name(node.value) == node.target.id:
            self.generic_visit(node.value)  # rebound already (a nested block is visited again)
            return node
        self.generic_visit(node)
        return node

    @staticmethod
    def _in_place_name(node: ast.Call) -> str | None:
        method = node.func
        if isinstance(method, ast.Attribute) and isinstance(method.value, ast.Name) and method.attr.endswith("_") \
                and not method.attr.startswith("_") and hasattr(torch.Tensor, method.attr):
            return method.value.id
        return None

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        name = self._in_place_name(node)
        if name is None or name not in self.bound:
            return node
        return ast.copy_location(ast.NamedExpr(target=ast.Name(name, ast.Store()), value=node), node)


def _make_function(name: str, target: ast.expr, extra: list[str], body: list[ast.stmt],
                   where: ast.stmt) -> ast.FunctionDef:
    # The loop target (a name or a tuple of names) becomes the first parameter.
    parameter = "_tessera_target"
    unpack = ast.Assign([target], ast.Name(parameter, ast.Load()))
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(parameter)] + [ast.arg(n) for n in extra],
                              kwonlyargs=[], kw_defaults=[], defaults=[])
    function = ast.FunctionDef(name, arguments, [ast.copy_location(unpack, where)] + body, [], None)
    return ast.fix_missing_locations(ast.copy_location(function, where))


def _python_static_range(function: Any, *bounds: Any) -> bool:
    """What STATIC_RANGE means when the caller supplies no helper for it: always a Python loop."""
    return True


def rewrite_kernel(source: KernelSource, is_tile_call: Callable[[ast.expr], bool],
                   helpers: dict[str, Any]) -> RewrittenKernel:
    """Compile the rewritten kernel function; `helpers` supplies the launch and loop callables."""
    tree = source.tree
    if not isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise exc.TesseraError(
            f"kernel {source.fn.__name__} is not a `def` function (a lambda has no tile loops to compile)",
            location=SourceLocation(source.filename, source.first_line, function=source.fn.__name__),
            hint="write the kernel as a `def` with its hl.tile loops; a lambda passed to a kernel as an epilogue "
                 "or combine function needs no @tessera.kernel")
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
    helpers = {**PYTHON_MEANINGS, STATIC_RANGE: _python_static_range, PINNED_SIZE: pinned_size,
               HOST_CONSTANT: host_constant, **helpers, UNDEFINED_NAME: UNDEFINED}
    factory_params = list(freevars) + list(helpers)
    factory = ast.FunctionDef("_tessera_factory",
                              ast.arguments([], [ast.arg(n) for n in factory_params], None, [], [], None, []),
                              [function_def, ast.Return(ast.Name(tree.name, ast.Load()))], [], None)
    module = ast.fix_missing_locations(ast.Module([ast.copy_location(factory, tree)], []))
    code = compile(module, source.filename, "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    make = types.FunctionType(factory_code, fn.__globals__, "_tessera_factory")
    # the closure's ints are read once, here: compile-time constants, as Helion reads them
    closure_values = [host_constant(cell.cell_contents) for cell in (fn.__closure__ or ())]
    rewritten = make(*closure_values, *helpers.values())
    rewritten.__defaults__ = fn.__defaults__
    rewritten.__kwdefaults__ = fn.__kwdefaults__
    return RewrittenKernel(rewritten, ast.unparse(module))
