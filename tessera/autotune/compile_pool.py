"""Compile candidates in parallel worker processes, filling Triton's on-disk cache.

Compiling is the slow part of tuning (a matmul config takes seconds in ptxas), and it is all
CPU: a pool of worker processes compiles many candidates at once. A worker imports the
generated module and calls Triton's `JITFunction.warmup(*args, grid=..., num_warps=...,
num_stages=...)`, which compiles without launching and stores the binary in Triton's cache; the
benchmark worker then finds it there. Tensors are not needed to compile, only their dtype and
whether their address is 16-byte aligned (part of Triton's specialization), so tasks carry
`TensorStandIn`s and stay small. In interpret mode there is nothing to compile: importing the
module catches what can be caught early.

A process's first compile costs seconds more than the next ones (Triton hashes its own 400 MB
library for its cache key, imports its code generator, loads its backend), so a compiled-mode
worker compiles a tiny kernel (`WARM_UP_SOURCE`) on a thread as soon as it is set up
(`warm_up`, see workers.py): when the pool started before the candidates came (a warm pool, or
one prestarted when the kernel was defined, prewarm.py), their first compile is a warm one.

>>> pool = WorkerGroup("compile", 8, setup=compile_worker_setup, payload="compiled", task_timeout=60)
>>> pool.submit(candidate_id, compile_task(plan))     # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import sys
import time
from typing import Any, Callable

import torch

from tessera import settings
from tessera.runtime.plan import KernelPlan

WARM_UP_NAME = "tessera_warm_up"
WARM_UP_SOURCE = '''# Written by Tessera: each autotuning worker compiles it once when it starts (compile_pool.py).
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def tessera_warm_up(x, out, n):
    offsets = tl.program_id(0) * 128 + tl.arange(0, 128)
    mask = offsets < n
    values = tl.load(x + offsets, mask=mask, other=0).to(tl.float32)
    values = tl.exp(values - tl.max(values, 0))
    tl.store(out + offsets, values / tl.sum(values, 0), mask=mask)
'''
"""Like a generated kernel: the same imports, masked loads and stores, a row reduction."""


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
    and the GPU's target; then, on the worker's warm-up thread, a first compile.
    """
    set_triton_mode(mode)
    import triton  # noqa: F401
    if mode == "compiled":
        torch.cuda.init()
        warm_triton_driver()
        return _CompileHandler()
    return _import_launches


class _CompileHandler:
    """Compiles candidates (compiled mode); `warm_up` runs once, off the worker's main thread."""

    def __call__(self, launches: list[CompileLaunch]) -> float:
        return _compile_launches(launches)

    def warm_up(self) -> str:
        return warm_up_compiler()


def warm_up_compiler() -> str:
    """Compile the warm-up kernel the way a candidate compiles; says how long its parts took.

    It may be in Triton's cache already (then nothing is compiled): what is warmed is mostly
    per process (Triton's cache key, which hashes its library; its code generator's imports).
    """
    begun = time.perf_counter()
    try:
        from triton.runtime.cache import triton_key  # Triton-internal: only timed here, if present
        triton_key()
    except Exception:  # noqa: BLE001 - the compile below computes it anyway
        pass
    keyed = time.perf_counter()
    stand_ins = (TensorStandIn(torch.bfloat16, True), TensorStandIn(torch.float32, True), 128)
    _compile_launches([CompileLaunch(warm_up_source_path(), WARM_UP_NAME, stand_ins, 4, 2)])
    return f"Triton's cache key {keyed - begun:.2f} s, then compile {time.perf_counter() - keyed:.2f} s"


def warm_up_source_path() -> str:
    """The warm-up kernel's file, next to the generated kernels (Triton reads sources from files)."""
    digest = hashlib.sha256(WARM_UP_SOURCE.encode()).hexdigest()[:16]
    path = os.path.join(settings.get("cache_dir"), "tessera_generated", f"{WARM_UP_NAME}_{digest}_gpu.py")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"  # every worker may write it at once
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(WARM_UP_SOURCE)
        os.replace(temporary, path)
    return path


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


__all__ = ["WARM_UP_NAME", "CompileLaunch", "TensorStandIn", "compile_task", "compile_worker_setup", "load_function",
           "warm_triton_driver", "warm_up_compiler", "warm_up_source_path"]
