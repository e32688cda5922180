"""A kernel's source: the parsed function, and positions mapped back to the real file."""
from __future__ import annotations

import ast
import builtins
import functools
import inspect
import textwrap
from typing import Any, Callable

from tessera import exc


class KernelSource:
    """The AST of a kernel function with line numbers and columns of the original file."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        try:
            lines, first_line = inspect.getsourcelines(fn)
        except (OSError, TypeError) as error:
            raise exc.TesseraError(
                f"cannot read the source of kernel {fn.__name__!r}: {error}",
                hint="define kernels in a .py file (not in a REPL or exec'd string)") from None
        text = "".join(lines)
        self.text = text
        dedented = textwrap.dedent(text)
        # dedent removed the same margin from every line; columns must get it back
        self.indent = len(lines[0]) - len(dedented.splitlines(keepends=True)[0]) if lines else 0
        module = ast.parse(dedented)
        ast.increment_lineno(module, first_line - 1)
        _shift_columns(module, self.indent)
        self.tree: ast.FunctionDef = module.body[0]  # type: ignore[assignment]
        self.first_line = first_line

    def site_of(self, node: ast.AST) -> tuple[str, int, int]:
        return (self.filename, node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def resolver(self) -> Callable[[ast.expr], Any]:
        """Resolve `hl.tile`-style callee expressions against the function's globals/closure."""
        namespace: dict[str, Any] = dict(vars(builtins))
        namespace.update(self.fn.__globals__)
        if self.fn.__closure__:
            for name, cell in zip(self.fn.__code__.co_freevars, self.fn.__closure__):
                try:
                    namespace[name] = cell.cell_contents
                except ValueError:
                    pass
        return functools.partial(_resolve, namespace)


def _resolve(namespace: dict[str, Any], node: ast.expr) -> Any:
    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(namespace, node.value)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _shift_columns(tree: ast.AST, indent: int) -> None:
    if not indent:
        return
    for node in ast.walk(tree):
        if hasattr(node, "col_offset"):
            node.col_offset += indent  # type: ignore[attr-defined]
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += indent  # type: ignore[attr-defined]
