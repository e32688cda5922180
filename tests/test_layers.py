"""The package's layers, checked on the source (no imports run): each module imports only from
its own layer or lower ones, module imports form no cycle, Triton is imported only by the
Triton backend, and every function-local import is one of the few listed here with its reason.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tessera"

# Bottom to top; a module may import from its own layer and those before it. docs/internals.md,
# "Layout", lists the same order.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tessera.exc", "tessera.config", "tessera.settings", "tessera.thread_state", "tessera.location",
     "tessera.marking"),
    ("tessera.ir",),
    ("tessera.backends",),
    ("tessera.trace",),
    ("tessera.language", "tessera._compiler"),  # _compiler: Helion's module path for reference helpers
    ("tessera.frontend",),
    ("tessera.compiler",),
    ("tessera.runtime",),
    ("tessera.autotune",),
    ("tessera",),  # the package's __init__: the public API, wires the layers together
)

# Function-local imports that avoid a real cost, each with why. Any other is a test failure:
# a local import must not hide a cycle.
ALLOWED_LOCAL_IMPORTS: dict[tuple[str, str], str] = {
    ("tessera.autotune.tuner", "tessera.autotune.pipeline"): "the search and its workers (~25 ms): only when tuning",
    ("tessera.autotune.prewarm", "tessera.autotune.pool"): "the worker machinery (~8 ms): only for a kernel that will tune",
    ("tessera.autotune.prewarm", "tessera.autotune.pipeline"): "~25 ms, in the background thread of a CUDA machine",
    ("tessera.backends.pallas.backend", "tessera.backends.pallas.runner"):
        "jax (~1.5 s to import): only at a Pallas kernel's first launch, never while planning",
}
# `import triton` inside the Triton backend's functions is not listed: importing Triton fixes its
# interpreter mode for the process, so backends/triton/ imports it only when a kernel is loaded.


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, bool, int]]:
    """(imported module, is function-local, line) for each import outside `if TYPE_CHECKING:`."""
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_block(child):
                continue
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, inner, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(child, module, is_package)
                # `from package import submodule` imports the submodule
                for alias in child.names:
                    found.append((f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base,
                                  inner, child.lineno))
            visit(child, inner)
    visit(tree, False)
    return found


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _layer(module: str) -> int:
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer"
    return best[0]


def _graph() -> dict[str, list[tuple[str, bool, int]]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        graph[module] = _imports(tree, module, path.name == "__init__.py")
    return graph


GRAPH = _graph()


def test_every_module_imports_only_its_own_layer_or_lower_ones() -> None:
    upward = [f"{module}:{line} imports {target}" for module, imports in GRAPH.items()
              for target, _, line in imports if target.startswith("tessera") and _layer(target) > _layer(module)]
    assert upward == []


def test_only_the_triton_backend_imports_triton() -> None:
    found = [f"{module}:{line}" for module, imports in GRAPH.items() for target, _, line in imports
             if (target == "triton" or target.startswith("triton.")) and not module.startswith("tessera.backends.triton")]
    assert found == []


def test_only_the_pallas_backend_imports_jax() -> None:
    found = [f"{module}:{line}" for module, imports in GRAPH.items() for target, _, line in imports
             if (target == "jax" or target.startswith("jax.")) and not module.startswith("tessera.backends.pallas")]
    assert found == []
    # and within it, only the runner and the TPU export (imported by whoever exports) at import
    # time: lowering and passes stay jax-free
    importers = {module for module, imports in GRAPH.items() for target, inner, _ in imports
                 if (target == "jax" or target.startswith("jax.")) and not inner}
    assert importers == {"tessera.backends.pallas.runner", "tessera.backends.pallas.tpu_export"}


def test_function_local_imports_are_the_listed_ones() -> None:
    local = {(module, target) for module, imports in GRAPH.items() for target, inner, _ in imports
             if inner and target.startswith("tessera")}
    assert sorted(local - set(ALLOWED_LOCAL_IMPORTS)) == []


def test_modules_import_each_other_without_cycles() -> None:
    edges = {module: sorted({target for target, _, _ in imports if target in GRAPH and target != module})
             for module, imports in GRAPH.items()}
    edges = {module: [t for t in targets if not module.startswith(t + ".")]  # a package's __init__ runs first anyway
             for module, targets in edges.items()}
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in edges[module]:
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []


@pytest.mark.parametrize("module", ["tessera.ir.graph", "tessera.backends.base", "tessera.compiler"])
def test_layer_lookup_finds_the_module(module: str) -> None:
    assert _layer(module) < len(LAYERS) - 1
