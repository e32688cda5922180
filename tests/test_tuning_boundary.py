"""Where tuning crosses layers: the runtime calls the autotuner through a hook, the autotuner asks
the backend for everything Triton-specific, and each side imports only what it needs.

(The import order of every layer is checked by the layering test of issue 13; these tests pin
what the tuning modules promise on top of it.)
"""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import tessera
from tessera import exc, settings
from tessera.config import Config
from tessera.runtime import tuning

from examples.add import add

PACKAGE = pathlib.Path(tessera.__file__).parent
TUNING_BACKEND_MODULES = ["backends/config_space.py", "backends/candidates.py", "backends/triton/tuning.py",
                          "backends/triton/space.py", "backends/triton/heuristics.py",
                          "backends/triton/worker_support.py"]


def _imported_modules(path: pathlib.Path) -> set[str]:
    """Every module an import statement of `path` names (top-level and function-local), except
    under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
               and isinstance(branch.test, ast.Name) and branch.test.id == "TYPE_CHECKING"
               for statement in branch.body for node in ast.walk(statement)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _under(names: set[str], package: str) -> set[str]:
    return {name for name in names if name == package or name.startswith(package + ".")}


def _run_python(code: str, tmp_path: pathlib.Path) -> str:
    environment = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path), "TESSERA_PREWARM": "0"}
    environment.pop("TRITON_INTERPRET", None)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env=environment, cwd=PACKAGE.parent, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_autotuner_never_imports_triton():
    for path in sorted((PACKAGE / "autotune").glob("*.py")):
        assert not _under(_imported_modules(path), "triton"), path.name


def test_the_runtime_never_imports_the_autotuner():
    for path in sorted((PACKAGE / "runtime").glob("*.py")):
        assert not _under(_imported_modules(path), "tessera.autotune"), path.name


def test_the_backends_tuning_modules_import_neither_the_autotuner_nor_the_runtime():
    for relative in TUNING_BACKEND_MODULES:
        names = _imported_modules(PACKAGE / relative)
        assert not _under(names, "tessera.autotune") | _under(names, "tessera.runtime"), relative


def test_getting_the_triton_backend_leaves_triton_unimported(tmp_path):
    # a tuning worker gets its backend first, then chooses Triton's interpreter in prepare_worker:
    # that only works while nothing has imported triton yet
    assert _run_python("""
        import sys
        import tessera
        tessera.backends.get("triton")
        print("triton" in sys.modules)
    """, tmp_path) == "False"


PIPELINE_MODULES = ["tessera.autotune.bench_worker", "tessera.autotune.compile_pool", "tessera.autotune.pipeline",
                    "tessera.autotune.pool", "tessera.autotune.search", "tessera.autotune.workers"]


def test_a_call_served_by_the_disk_cache_imports_neither_the_pipeline_nor_the_workers(tmp_path):
    assert _run_python(f"""
        import sys
        import torch
        import tessera
        from tessera import settings
        from tessera.autotune import disk_cache
        from tessera.config import Config
        from tessera.runtime import tuning
        from examples.add import add

        x = torch.ones(8, 8)
        bound = add.bind(x, x)
        key = disk_cache.make_key(add.source_hash, bound.specialization_key(), bound.device)
        disk_cache.store(key, Config(block_sizes=[8, 8]), time_ms=1.0, effort="quick")
        with settings.override(autotune_effort="quick"):
            assert tuning.config_for_call(add, "compiled", (x, x), {{}})["block_sizes"] == [8, 8]
        print([name for name in {PIPELINE_MODULES} if name in sys.modules])
    """, tmp_path) == "[]"


def test_importing_tessera_imports_neither_triton_nor_the_tuning_pipeline(tmp_path):
    assert _run_python(f"""
        import sys
        import tessera
        print([name for name in ["triton"] + {PIPELINE_MODULES} if name in sys.modules])
    """, tmp_path) == "[]"


@pytest.fixture
def no_tuner():
    previous = tuning.install_tuner(None)
    try:
        yield
    finally:
        tuning.install_tuner(previous)


def test_without_a_tuner_a_compiled_call_runs_the_heuristic_config(no_tuner):
    kernel = tessera.kernel(add.fn)
    x = torch.randn(8, 2048)
    with settings.override(autotune_effort="quick"):
        assert tuning.config_for_call(kernel, "compiled", (x, x), {}) == tuning.heuristic_for(kernel.bind(x, x))


def test_without_a_tuner_autotune_says_none_is_installed(no_tuner):
    with pytest.raises(exc.AutotuneError, match="no autotuner is installed"):
        tessera.kernel(add.fn).autotune(torch.randn(4, 4), torch.randn(4, 4))


def test_the_installed_tuner_is_told_of_each_kernel_definition(monkeypatch):
    defined = []

    class Recorder:
        def kernel_defined(self, kernel):
            defined.append(kernel)

        def stored_config(self, kernel, bound, at_least):
            return None

        def tune(self, kernel, bound, effort):
            return Config()

    previous = tuning.install_tuner(Recorder())
    try:
        kernel = tessera.kernel(add.fn)
    finally:
        tuning.install_tuner(previous)
    assert defined == [kernel]
