"""Compile candidates in parallel worker processes, filling the backend's on-disk cache.

Compiling is the slow part of tuning (a matmul config takes seconds in ptxas), and it is all
CPU: a pool of worker processes compiles many candidates at once. A worker asks its backend to
compile a candidate's launches without running them (`Backend.compile_candidate`; Triton:
`JITFunction.warmup`, see backends/triton/worker_support.py), which stores the binaries in the
backend's cache; the benchmark worker then finds them there. Tensors are not needed to compile,
only their dtype and whether their address is 16-byte aligned, so tasks carry `TensorStandIn`s
and stay small. In interpret mode there is nothing to compile: loading the modules catches what
can be caught early.

A process's first compile costs seconds more than the next ones, so a compiled-mode worker
compiles a tiny kernel (`Backend.warm_up_compiler`) on a thread as soon as it is set up
(`warm_up`, see workers.py): when the pool started before the candidates came (a warm pool, or
one prestarted when the kernel was defined, prewarm.py), their first compile is a warm one.

>>> pool = WorkerGroup("compile", 8, setup=compile_worker_setup, payload=CompileWorkerSpec("compiled"),
...                    task_timeout=60)                               # doctest: +SKIP
>>> pool.submit(candidate_id, compile_task(plan))                     # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import torch

from tessera import backends
from tessera.backends.candidates import CompileLaunch, TensorStandIn
from tessera.runtime.plan import KernelPlan

if TYPE_CHECKING:
    from tessera.backends.base import Backend


@dataclasses.dataclass(frozen=True)
class CompileWorkerSpec:
    """What a compile worker process is set up with, once: shared by every kernel tuned."""

    mode: str                # 'compiled' | 'interpret'
    backend: str = "triton"  # the name `tessera.backends.get` knows it by


def compile_task(plan: KernelPlan) -> list[CompileLaunch]:
    """The compile work of one candidate: each launch with tensors replaced by stand-ins."""
    return [CompileLaunch(launch.source_path, launch.function_name,
                          tuple(_stand_in(a) for a in launch.arguments), launch.num_warps, launch.num_stages)
            for launch in plan.launches]


def _stand_in(argument: Any) -> Any:
    if isinstance(argument, torch.Tensor):
        return TensorStandIn(argument.dtype, argument.data_ptr() % 16 == 0)
    return argument


def compile_worker_setup(spec: CompileWorkerSpec) -> Callable[[list[CompileLaunch]], float]:
    """Worker setup: the backend prepares the process for the spec's mode; the handler compiles
    a candidate's launches.

    Everything a first compile would otherwise pay for happens here, while the parent is still
    tracing: CUDA's driver, the backend's driver utilities and the GPU's target; then, on the
    worker's warm-up thread, a first compile.
    """
    backend = backends.get(spec.backend)
    backend.prepare_worker(interpret=spec.mode == "interpret")
    if spec.mode == "compiled":
        torch.cuda.init()
        backend.warm_up_driver()
        return _CompileHandler(backend)
    return _LoadHandler(backend)


class _CompileHandler:
    """Compiles candidates (compiled mode); `warm_up` runs once, off the worker's main thread."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def __call__(self, launches: list[CompileLaunch]) -> float:
        return self.backend.compile_candidate(launches, interpret=False)

    def warm_up(self) -> str:
        return self.backend.warm_up_compiler()


class _LoadHandler:
    """Loads candidates' modules (interpret mode: nothing to compile, nothing to warm up)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def __call__(self, launches: list[CompileLaunch]) -> float:
        return self.backend.compile_candidate(launches, interpret=True)


__all__ = ["CompileWorkerSpec", "compile_task", "compile_worker_setup"]
