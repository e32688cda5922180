"""Benchmark scripts (benchmarks/*.py) imported as modules, for the tests that run a slice of them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as module `name` (registered in sys.modules: dataclasses look it up)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
