"""The autotuner as the runtime sees it: the `Tuner` that tessera/__init__.py installs.

The runtime sits below the autotuner and does not import it; it calls the tuner installed with
`tessera.runtime.tuning.install_tuner` at three moments: a kernel is defined (prewarm.py may
start the workers), a compiled call has no Config yet (the disk cache may hold one), and a call
must be tuned (pipeline.py, then the result is stored on disk).

Installing imports the small parts (prewarm, disk_cache, progress: a few ms), not the pipeline:
`tune` imports it on first use, so a kernel definition and a call served by the disk cache never
load the search and the worker machinery (tens of ms on a process's first call).

>>> install_autotuner()   # tessera/__init__.py            # doctest: +SKIP
"""
from __future__ import annotations

import sys
from typing import Any

from tessera.autotune import disk_cache, prewarm, progress
from tessera.config import Config
from tessera.runtime.tuning import install_tuner


class Autotuner:
    """tessera.autotune behind the runtime's `Tuner` protocol (runtime/tuning.py)."""

    def kernel_defined(self, kernel: Any) -> None:
        """Start the workers now if the kernel will likely tune (prewarm.py); never raises."""
        prewarm.kernel_defined(kernel)

    def stored_config(self, kernel: Any, bound: Any, at_least: str) -> Config | None:
        """The disk cache's Config for this call, tuned with at least `at_least` effort, or None."""
        key = disk_cache.make_key(kernel.source_hash, bound.specialization_key(), bound.device,
                                   kernel.settings.backend)
        entry = disk_cache.lookup(key, at_least=at_least)
        if entry is None:
            return None
        progress.log(f"{kernel.fn.__name__}: disk cache hit: {entry.config} ({entry.time_ms:.4g} ms, {entry.effort})")
        return entry.config

    def tune(self, kernel: Any, bound: Any, effort: str) -> Config:
        """Tune this call (among the kernel's `configs=` when given), store the result on disk, and
        say on stderr how to hard-code it."""
        from tessera.autotune import pipeline  # the search and the worker machinery: only when tuning
        configs = list(kernel.settings.configs)
        budget = kernel.settings.autotune_budget_seconds
        among = f"among its {len(configs)} configs" if configs else f"{effort} effort"
        progress.announce(f"autotuning {kernel.fn.__name__} for this call's shapes ({among}"
                          f"{f', at most {budget:g} s' if budget else ''}); the call waits for it. "
                          "To skip tuning: config=... or autotune_effort='none'")
        result = pipeline.tune(bound, effort=effort, budget_seconds=kernel.settings.autotune_budget_seconds,
                               seeds=configs or None, only_seeds=bool(configs),
                               seed=kernel.settings.autotune_random_seed)
        key = disk_cache.make_key(kernel.source_hash, bound.specialization_key(), bound.device,
                                   kernel.settings.backend)
        disk_cache.store(key, result.config, time_ms=result.time_ms, effort="given" if configs else effort)
        tried = len(result.search.trials)
        failed = sum(result.failures.values())
        summary = f"autotuned {kernel.fn.__name__} in {result.seconds:.1f} s ({tried} candidates, {failed} failed)"
        if bound.mode == "interpret":
            # the interpreter's clock measures Python, not a GPU: say so rather than advertise a winner
            runs, device = (("Pallas's interpreter", "device") if kernel.settings.backend == "pallas"
                            else ("Triton's CPU interpreter", "GPU"))
            print(f"[tessera] {summary} in {runs}. Interpreter timings say nothing about {device} "
                  f"speed: this Config is one that runs correctly, not a fast one, and its GPU choices (indexing, "
                  f"e.g. TMA tensor descriptors, warps, stages) were not chosen for performance. Tune on a GPU "
                  f"before hard-coding a Config.\n    chosen here: {result.config!r}", file=sys.stderr)
            return result.config
        print(f"[tessera] {summary}: {result.time_ms:.4g} ms. To skip tuning, hard-code it:\n"
              f"    {pipeline.decorator_line(result.config)}", file=sys.stderr)
        return result.config


def install_autotuner() -> None:
    """Make tessera.autotune the runtime's tuner (tessera/__init__.py calls this once)."""
    install_tuner(Autotuner())


__all__ = ["Autotuner", "install_autotuner"]
