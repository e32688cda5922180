"""Worker setups that fail on purpose, for the autotuner's fault-handling tests.

Spawned workers import this module by name (tests/ is on sys.path under pytest), so every
function here is module level. A candidate's fault is chosen by its launch settings:

    num_warps=1  -> compile error          num_warps=2  -> compile hangs (timeout)
    num_warps=16 -> bench worker dies      num_stages=3 -> kernel raises
    num_stages=4 -> wrong result (caught by the accuracy gate); for a plan whose results host
                    code finishes, wrong scratch (partial sums) instead

`timed_bench_setup` (bound to a table with functools.partial) reports fake times by num_warps;
`heuristic_compiles_slowly_setup` delays the compile of 4-warp candidates (add's heuristic),
`eight_warps_compile_slowly_setup` that of 8-warp ones (a straggler of their batch).

`echo_setup` and `session_echo_setup` drive WorkerGroup directly (tasks "crash", "hang", "raise");
`warm_echo_setup` has a warm-up that works, kills its process or hangs.

In the test process: `matmul_facts` / `softmax_facts` are kernel facts for the space, heuristic
and search tests; `FakeTimedBench` and `RecordingGroup` stand in for the bench worker group.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

import torch

from tessera.autotune.bench_worker import BenchHandler, BenchResult, BenchTask, accuracy_error
from tessera.autotune.compile_pool import CompileWorkerSpec, compile_worker_setup
from tessera.autotune import forking, pool
from tessera.autotune.workers import FatalWorkerError, Outcome
from tessera.backends.config_space import KernelFacts
from tessera.ir.tunables import TunableDim


def slow_compile_setup(spec: CompileWorkerSpec) -> Callable[[Any], Any]:
    time.sleep(4)
    return compile_worker_setup(spec)


def faulty_compile_setup(spec: CompileWorkerSpec) -> Callable[[Any], Any]:
    real = compile_worker_setup(spec)

    def handle(launches: list[Any]) -> Any:
        warps = launches[0].num_warps
        if warps == 1:
            raise SyntaxError("injected compile error")
        if warps == 2:
            time.sleep(3600)
        return real(launches)
    return handle


def _delayed_compile_setup(spec: CompileWorkerSpec, warps: int, seconds: float) -> Callable[[Any], Any]:
    """Candidates of `warps` warps take `seconds` more to compile; the others compile at once."""
    real = compile_worker_setup(spec)

    def handle(launches: list[Any]) -> Any:
        if launches[0].num_warps == warps:
            time.sleep(seconds)
        return real(launches)
    return handle


def heuristic_compiles_slowly_setup(spec: CompileWorkerSpec) -> Callable[[Any], Any]:
    """Candidates of 4 warps (add's heuristic Config) take 3 s to compile; the others compile at once."""
    return _delayed_compile_setup(spec, 4, 3)


def eight_warps_compile_slowly_setup(spec: CompileWorkerSpec) -> Callable[[Any], Any]:
    """Candidates of 8 warps take 6 s to compile (a straggler of their batch); the others compile at once."""
    return _delayed_compile_setup(spec, 8, 6)


def _scratch(task: BenchTask, inputs: list[Any]) -> list[Any]:
    """Tensors the launches take that are neither inputs nor results (e.g. partial-sum buffers)."""
    kept = {t.untyped_storage().data_ptr() for t in list(inputs) + list(task.results)}
    return [a for launch in task.launches for a in launch.arguments
            if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() not in kept]


class _FaultyBench(BenchHandler):
    def __call__(self, task: BenchTask) -> Any:
        launch = task.launches[0]
        if launch.num_warps == 16:
            os._exit(9)
        if launch.num_stages == 3:
            raise RuntimeError("injected launch failure")
        if launch.num_stages == 4 and task.run_only:
            result = super().__call__(task)
            assert self.session is not None
            for tensor in _scratch(task, [w for w, _ in self.session.inputs]):
                tensor.add_(1.0)
            return result
        if launch.num_stages == 4 and task.check:
            super().__call__(dataclasses.replace(task, check=False))
            for tensor in task.results:
                tensor.add_(1.0)
            assert self.session is not None
            error, detail = accuracy_error(task.results, self.session.reference)
            return BenchResult(None if error > 1 else 0.0, error, detail)
        return super().__call__(task)


def faulty_bench_setup(spec: Any) -> BenchHandler:
    return _FaultyBench(spec)


class _TimedBench(BenchHandler):
    """Checks candidates for real, then reports a time from `times[phase][num_warps]`: phase
    "search" for checked tasks (the search's), "final" for unchecked ones (the final timing's)."""

    def __init__(self, spec: Any, times: dict[str, dict[int, float]]) -> None:
        super().__init__(spec)
        self.times = times

    def __call__(self, task: BenchTask) -> Any:
        result = super().__call__(task)
        if result.time_ms is None or task.run_only:
            return result
        phase = "search" if task.check else "final"
        return dataclasses.replace(result, time_ms=self.times[phase][task.launches[0].num_warps])


def timed_bench_setup(times: dict[str, dict[int, float]], spec: Any) -> BenchHandler:
    return _TimedBench(spec, times)


def failing_setup(payload: Any) -> Callable[[Any], Any]:
    raise ImportError("injected setup failure")


def fork_fragile_setup(payload: Any) -> Callable[[Any], Any]:
    """Like a worker forked after the parent initialized CUDA (a race with the user's thread)."""
    if forking.in_forked_worker():
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
                           "you must use the 'spawn' start method")
    return echo_setup(payload)


def fork_stuck_setup(payload: Any) -> Callable[[Any], Any]:
    """Like a forked worker stuck on a lock its parent's other thread held at the fork."""
    if forking.in_forked_worker():
        time.sleep(3600)
    return echo_setup(payload)


def state_setup(payload: Any) -> Callable[[Any], Any]:
    """Answers with what a forked worker should (not) have of its parent."""
    import multiprocessing
    import sys

    import torch

    def handle(task: Any) -> Any:
        return {"forked": forking.in_forked_worker(), "parent": multiprocessing.parent_process() is not None,
                "pools": dict(pool._pools), "threads": torch.get_num_threads(), "pid": os.getpid(),
                "torch_preloaded": "torch" in sys.modules}
    return handle


def echo_setup(payload: Any) -> Callable[[Any], Any]:
    def handle(task: Any) -> Any:
        if task == "crash":
            os._exit(5)
        if task == "hang":
            time.sleep(3600)
        if task == "raise":
            raise ValueError("boom")
        if task == "pid":
            return os.getpid()
        return (payload, task)
    return handle


class _SessionEcho:
    """Answers (session, task); session "die" kills the worker the first time it is set up on
    it (a marker file says it happened), like a CUDA context found poisoned."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.session: Any = None

    def begin_session(self, session: Any) -> None:
        if session == "die" and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise FatalWorkerError("injected poisoned context")
        self.session = session

    def end_session(self) -> None:
        self.session = None

    def __call__(self, task: Any) -> Any:
        if task == "crash":
            os._exit(5)
        return (self.session, task, os.getpid())


def session_echo_setup(marker: str) -> _SessionEcho:
    return _SessionEcho(marker)


def slow_echo_setup(payload: Any) -> Callable[[Any], Any]:
    time.sleep(30)
    return echo_setup(payload)


class _WarmEcho:
    """Answers (warmed up before the task?, task, pid); its warm-up does `behaviour`: "ok"
    (takes 0.3 s), "crash" (kills the process) or "hang"."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.warmed = False

    def warm_up(self) -> str:
        if self.behaviour == "crash":
            os._exit(7)
        time.sleep(3600 if self.behaviour == "hang" else 0.3)
        self.warmed = True
        return "warmed"

    def __call__(self, task: Any) -> Any:
        return (self.warmed, task, os.getpid())


def warm_echo_setup(behaviour: str) -> _WarmEcho:
    return _WarmEcho(behaviour)


# ---------------------------------------------------------------------------------------------
# Used in the test process
# ---------------------------------------------------------------------------------------------

def matmul_facts() -> KernelFacts:
    return KernelFacts(tunables=(TunableDim(0, 4096, 16, "launch"), TunableDim(1, 4096, 16, "launch"),
                                 TunableDim(2, 4096, 16, "loop")),
                       launch_dims=(2,), dtypes=(torch.bfloat16,), uses_dot=True)


def softmax_facts(rows: int = 8192, width: int = 4096) -> KernelFacts:
    return KernelFacts(tunables=(TunableDim(0, rows, 1, "launch"),), launch_dims=(1,),
                       dtypes=(torch.bfloat16,), uses_reduction=True, largest_numel=rows * width)


class RecordingGroup:
    """Stands in for the bench worker group: keeps what is submitted."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Any, Any]] = []

    def submit(self, task_id: Any, task: Any) -> None:
        self.submitted.append((task_id, task))


class FakeTimedBench:
    """The bench worker group of a final round: a plan's time is `times[num_warps]`, or in round
    r `times[num_warps][r]` when that is a tuple."""

    def __init__(self, times: dict[int, Any]) -> None:
        self.times, self.submitted = times, []

    def submit(self, task_id: Any, task: Any) -> None:
        self.submitted.append((task_id, task.launches[0].num_warps))

    def wait_all(self) -> list[Outcome]:
        def time_of(task_id, warps):
            given = self.times[warps]
            return given[task_id[1]] if isinstance(given, tuple) else given
        return [Outcome(task_id, "ok", BenchResult(time_of(task_id, warps), 0.0, "")) for task_id, warps in self.submitted]
