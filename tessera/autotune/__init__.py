"""The autotuner: config space from the IR, heuristics, search, parallel compile, crash-proof
benchmarking and an on-disk cache (see pipeline.py for how the pieces fit).

Names load on first use: a call served by the disk cache imports only `disk_cache`, and a kernel
definition only `prewarm`, not the whole pipeline (tens of ms on a process's first call).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"heuristic_config": "heuristics", "TuneOptions": "pipeline", "TuneResult": "pipeline",
            "decorator_line": "pipeline", "tune": "pipeline", "ENABLED_KEYS": "space", "ConfigSpace": "space",
            "KernelFacts": "space"}
_SUBMODULES = frozenset({"bench_worker", "compile_pool", "disk_cache", "forking", "heuristics", "pipeline", "pool",
                         "prewarm", "progress", "search", "space", "workers"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
