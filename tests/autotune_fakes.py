"""Worker setups that fail on purpose, for the autotuner's fault-handling tests.

Spawned workers import this module by name (tests/ is on sys.path under pytest), so every
function here is module level. A candidate's fault is chosen by its launch settings:

    num_warps=1  -> compile error          num_warps=2  -> compile hangs (timeout)
    num_warps=16 -> bench worker dies      num_stages=3 -> kernel raises
    num_stages=4 -> wrong result (caught by the accuracy gate)
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

from tessera.autotune.bench_worker import BenchResult, BenchTask, accuracy_error, bench_worker_setup
from tessera.autotune.compile_pool import compile_worker_setup


def faulty_compile_setup(mode: str) -> Callable[[Any], Any]:
    real = compile_worker_setup(mode)

    def handle(launches: list[Any]) -> Any:
        warps = launches[0].num_warps
        if warps == 1:
            raise SyntaxError("injected compile error")
        if warps == 2:
            time.sleep(3600)
        return real(launches)
    return handle


def faulty_bench_setup(setup: Any) -> Callable[[BenchTask], Any]:
    real = bench_worker_setup(setup)

    def handle(task: BenchTask) -> Any:
        launch = task.launches[0]
        if launch.num_warps == 16:
            os._exit(9)
        if launch.num_stages == 3:
            raise RuntimeError("injected launch failure")
        if launch.num_stages == 4 and task.check:
            real(dataclasses.replace(task, check=False))
            for tensor in task.results:
                tensor.add_(1.0)
            error, detail = accuracy_error(task.results, setup.reference)
            return BenchResult(None if error > 1 else 0.0, error, detail)
        return real(task)
    return handle


def failing_setup(payload: Any) -> Callable[[Any], Any]:
    raise ImportError("injected setup failure")


def echo_setup(payload: Any) -> Callable[[Any], Any]:
    def handle(task: Any) -> Any:
        if task == "crash":
            os._exit(5)
        if task == "hang":
            time.sleep(3600)
        if task == "raise":
            raise ValueError("boom")
        return (payload, task)
    return handle
