"""Compile candidates in parallel worker processes, filling Triton's on-disk cache.

Compiling is the slow part of tuning (a matmul config takes seconds in ptxas), and it is all
CPU: a pool of worker processes compiles many candidates at once. A worker imports the
generated module and calls Triton's `JITFunction.warmup(*args, grid=..., num_warps=...,
num_stages=...)`, which compiles without launching and stores the binary in Triton's cache; the
benchmark worker then finds it there. Tensors are not needed to compile, only their dtype and
whether their address is 16-byte aligned (part of Triton's specialization), so tasks carry
`TensorStandIn`s and stay small. In interpret mode there is nothing to compile: importing the
module catches what can be caught early.

>>> pool = WorkerGroup("compile", 8, setup=compile_worker_setup, payload="compiled", task_timeout=60)
>>> pool.submit(candidate_id, compile_task(plan))     # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import time
from typing import Any, Callable

import torch

from tessera.runtime.plan import KernelPlan


@dataclasses.dataclass(frozen=True)
class TensorStandIn:
    """What Triton's specialization needs to know of a tensor argument."""

    dtype: torch.dtype
    aligned: bool


@dataclasses.dataclass(frozen=True)
class CompileLaunch:
    source_path: str
    function_name: str
    arguments: tuple[Any, ...]  # TensorStandIn | int | float
    num_warps: int
    num_stages: int


def compile_task(plan: KernelPlan) -> list[CompileLaunch]:
    """The compile work of one candidate: each launch with tensors replaced by stand-ins."""
    return [CompileLaunch(launch.source_path, launch.function_name,
                          tuple(_stand_in(a) for a in launch.arguments), launch.num_warps, launch.num_stages)
            for launch in plan.launches]


def _stand_in(argument: Any) -> Any:
    if isinstance(argument, torch.Tensor):
        return TensorStandIn(argument.dtype, argument.data_ptr() % 16 == 0)
    return argument


def set_triton_mode(mode: str) -> None:
    """Make this (fresh) process import Triton with or without its interpreter, like the parent."""
    if "triton" in sys.modules:
        return
    if mode == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)


_modules: dict[tuple[str, str], Any] = {}


def load_function(source_path: str, function_name: str) -> Any:
    """Import a generated module once per process and return its kernel function."""
    key = (source_path, function_name)
    if key not in _modules:
        module_name = "tessera_candidate_" + os.path.splitext(os.path.basename(source_path))[0]
        spec = importlib.util.spec_from_file_location(module_name, source_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import generated source {source_path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[key] = getattr(module, function_name)
    return _modules[key]


def compile_worker_setup(mode: str) -> Callable[[list[CompileLaunch]], float]:
    """Worker setup: import Triton in `mode`; the handler compiles a candidate's launches.

    Everything a first compile would otherwise pay for happens here, while the parent is still
    tracing: CUDA's driver, Triton's driver utilities (a small C module, built once per machine)
    and the GPU's target.
    """
    set_triton_mode(mode)
    import triton  # noqa: F401
    if mode == "compiled":
        torch.cuda.init()
        warm_triton_driver()
    return _compile_launches if mode == "compiled" else _import_launches


def warm_triton_driver() -> None:
    """Load Triton's CUDA driver utilities and read the GPU's target (what a first launch or
    compile would do), so a worker's first task does not pay for it. Best effort: a failure
    here shows up, with its real cause, in the task that needs the driver."""
    try:
        from triton.runtime.driver import driver
        driver.active.get_current_target()
    except Exception:  # noqa: BLE001
        pass


def _compile_launches(launches: list[CompileLaunch]) -> float:
    from triton.runtime.jit import MockTensor

    class _StandIn(MockTensor):
        def __init__(self, dtype: torch.dtype, aligned: bool) -> None:
            super().__init__(dtype)
            self._address = 0 if aligned else 8

        def data_ptr(self) -> int:  # type: ignore[override]
            return self._address

    start = time.perf_counter()
    for launch in launches:
        function = load_function(launch.source_path, launch.function_name)
        arguments = [_StandIn(a.dtype, a.aligned) if isinstance(a, TensorStandIn) else a for a in launch.arguments]
        function.warmup(*arguments, grid=(1,), num_warps=launch.num_warps, num_stages=launch.num_stages)
    return time.perf_counter() - start


def _import_launches(launches: list[CompileLaunch]) -> float:
    start = time.perf_counter()
    for launch in launches:
        load_function(launch.source_path, launch.function_name)
    return time.perf_counter() - start


__all__ = ["CompileLaunch", "TensorStandIn", "compile_task", "compile_worker_setup", "load_function",
           "warm_triton_driver"]
