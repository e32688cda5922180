"""One tuning run: plan candidates, compile them in parallel, check and time them in a worker.

    heuristic seed ── search ──> configs ──> bound.plan(config)        (parent: trace + codegen)
                                   │             └─> compile pool      (N processes: Triton warmup)
                                   │                     └─> bench worker (1 process: gate + timing)
                                   └── times <───────────────────────────────┘
    then the fastest few are timed again, longer, and the best wins.

The kernel is tuned on copies of its arguments (aliasing kept), so timing runs of an in-place
kernel never touch the user's tensors, and the eager reference is computed once, in the parent.
Every failure is a failed candidate with a reason in the log: planning (a ConfigError), compile
error, exception, timeout, crash of a worker, wrong result.

>>> result = tune(kernel.bind(x), effort="quick", budget_seconds=30)   # doctest: +SKIP
>>> result.config
Config(block_sizes=[1], num_warps=8, num_stages=1)
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from typing import Any, Callable

import torch

from tessera import exc, settings
from tessera.autotune import progress
from tessera.autotune.bench_worker import BenchResult, BenchSetup, bench_task, bench_worker_setup, flatten_tensors
from tessera.autotune.compile_pool import compile_task, compile_worker_setup
from tessera.autotune.heuristics import heuristic_config
from tessera.autotune.search import SearchResult, search
from tessera.autotune.space import ConfigSpace
from tessera.autotune.workers import Outcome, WorkerGroup, wait_for
from tessera.config import Config


@dataclasses.dataclass
class TuneOptions:
    """Knobs of the pipeline (the defaults suit an H100 with 16 cores; tests shrink them)."""

    compile_workers: int = min(16, os.cpu_count() or 1)
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 30.0
    rep_ms: float = 40.0            # timing per candidate in the search
    final_rep_ms: float = 200.0     # timing of each of the top few at the end
    final_top: int = 3
    compile_setup: Callable[[Any], Any] = compile_worker_setup
    bench_setup: Callable[[Any], Any] = bench_worker_setup
    progress: bool | None = None    # None: when stderr is a terminal


@dataclasses.dataclass
class TuneResult:
    config: Config
    time_ms: float
    search: SearchResult
    failures: dict[str, int]
    seconds: float


@dataclasses.dataclass
class _Candidate:
    config: Config
    plan: Any = None
    time_ms: float | None = None
    status: str = "pending"  # pending | ok | plan | compile | error | timeout | crash | wrong | budget


def tune(bound: Any, *, effort: str, budget_seconds: float, seeds: list[Config] | None = None,
         only_seeds: bool = False, options: TuneOptions | None = None, seed: int | None = None) -> TuneResult:
    """Tune one bound kernel; raise AutotuneError when no candidate works.

    `seeds` are tried first (the user's `configs=`); with `only_seeds` nothing else is tried.
    """
    options = options or TuneOptions()
    started = time.monotonic()
    working = _bind_on_copies(bound)
    first_plan = working.plan(Config())
    space = ConfigSpace.from_plan(first_plan)
    del first_plan
    for config in seeds or []:
        space.validate(config)
    starts = list(seeds or []) if only_seeds else [heuristic_config(space)] + list(seeds or [])
    runner = CandidateRunner(working, options, name=bound.kernel.fn.__name__)
    try:
        runner.start()
        result = search(space, runner.evaluate, effort="none" if only_seeds else effort, seeds=starts,
                        budget_seconds=budget_seconds,
                        seed=settings.get("autotune_seed") if seed is None else seed)
        best, best_ms = runner.final_timing(result, options.final_top, options.final_rep_ms)
    finally:
        runner.close()
    failures = runner.failure_counts()
    if best is None:
        reasons = ", ".join(f"{count} {kind}" for kind, count in sorted(failures.items())) or "none were tried"
        raise exc.AutotuneError(f"every autotuning candidate of {bound.kernel.fn.__name__} failed ({reasons})",
                                hint="run with TESSERA_LOG=autotune to see each failure, or pass config= to skip tuning")
    return TuneResult(best, best_ms, result, failures, time.monotonic() - started)


def decorator_line(config: Config) -> str:
    """The line that hard-codes a tuned config, printed after tuning."""
    body = ", ".join(f"{key}={value!r}" for key, value in config.items())
    return f"@tessera.kernel(config=tessera.Config({body}))"


class CandidateRunner:
    """Turns configs into times through the compile pool and the bench worker."""

    def __init__(self, bound: Any, options: TuneOptions, name: str) -> None:
        self.bound = bound
        self.options = options
        self.name = name
        self.candidates: dict[int, _Candidate] = {}
        self._ids = itertools.count()
        self.progress = progress.Progress(name, total=0, enabled=options.progress)
        self.compile_pool: WorkerGroup | None = None
        self.bench: WorkerGroup | None = None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the workers now, so they import torch and Triton while the parent plans."""
        mode = self.bound.mode
        self.compile_pool = WorkerGroup("compile", self.options.compile_workers, setup=self.options.compile_setup,
                                        payload=mode, task_timeout=self.options.compile_timeout_s, log=progress.log)
        reference = flatten_tensors(self.bound.reference())
        setup = BenchSetup(mode, self.bound.tuning_storages, reference)
        self.bench = WorkerGroup("bench", 1, setup=self.options.bench_setup, payload=setup,
                                 task_timeout=self.options.run_timeout_s, log=progress.log)
        self.bench.start()
        self.compile_pool.start()

    def close(self) -> None:
        self.progress.close()
        for group in (self.compile_pool, self.bench):
            if group is not None:
                group.close()

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, configs: list[Config], deadline: float) -> list[float | None]:
        """Times (ms) of `configs`, None for each that failed or missed the deadline."""
        ids = []
        for config in configs:
            ids.append(self._plan_and_compile(config))
            self._pump()
        while any(self.candidates[i].status == "pending" for i in ids):
            if time.monotonic() >= deadline:
                # the budget is spent: stop waiting for compiles and runs still in flight
                self._cancel_queued()
                for number in ids:
                    if self.candidates[number].status == "pending":
                        self._fail(number, "budget", "the time budget ran out before it was timed")
                break
            wait_for(self.compile_pool, self.bench, until=deadline if time.monotonic() < deadline else None)
            self._pump()
        return [self.candidates[i].time_ms for i in ids]

    def final_timing(self, result: SearchResult, top: int, rep_ms: float) -> tuple[Config | None, float]:
        """Time the fastest few again, longer; the fastest of those wins (timing noise is real)."""
        leaders = result.ranked()[:top]
        if len(leaders) <= 1:
            return (leaders[0].config, leaders[0].time_ms) if leaders else (None, math.inf)
        assert self.bench is not None
        times: dict[int, float] = {}
        for number, trial in enumerate(leaders):
            plan = self.bound.plan(trial.config)
            self.bench.submit(("final", number), bench_task(plan, check=False, rep_ms=rep_ms))
        for outcome in self.bench.wait_all():
            if isinstance(outcome.task_id, tuple) and outcome.ok and outcome.value.time_ms is not None:
                times[outcome.task_id[1]] = outcome.value.time_ms
        if not times:
            return leaders[0].config, leaders[0].time_ms
        winner = min(times, key=times.__getitem__)
        progress.log("final timing: " + ", ".join(f"{leaders[n].config}: {t:.4g} ms" for n, t in sorted(times.items())))
        return leaders[winner].config, times[winner]

    def failure_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for candidate in self.candidates.values():
            if candidate.status not in ("ok", "pending"):
                counts[candidate.status] = counts.get(candidate.status, 0) + 1
        return counts

    # -- internals ----------------------------------------------------------------------------

    def _plan_and_compile(self, config: Config) -> int:
        number = next(self._ids)
        candidate = self.candidates[number] = _Candidate(config)
        self.progress.total += 1
        try:
            candidate.plan = self.bound.plan(config)
        except Exception as error:  # noqa: BLE001 - a config the kernel cannot take is just skipped
            self._fail(number, "plan", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            return number
        assert self.compile_pool is not None
        self.compile_pool.submit(number, compile_task(candidate.plan))
        return number

    def _pump(self) -> None:
        """Move finished compiles on to the bench worker and record finished benchmarks."""
        assert self.compile_pool is not None and self.bench is not None
        for outcome in self.compile_pool.collect():
            candidate = self.candidates[outcome.task_id]
            if outcome.ok:
                progress.log(f"candidate {outcome.task_id} compiled in {outcome.value:.2f} s: {candidate.config}")
                self.bench.submit(outcome.task_id, bench_task(candidate.plan, check=True, rep_ms=self.options.rep_ms))
            else:
                self._fail(outcome.task_id, "compile" if outcome.kind == "error" else outcome.kind, outcome.message)
        for outcome in self.bench.collect():
            if isinstance(outcome.task_id, int):
                self._finish(outcome)

    def _finish(self, outcome: Outcome) -> None:
        candidate = self.candidates[outcome.task_id]
        candidate.plan = None  # frees its output buffers
        if not outcome.ok:
            self._fail(outcome.task_id, "error" if outcome.kind == "error" else outcome.kind, outcome.message)
            return
        result: BenchResult = outcome.value
        if result.time_ms is None:
            self._fail(outcome.task_id, "wrong", f"accuracy gate: {result.detail}")
            return
        candidate.time_ms, candidate.status = result.time_ms, "ok"
        progress.log(f"candidate {outcome.task_id}: {result.time_ms:.4g} ms {candidate.config}")
        self._report()

    def _fail(self, number: int, kind: str, message: str) -> None:
        candidate = self.candidates[number]
        candidate.status, candidate.time_ms, candidate.plan = kind, None, None
        progress.log(f"candidate {number} skipped ({kind}): {candidate.config}: {message}")
        self._report()

    def _cancel_queued(self) -> None:
        assert self.compile_pool is not None and self.bench is not None
        for number in self.compile_pool.cancel_queued() + self.bench.cancel_queued():
            if isinstance(number, int):
                self._fail(number, "budget", "the time budget ran out before it was timed")

    def _report(self) -> None:
        done = [c for c in self.candidates.values() if c.status != "pending"]
        times = [c.time_ms for c in done if c.time_ms is not None]
        self.progress.update(len(done), sum(c.time_ms is None for c in done), min(times) if times else None)


# -- tuning copies of the arguments ------------------------------------------------------------

def _bind_on_copies(bound: Any) -> Any:
    """Bind the kernel to copies of the call's tensors (one copy per storage, so views still alias).

    The copy's `tuning_storages` lists (working storage, pristine copy) pairs for the bench worker.
    """
    storages: dict[tuple[str, int], tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            key = (str(value.device), storage.data_ptr())
            if key not in storages:
                storages[key] = (storage.clone(), storage.clone())
            view = torch.empty(0, dtype=value.dtype, device=value.device)
            return view.set_(storages[key][0], value.storage_offset(), value.size(), value.stride())
        if isinstance(value, (list, tuple)):
            return type(value)(copy(v) for v in value)
        return value

    with torch.no_grad():
        args = tuple(copy(a) for a in bound.args)
        kwargs = {k: copy(v) for k, v in bound.kwargs.items()}
    working = bound.kernel.bind(*args, **kwargs)
    working.tuning_storages = [(_as_bytes(w), _as_bytes(p)) for w, p in storages.values()]
    return working


def _as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over a whole storage (what the worker copies to undo in-place writes)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (storage.nbytes(),), (1,))


__all__ = ["CandidateRunner", "TuneOptions", "TuneResult", "decorator_line", "tune"]
