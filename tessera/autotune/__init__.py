"""The autotuner: config space from the IR, heuristics, search, parallel compile, crash-proof
benchmarking and an on-disk cache (see pipeline.py for how the pieces fit)."""
from __future__ import annotations

from tessera.autotune.heuristics import heuristic_config
from tessera.autotune.pipeline import TuneOptions, TuneResult, decorator_line, tune
from tessera.autotune.space import ENABLED_KEYS, ConfigSpace, KernelFacts

__all__ = ["ENABLED_KEYS", "ConfigSpace", "KernelFacts", "TuneOptions", "TuneResult", "decorator_line",
           "heuristic_config", "tune"]
