"""Which torch functions Helion kernels call inside tile loops, and which of them Tessera refuses.

Reads every `.py` file under the given folders (Helion's `examples/` and `test/`, say) without
running them: each `for ... in hl.tile(...)` / `hl.grid(...)` / `hl.jagged_tile(...)` loop body,
and the bodies of the same file's functions those loops call, is searched for calls of
`torch.*` / `F.*` functions and of Tensor methods. A function or method with no Tessera primitive
(`tessera.ir.primitive.TORCH_FUNCTIONS`) is printed with its count and the files that call it.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/helion_torch_calls.py /work/helion-examples/examples /tmp/helion_tests/test
"""
from __future__ import annotations

import argparse
import ast
import collections
import pathlib
from typing import Any

import torch

import tessera.language  # noqa: F401  (defines the primitives)
from tessera.ir.primitive import TORCH_FUNCTIONS

_LOOPS = {"tile", "grid", "jagged_tile"}
_NAMESPACES = {"torch": torch, "F": torch.nn.functional}
# receivers whose methods are not Tensor methods
_NOT_TENSORS = {"hl", "helion", "tl", "triton", "math", "torch", "F", "self", "os", "np", "itertools", "functools",
                "operator", "random", "re", "sys", "Config"}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _is_tile_loop(node: ast.AST) -> bool:
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Call) \
        and (_dotted(node.iter.func) or "").split(".")[-1] in _LOOPS


def _resolved(name: str) -> Any:
    head, *rest = name.split(".")
    value: Any = _NAMESPACES.get(head)
    for part in rest:
        value = getattr(value, part, None)
    return value


def refused_calls(folders: list[str]) -> tuple[collections.Counter, collections.Counter, dict[str, set[str]]]:
    """(torch functions, Tensor methods, files per name) called in tile loops without a primitive."""
    functions: collections.Counter = collections.Counter()
    methods: collections.Counter = collections.Counter()
    files: dict[str, set[str]] = collections.defaultdict(set)
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            helpers = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
            pending, seen = [node for node in ast.walk(tree) if _is_tile_loop(node)], set()
            while pending:
                for node in ast.walk(pending.pop()):
                    if not isinstance(node, ast.Call):
                        continue
                    if isinstance(node.func, ast.Name) and node.func.id in helpers and node.func.id not in seen:
                        seen.add(node.func.id)
                        pending.append(helpers[node.func.id])
                    name = _dotted(node.func)
                    if name is None:
                        continue
                    if name.split(".")[0] in _NAMESPACES:
                        function = _resolved(name)
                        if callable(function) and not isinstance(function, type) and function not in TORCH_FUNCTIONS:
                            functions[name] += 1
                            files[name].add(path.name)
                    elif isinstance(node.func, ast.Attribute) and name.split(".")[0] not in _NOT_TENSORS:
                        method = getattr(torch.Tensor, node.func.attr, None)
                        if callable(method) and method not in TORCH_FUNCTIONS:
                            methods[node.func.attr] += 1
                            files["." + node.func.attr].add(path.name)
    return functions, methods, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="folders of Python files (Helion's examples/ and test/)")
    args = parser.parse_args()
    functions, methods, files = refused_calls(args.folders)
    print("torch functions in tile loops without a Tessera primitive (calls, files):")
    for name, count in functions.most_common():
        print(f"  {count:4d}  {name:45s} {', '.join(sorted(files[name])[:4])}")
    print("Tensor methods in tile loops without a primitive (a tile value's own attributes, e.g. .size, included):")
    for name, count in methods.most_common():
        print(f"  {count:4d}  .{name:44s} {', '.join(sorted(files['.' + name])[:4])}")


if __name__ == "__main__":
    main()
