"""Check and time candidates in a worker process, so a faulty one cannot take the user down.

The worker is set up once per process (`BenchWorkerSpec`: mode, device, the L2 flush buffer)
and serves every kernel tuned in the process. Per tuning run it gets a `BenchSession`: the
tuning copies of the kernel's inputs (with a pristine copy of each, to undo in-place kernels)
and the eager reference result; per candidate, the plan's launches with their tensors. Tensors
travel by CUDA IPC (or shared memory on the CPU): views keep aliasing their storage, and what
the worker writes the parent sees.

Per candidate: restore the inputs, run once, compare with the reference (`accuracy_error`),
then time with CUDA events as `triton.testing.do_bench` does: warm-up, a 256 MB write before
each run so every run starts with a cold L2, median of the runs. A task may carry a cutoff (a
few times the fastest candidate of the run so far): a candidate whose first timed run exceeds it
reports that run's time without the rest, since it cannot win (on the H100 a slow grouped-GEMM
candidate took most of a 30 s quick budget to time in full). In interpret mode (CPU) the
same path uses wall-clock time and few runs, so CI exercises it end to end.

A kernel whose results host code finishes after its launches (partial sums per block, summed
on the host) cannot be checked here: the worker has the launches, not the host code. For such
a plan the parent sends a `run_only` task (restore, run once, return), checks the result itself
(host_finish.py), then sends an unchecked task to time it.

Right after setup (compiled mode) the worker has its backend compile and launch a tiny kernel
once, on its warm-up thread (`warm_up`, see workers.py), so the first candidate does not pay for
what a process's first launch costs (Triton: its cache key, its launcher, loading a module on the
GPU). What is backend-specific (loading and launching a candidate's kernels) the worker asks of
the backend named in its spec (`Backend.candidate_runner`, backends/triton/worker_support.py).

A CUDA error (an illegal memory access poisons the CUDA context) ends the worker after it
reports; the parent starts a fresh one. A worker kept warm between runs checks its CUDA
context at the start of each session, so a poisoned one is never reused.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from tessera import backends
from tessera.autotune.workers import FatalWorkerError
from tessera.backends.candidates import RunLaunch
from tessera.runtime.plan import KernelPlan

if TYPE_CHECKING:
    from tessera.backends.base import Backend

L2_FLUSH_BYTES = 256 * 1024 * 1024
_CUDA_FAULTS = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
                "an illegal instruction", "misaligned address", "CUDA driver error")

# relative tolerance per output dtype; absolute tolerance is this times the output's RMS
_TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-6, torch.float32: 5e-3, torch.float16: 1e-2, torch.bfloat16: 4e-2,
}


@dataclasses.dataclass(frozen=True)
class BenchWorkerSpec:
    """What a bench worker process is set up with, once: shared by every kernel tuned."""

    mode: str                # 'compiled' | 'interpret'
    device: str = "cpu"      # e.g. 'cuda:0'
    flush_bytes: int = L2_FLUSH_BYTES
    backend: str = "triton"  # the name `tessera.backends.get` knows it by


@dataclasses.dataclass(frozen=True)
class BenchSession:
    """What one tuning run gives the bench worker before its first candidate."""

    inputs: list[tuple[torch.Tensor, torch.Tensor]]  # (working storage, pristine copy), as uint8 tensors
    reference: list[torch.Tensor]                    # the eager result (or autotune_baseline_fn's), flattened
    tolerance: tuple[float, float] | None = None     # (atol, rtol) of autotune_baseline_atol/rtol; None: by dtype
    check: bool = True                               # autotune_accuracy_check=False: candidates are not checked


@dataclasses.dataclass(frozen=True)
class BenchTask:
    launches: list[RunLaunch]
    results: list[torch.Tensor]  # the plan's result, flattened (written by the launches)
    check: bool                   # run the accuracy gate first
    rep_ms: float                 # how long to spend timing
    run_only: bool = False        # restore the inputs, run once and return: the parent checks (host-finished plans)
    cutoff_ms: float | None = None  # a first timed run slower than this is the result (it cannot win)


@dataclasses.dataclass(frozen=True)
class BenchResult:
    time_ms: float | None  # None when the accuracy gate rejected the candidate
    error: float           # accuracy error in tolerance units (<= 1 passes), or nan if unchecked
    detail: str = ""


def bench_task(plan: KernelPlan, *, check: bool, rep_ms: float, run_only: bool = False,
               cutoff_ms: float | None = None) -> BenchTask:
    """What the worker needs to run and time one candidate's plan (`run_only`: run it once, for
    the parent's accuracy check of a plan whose results host code finishes; `cutoff_ms`: see
    the module docstring)."""
    launches = [RunLaunch(launch.source_path, launch.function_name, tuple(launch.arguments), tuple(launch.grid),
                          launch.num_warps, launch.num_stages) for launch in plan.launches]
    return BenchTask(launches, flatten_tensors(plan.result), check, rep_ms, run_only, cutoff_ms)


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Tensors of a (possibly nested) kernel result, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in flatten_tensors(item)]
    if isinstance(value, dict):
        return [t for key in value for t in flatten_tensors(value[key])]
    return []


# -- accuracy gate -----------------------------------------------------------------------------

def accuracy_error(results: list[torch.Tensor], reference: list[torch.Tensor],
                   tolerance: tuple[float, float] | None = None) -> tuple[float, str]:
    """Worst error over the outputs in units of the tolerance (<= 1 passes), and what failed.

    With `tolerance=(atol, rtol)` (the kernel's autotune_baseline_atol/rtol) a float passes where
    |got - want| <= atol + rtol * |want|, as in torch.testing.assert_close.

    Floating outputs pass where |got - want| <= tol * (rms(want) + |want|), tol by dtype: scaling
    by the output's magnitude keeps the gate meaningful for tiny softmax probabilities and huge
    matmul sums alike; NaN and inf must appear where the reference has them. Other dtypes must
    match exactly.
    """
    if len(results) != len(reference):
        return math.inf, f"{len(results)} outputs, expected {len(reference)}"
    worst, detail = 0.0, ""
    for position, (got, want) in enumerate(zip(results, reference)):
        if got.shape != want.shape or got.dtype != want.dtype:
            return math.inf, f"output {position}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
        error = _tensor_error(got, want, tolerance)
        if error > worst:
            worst, detail = error, f"output {position} off by {error:.3g} tolerances"
    return worst, detail


def _tensor_error(got: torch.Tensor, want: torch.Tensor, tolerance: tuple[float, float] | None = None) -> float:
    if got.numel() == 0:
        return 0.0
    if not want.is_floating_point():
        return 0.0 if torch.equal(got, want) else math.inf
    got64, want64 = got.double(), want.double()
    special = ~torch.isfinite(want64)
    if not torch.equal(special, ~torch.isfinite(got64)):
        return math.inf
    if special.any() and not torch.equal(got64[special].nan_to_num(0.0), want64[special].nan_to_num(0.0)):
        return math.inf
    finite = ~special
    got64, want64 = got64[finite], want64[finite]
    if want64.numel() == 0:
        return 0.0
    if tolerance is not None:
        atol, rtol = tolerance
        allowed = atol + rtol * want64.abs() + torch.finfo(torch.float64).tiny
    else:
        relative = _TOLERANCE.get(want.dtype, 1e-2)
        rms = float(want64.square().mean().sqrt())
        allowed = relative * (rms + want64.abs()) + torch.finfo(torch.float64).tiny
    return float(((got64 - want64).abs() / allowed).max())


# -- the worker --------------------------------------------------------------------------------

def bench_worker_setup(spec: BenchWorkerSpec) -> BenchHandler:
    """Worker setup: the spec's backend in its mode, CUDA and the L2 flush buffer; returns the handler."""
    return BenchHandler(spec)


class BenchHandler:
    """Checks and times candidates of the current session (`begin_session` / `end_session`)."""

    def __init__(self, spec: BenchWorkerSpec) -> None:
        self.backend: Backend = backends.get(spec.backend)
        self.backend.prepare_worker(interpret=spec.mode == "interpret")
        self.spec = spec
        self.session: BenchSession | None = None
        self.flush: torch.Tensor | None = None
        self.warm_up: Callable[[], str] | None = None  # interpret mode: nothing to warm up
        if spec.mode == "compiled":
            self.warm_up = self._launch_warm_up_kernel
            device = torch.device(spec.device)
            torch.cuda.set_device(device)
            self.flush = torch.empty(spec.flush_bytes // 4, dtype=torch.int32, device=device)  # creates the context
            torch.cuda.synchronize()
            self.backend.warm_up_driver()

    def _launch_warm_up_kernel(self) -> str:
        """Compile and run the backend's warm-up kernel once, on this worker's GPU."""
        return self.backend.warm_up_launch(torch.device(self.spec.device))

    def begin_session(self, session: BenchSession) -> None:
        self.session = None
        self._check_device()
        self.session = session

    def end_session(self) -> None:
        self.session = None  # lets the tuning process free the run's tensors

    def __call__(self, task: BenchTask) -> BenchResult:
        if self.session is None:
            raise RuntimeError("bench worker got a candidate before the tuning run's inputs")
        try:
            return _check_and_time(self.backend, self.spec.mode, self.session, task, self.flush)
        except Exception as error:
            if any(text in str(error) for text in _CUDA_FAULTS):
                raise FatalWorkerError(f"{type(error).__name__}: {error}") from None
            self._check_device()  # an error that left the CUDA context broken ends the worker too
            raise

    def _check_device(self) -> None:
        """Raise FatalWorkerError unless the CUDA context still runs work (errors are sticky)."""
        if self.flush is None:
            return
        try:
            self.flush[:1].zero_()
            torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001
            raise FatalWorkerError(f"CUDA context unusable: {type(error).__name__}: {error}") from None


def _check_and_time(backend: Backend, mode: str, session: BenchSession, task: BenchTask,
                    flush: torch.Tensor | None) -> BenchResult:
    run = backend.candidate_runner(task.launches)
    error, detail = math.nan, ""
    if task.run_only:
        # the plan's results are finished by host code after its launches: the parent runs that
        # code on what these launches wrote and checks the result (pipeline.py, `finish_on_host`)
        for working, pristine in session.inputs:
            working.copy_(pristine)
        run()
        _synchronize(mode)
        return BenchResult(None, math.nan, "ran")
    if task.check and session.check:
        for working, pristine in session.inputs:
            working.copy_(pristine)
        if task.results and accuracy_error(task.results, session.reference, session.tolerance)[0] <= 1.0:
            # the outputs already hold the answer (memory reused from an earlier candidate):
            # poison them so a candidate that writes nothing cannot pass
            for tensor in task.results:
                tensor.fill_(math.nan if tensor.is_floating_point() else -1)
        run()
        _synchronize(mode)
        error, detail = accuracy_error(task.results, session.reference, session.tolerance)
        if not error <= 1.0:
            return BenchResult(None, error, detail or "wrong result")
    else:
        run()
    timer = _time_cuda if mode == "compiled" else _time_wall
    return BenchResult(timer(run, task.rep_ms, flush, task.cutoff_ms), error, detail)


def _synchronize(mode: str) -> None:
    if mode == "compiled":
        torch.cuda.synchronize()


def _time_cuda(run: Callable[[], None], rep_ms: float, flush: torch.Tensor | None,
               cutoff_ms: float | None = None) -> float:
    """Median ms of `run` with a cold L2, from CUDA events around each run; the time of one run
    when that exceeds `cutoff_ms`."""
    assert flush is not None
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if cutoff_ms is not None:
        flush.zero_()
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        if start.elapsed_time(end) > cutoff_ms:
            return start.elapsed_time(end)
    start.record()
    for _ in range(3):
        flush.zero_()
        run()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-3)
    count = int(min(max(rep_ms / estimate, 5), 1000))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for begin, finish in zip(starts, ends):
        flush.zero_()  # cold L2, and the GPU stays busy while the next launch is queued
        begin.record()
        run()
        finish.record()
    torch.cuda.synchronize()
    return statistics.median(begin.elapsed_time(finish) for begin, finish in zip(starts, ends))


def _time_wall(run: Callable[[], None], rep_ms: float, flush: torch.Tensor | None,
               cutoff_ms: float | None = None) -> float:
    """Median wall-clock ms (interpret mode: the CPU smoke path, a handful of runs); the time of
    the first run when that exceeds `cutoff_ms`."""
    samples: list[float] = []
    spent = 0.0
    while len(samples) < 3 and (not samples or spent < rep_ms):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
        spent += samples[-1]
        if cutoff_ms is not None and samples[0] > cutoff_ms:
            break
    return statistics.median(samples)


__all__ = ["BenchHandler", "BenchResult", "BenchSession", "BenchTask", "BenchWorkerSpec", "accuracy_error",
           "bench_task", "bench_worker_setup", "flatten_tensors"]
