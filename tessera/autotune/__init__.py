"""The autotuner: search, parallel compile, crash-proof benchmarking and an on-disk cache (see
pipeline.py for how the pieces fit). The config space and the heuristic first Config are the
backend's (`Backend.config_space`, `Backend.heuristic_config`; Triton's in backends/triton/).

The runtime reaches the autotuner through the hook that `tuner.install_autotuner()` (called by
tessera/__init__.py) installs; that loads the small parts (`tuner`, `prewarm`, `disk_cache`,
`progress`). Other names load on first use: a kernel definition and a call served by the disk
cache never import the pipeline (tens of ms on a process's first call).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"TuneOptions": "pipeline", "TuneResult": "pipeline", "decorator_line": "pipeline", "tune": "pipeline"}
_SUBMODULES = frozenset({"bench_worker", "compile_pool", "disk_cache", "forking", "pipeline", "pool", "prewarm",
                         "progress", "search", "tuner", "worker_process", "workers"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
