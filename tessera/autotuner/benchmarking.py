"""Wall-clock timing of a callable (Helion's `helion.autotuner.benchmarking.do_bench_generic`).

A wall clock with a device sync around the timed calls works for every backend and on the CPU;
`tessera._testing.do_bench` uses CUDA events where a GPU is present.

>>> ms = do_bench_generic(lambda: torch.ones(64).sum())      # doctest: +SKIP
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

RETURN_MODES = ("min", "max", "mean", "median", "all")


def synchronize_device() -> None:
    """Wait for queued GPU work (nothing to wait for on the CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def do_bench_generic(fn: Callable[[], Any], warmup: int = 25, rep: int = 100, grad_to_none: Any = None,
                     quantiles: list[float] | None = None, return_mode: str = "mean", *,
                     fixed_repetitions: int | None = None, **_: Any) -> float | tuple[float, ...] | list[float]:
    """Milliseconds per call of `fn`, by wall clock: about `warmup` ms of untimed calls, then
    about `rep` ms of timed ones (or exactly `fixed_repetitions`), each synchronized.

    `quantiles` returns those quantiles of the samples; else `return_mode` picks the statistic
    ('all' gives every sample). `grad_to_none` tensors get `.grad = None` before each call.
    """
    if return_mode not in RETURN_MODES:
        raise ValueError(f"return_mode must be one of {RETURN_MODES}, got {return_mode!r}")

    def call() -> None:
        for tensor in grad_to_none or ():
            tensor.grad = None
        fn()

    call()
    synchronize_device()
    if fixed_repetitions is None:
        start, calls = time.perf_counter(), 0
        while calls < 5 and (time.perf_counter() - start) * 1000 < rep:  # a slow fn needs fewer to estimate
            call()
            synchronize_device()
            calls += 1
        estimate_ms = max((time.perf_counter() - start) * 1000 / max(calls, 1), 1e-6)
        warmups, repetitions = max(1, int(warmup / estimate_ms)), max(1, int(rep / estimate_ms))
    else:
        warmups, repetitions = 0, max(1, fixed_repetitions)
    for _ in range(warmups):
        call()
    samples = []
    for _ in range(repetitions):
        synchronize_device()
        start = time.perf_counter()
        call()
        synchronize_device()
        samples.append((time.perf_counter() - start) * 1000)
    if quantiles is not None:
        ordered = torch.tensor(samples, dtype=torch.float64)
        return tuple(float(q) for q in torch.quantile(ordered, torch.tensor(quantiles, dtype=torch.float64)))
    if return_mode == "all":
        return samples
    pick = {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}[return_mode]
    return float(pick(samples))


__all__ = ["do_bench_generic", "synchronize_device"]
