"""One tuning run: plan candidates, compile them in parallel, check and time them in a worker.

    heuristic seed ── search ──> configs ──> bound.plan(config)        (parent: trace + codegen)
                                   │             └─> compile pool      (N processes: backend compiles)
                                   │                     └─> bench worker (1 process: gate + timing)
                                   └── times <───────────────────────────────┘
    then the fastest few and the heuristic Config are timed again, side by side and longer; the
    fastest wins only if it beat the heuristic there by more than the noise margin (1%, or the
    spread between two rounds of one contestant; ties and noise go to the heuristic): tuning never returns a Config measured slower than what the call would
    run untuned. The heuristic is always timed: the budget never cancels it.

What a run waits for is start-up, so the order is chosen to overlap it: the worker groups are
leased first (warm ones from an earlier run in this process, else they start in the background),
then the parent traces the kernel, plans the first batch (for "quick": the seed and its
neighbours) and hands each candidate to the compile pool as soon as it is planned, then
computes the accuracy reference while the workers compile (eager mode, or the heuristic Config
compiled when eager would take too long), then sends it to the bench worker.
The time budget counts from there: waiting for workers to start is not charged to it.
`TESSERA_LOG=autotune` prints when each phase ends (and a summary line per run).

The kernel is tuned on copies of its arguments (aliasing kept), so timing runs of an in-place
kernel never touch the user's tensors, and the eager reference is computed once, in the parent
(both in reference.py). Host code that writes into its arguments (`x.add_(1)` before the tile
loop, `out.mul_(3)` after it) is run once on the copies first (host_writes.py), so the launches
replayed start from the state the call's launches start from.
Every failure is a failed candidate with a reason in the log: planning (a ConfigError), compile
error, exception, timeout, crash of a worker, wrong result.
The accuracy reference is the kernel's final result; a plan whose result host code finishes
after its launches is checked in this process, by running that host code on what the worker's
launches wrote (host_finish.py), instead of inside the worker.

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

from tessera import backends, exc, settings
from tessera.autotune import progress
from tessera.autotune.bench_worker import (BenchResult, BenchSession, BenchWorkerSpec, accuracy_error, bench_task,
                                           bench_worker_setup)
from tessera.autotune.compile_pool import CompileWorkerSpec, compile_task, compile_worker_setup
from tessera.autotune.host_finish import Finished, finish_on_host, finished_on_host
from tessera.autotune.host_writes import record_host_writes
from tessera.autotune.search import SearchResult, Trial, search
from tessera.autotune.pool import leased_group, release_group
from tessera.autotune.reference import baseline_tolerance, bind_on_copies, reference_config, tuning_reference
from tessera.autotune.workers import Outcome, WorkerGroup, wait_for
from tessera.config import Config
from tessera.runtime.tuning import BACKEND, config_space_for

PRUNE_FACTOR = 3.0
"""A candidate whose first timed run is this many times slower than the fastest so far is not
timed further (bench_worker.py: `cutoff_ms`); the final round times the leaders in full."""

STRAGGLER_FACTOR = 2.0
"""A batch stops waiting for its last few candidates (at most half of it, none of them the
heuristic, none compiled yet) once this many median compile times of the batch have passed since
it was planned: they keep compiling and are timed later (`collect_late`), while the search goes
on. On the H100 one 256 x 128 grouped-GEMM candidate took 7.2 s to compile against a median of
2.8 s, and the quick search's second ring waited for it."""

BASELINE_MARGIN = 0.01
"""A tuned Config must beat the heuristic one by more than this fraction of its time in the final
round to be chosen (timing noise between two runs of one Config is about 0.5% on an H100)."""


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
    start_method: str = "auto"      # fork while CUDA is untouched here, else "forkserver"; or force one (forking.py)
    warm_pool: bool = True          # keep the workers for the next kernel tuned in this process


@dataclasses.dataclass
class TuneResult:
    config: Config
    time_ms: float
    search: SearchResult
    failures: dict[str, int]
    seconds: float
    phases: dict[str, float | str] = dataclasses.field(default_factory=dict)  # see Timeline
    default_ms: float | None = None  # the heuristic Config's time in the final round (None: not a contestant)


@dataclasses.dataclass
class _Candidate:
    config: Config
    plan: Any = None
    time_ms: float | None = None
    host_finished: bool = False  # host code finishes its results: checked here (host_finish.py)
    compile_s: float | None = None  # seconds its compile took in the pool (None: not compiled yet)
    status: str = "pending"  # pending | ok | plan | compile | error | timeout | crash | wrong | budget


class Timeline:
    """When each phase of a run ended (seconds since the run began), logged as it happens.

    Events: workers_requested, traced, first_batch_planned, reference_done, compile_worker_ready,
    bench_worker_ready, compile_worker_warm / bench_worker_warm (its warm-up done), first_compiled,
    first_timed, search_done, final_done; plus durations (`*_s`: planning, reference; and
    `*_pool_head_start_s`: how long before the run its group was prestarted, see prewarm.py),
    `compile_started_by` / `bench_started_by`: how its workers were started ('fork',
    'forkserver', 'spawn', or several joined by '+'), and `compile_workers` / `bench_workers`:
    'warm' when the run found one ready (a warm pool), else 'starting'.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.begun = time.monotonic()
        self.phases: dict[str, float | str] = {}

    def mark(self, event: str, at: float | None = None, detail: str = "") -> None:
        """Record `event` the first time it happens."""
        if event in self.phases:
            return
        self.phases[event] = round((time.monotonic() if at is None else at) - self.begun, 4)
        progress.log(f"{self.name}: {event} at {self.phases[event]:.2f} s" + (f" ({detail})" if detail else ""))

    def note(self, key: str, value: str) -> None:
        """Record a fact that is not a time (e.g. `compile_started_by`: 'fork' or 'forkserver')."""
        self.phases[key] = value

    def add(self, key: str, value: float) -> None:
        self.phases[key] = round(self.phases.get(key, 0.0) + value, 4)

    def summary(self) -> str:
        return ", ".join(f"{key} {value:.2f}" if isinstance(value, float) else f"{key} {value}"
                         for key, value in self.phases.items())


def tune(bound: Any, *, effort: str, budget_seconds: float, seeds: list[Config] | None = None,
         only_seeds: bool = False, options: TuneOptions | None = None, seed: int | None = None) -> TuneResult:
    """Tune one bound kernel; raise AutotuneError when no candidate works.

    `seeds` are tried first (the user's `configs=`); with `only_seeds` nothing else is tried.
    """
    options = options or TuneOptions()
    name = bound.kernel.fn.__name__
    runner = CandidateRunner(bound, options, name=name)
    try:
        runner.start()  # first: the workers start up while this thread traces and plans
        working = bind_on_copies(bound)
        record_host_writes(working)  # host code writing into its arguments: replayed as one call does
        backend = bound.kernel.settings.backend
        space = config_space_for(working.plan(Config()), backend)
        for config in seeds or []:
            space.validate(config)
        heuristic = backends.get(backend).heuristic_config(space)
        starts = list(seeds or []) if only_seeds else [heuristic] + list(seeds or [])
        # the heuristic is what the call would run untuned: the tuned Config must beat it (not so
        # with only_seeds: the user's configs= are the only choices)
        baseline = None if only_seeds else space.normalize(heuristic)
        runner.attach(working, reference_config(space, heuristic), heuristic, baseline=baseline)
        runner.timeline.mark("traced")
        deadline = runner.clock() + budget_seconds
        result = search(space, runner.evaluate, effort="none" if only_seeds else effort, seeds=starts,
                        budget_seconds=budget_seconds, seed=settings.get("autotune_seed") if seed is None else seed,
                        clock=runner.clock)
        runner.collect_late(result, deadline)
        runner.timeline.mark("search_done", detail=f"{len(result.trials)} candidates")
        best, best_ms, default_ms = runner.final_timing(result, options.final_top, options.final_rep_ms,
                                                        baseline=baseline)
        runner.timeline.mark("final_done")
    finally:
        runner.close()
    failures = runner.failure_counts()
    seconds = time.monotonic() - runner.timeline.begun
    progress.log(f"{name}: tuned in {seconds:.2f} s; phases (s): {runner.timeline.summary()}")
    if best is None:
        reasons = ", ".join(f"{count} {kind}" for kind, count in sorted(failures.items())) or "none were tried"
        raise exc.AutotuneError(f"every autotuning candidate of {name} failed ({reasons})",
                                hint="run with TESSERA_LOG=autotune to see each failure, or pass config= to skip tuning")
    overrides = bound.kernel.settings.autotune_config_overrides
    return TuneResult(best.merged(**overrides) if overrides else best, best_ms, result, failures, seconds,
                      dict(runner.timeline.phases), default_ms)


def noise_margin(samples: dict[Any, list[float]]) -> float:
    """How much faster than the heuristic a Config must be in the final round to replace it: the
    larger of BASELINE_MARGIN and the widest spread between two rounds of one contestant (its
    max minus min over their mean). On the H100 one attention Config measured 2.157 and 2.104 ms
    in two tuning runs, and a 3.7% lead in one final round was a 9% loss in a later timing.

    >>> round(noise_margin({0: [2.0, 2.0], 1: [1.0, 1.05]}), 4)
    0.0488
    """
    spreads = [(max(values) - min(values)) / (sum(values) / len(values)) for values in samples.values()
               if len(values) > 1 and sum(values) > 0]
    return max([BASELINE_MARGIN] + spreads)


def decorator_line(config: Config) -> str:
    """The line that hard-codes a tuned config, printed after tuning."""
    body = ", ".join(f"{key}={value!r}" for key, value in config.items())
    return f"@tessera.kernel(config=tessera.Config({body}))"


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One worker group a tuning run leases (what `prewarm` starts ahead of it, too)."""

    name: str
    size: int
    setup: Callable[[Any], Any]
    payload: Any
    timeout: float


def worker_groups(options: TuneOptions, mode: str, device: str, backend: str = BACKEND) -> list[GroupSpec]:
    """The compile pool and the bench worker of a run in `mode` on `device` (e.g. 'cuda:0'), whose
    workers compile and run through `backend` (a name `tessera.backends.get` knows)."""
    return [GroupSpec("compile", options.compile_workers, options.compile_setup, CompileWorkerSpec(mode, backend),
                      options.compile_timeout_s),
            GroupSpec("bench", 1, options.bench_setup, BenchWorkerSpec(mode, device, backend=backend),
                      options.run_timeout_s)]


class CandidateRunner:
    """Turns configs into times through the compile pool and the bench worker."""

    def __init__(self, bound: Any, options: TuneOptions, name: str) -> None:
        self.bound = bound  # until `attach`: the user's call (its mode and device start the workers)
        self.options = options
        self.name = name
        self.candidates: dict[int, _Candidate] = {}
        self._ids = itertools.count()
        self.progress = progress.Progress(name, total=0, enabled=options.progress)
        self.timeline = Timeline(name)
        self.compile_pool: WorkerGroup | None = None
        self.bench: WorkerGroup | None = None
        self.reference_config: Config | None = None
        self.fallback_config: Config | None = None
        self.baseline: Config | None = None  # the heuristic Config as searched: always timed, never cancelled
        self._session_sent = False
        self.reference: list[torch.Tensor] | None = None  # the accuracy reference (final results)
        self._held: list[int] = []  # compiled before the bench session was sent
        self._late: list[int] = []  # candidates a batch stopped waiting for (`_stragglers`)
        self.stalled = 0.0  # seconds spent waiting for workers to start: not charged to the budget
        # a gate whose result lies in the tuning copies (host writes after the launch, host_writes.py):
        # no other run may overwrite them before the parent has finished it (`_submit_bench`)
        self._open_gate: Any = None
        self._deferred: list[tuple[Any, Any]] = []

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Lease the worker groups: warm ones answer at once, cold ones start in the background."""
        mode = self.bound.mode
        device = str(self.bound.device) if mode == "compiled" else "cpu"
        compile_spec, bench_spec = worker_groups(self.options, mode, device, self.bound.kernel.settings.backend)
        self.compile_pool = self._lease(compile_spec)  # one at a time: `close` releases what was leased
        self.bench = self._lease(bench_spec)
        self.timeline.mark("workers_requested")
        for group in (self.compile_pool, self.bench):
            if group.head_start is not None:
                self.timeline.add(f"{group.name}_pool_head_start_s", group.head_start)
            # whether the run found a worker of the group ready (leased warm) or had to wait for one
            self.timeline.note(f"{group.name}_workers", "warm" if group.has_ready_worker() else "starting")
            if group.has_ready_worker():
                self.timeline.mark(f"{group.name}_worker_ready", detail=f"warm, started by {group.start_methods()}")
                self.timeline.note(f"{group.name}_started_by", group.start_methods())

    def _lease(self, spec: GroupSpec) -> WorkerGroup:
        options = dict(setup=spec.setup, payload=spec.payload, task_timeout=spec.timeout, log=progress.log,
                       start_method=self.options.start_method)
        if self.options.warm_pool:
            return leased_group(spec.name, spec.size, **options)
        group = WorkerGroup(spec.name, spec.size, **options)
        group.start()
        return group

    def attach(self, working: Any, reference_config: Config | None, fallback: Config | None = None,
               baseline: Config | None = None) -> None:
        """The bound kernel on tuning copies, the Config its eager reference runs with, the
        Config whose compiled result is the reference when eager would take too long, and the
        Config the budget never cancels (the heuristic: the final round compares with it)."""
        self.fallback_config = fallback
        self.baseline = baseline
        self.bound = working
        self.reference_config = reference_config

    def close(self) -> None:
        self.progress.close()
        for group in (self.compile_pool, self.bench):
            if group is not None:
                release_group(group)

    def clock(self) -> float:
        """The budget's clock: wall time less the time spent waiting for workers to start."""
        return time.monotonic() - self.stalled

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, configs: list[Config], deadline: float) -> list[float | None]:
        """Times (ms) of `configs`, None for each that failed or missed the deadline (in `clock` time)."""
        ids = []
        planning = time.monotonic()
        for config in configs:
            ids.append(self._plan_and_compile(config))
            self._pump()
        planned = time.monotonic()
        self.timeline.add("planning_s", planned - planning)
        self.timeline.mark("first_batch_planned", detail=f"{len(configs)} candidates")
        self._send_session()
        while any(self.candidates[i].status == "pending" for i in ids):
            stragglers, due = self._stragglers(ids, planned)
            if stragglers and time.monotonic() >= due:
                self._late += stragglers
                self.timeline.add("stragglers", len(stragglers))
                progress.log(f"not waiting for candidates {stragglers} (still compiling): timed when they are done")
                break
            overdue = self.clock() >= deadline
            if overdue:
                # the budget is spent: stop waiting for compiles and runs still in flight, but the
                # baseline's (its compile and run timeouts bound the wait)
                self._cancel_queued()
                for number in ids:
                    if self.candidates[number].status == "pending" and not self._is_baseline(number):
                        self._fail(number, "budget", "the time budget ran out before it was timed")
                if not any(self.candidates[i].status == "pending" for i in ids):
                    break
            starting = not self._workers_ready()
            waited = time.monotonic()
            until = None if starting or overdue else deadline + self.stalled
            if stragglers and not starting:
                until = due if until is None else min(until, due)
            wait_for(self.compile_pool, self.bench, until=until)
            if starting:
                self.stalled += time.monotonic() - waited
            self._pump()
        return [self.candidates[i].time_ms for i in ids]

    def _stragglers(self, ids: list[int], planned: float) -> tuple[list[int], float]:
        """The candidates of a batch it need not wait for, and from when (see STRAGGLER_FACTOR);
        ([], 0) when it must wait for every pending one."""
        pending = [n for n in ids if self.candidates[n].status == "pending"]
        if not pending or 2 * len(pending) > len(ids) or any(
                self._is_baseline(n) or self.candidates[n].compile_s is not None for n in pending):
            return [], 0.0
        compiled = sorted(c.compile_s for n in ids if (c := self.candidates[n]).compile_s is not None)
        if not compiled:
            return [], 0.0
        return pending, planned + STRAGGLER_FACTOR * compiled[len(compiled) // 2]

    def collect_late(self, result: SearchResult, deadline: float) -> None:
        """Wait, until `deadline` (the budget's, in `clock` time), for the candidates batches left
        compiling (`_stragglers`), and put their times into `result`'s trials."""
        late = self._late
        while any(self.candidates[n].status == "pending" for n in late):
            if self.clock() >= deadline:
                self._cancel_queued()
                for number in late:
                    if self.candidates[number].status == "pending":
                        self._fail(number, "budget", "the time budget ran out before it was timed")
                break
            wait_for(self.compile_pool, self.bench, until=deadline + self.stalled)
            self._pump()
        times = {self.candidates[n].config: self.candidates[n].time_ms for n in late}
        result.trials[:] = [Trial(t.config, times[t.config]) if t.time_ms is None and t.config in times else t
                            for t in result.trials]

    def final_timing(self, result: SearchResult, top: int, rep_ms: float,
                     baseline: Config | None = None) -> tuple[Config | None, float, float | None]:
        """Time the fastest few again, longer, together with `baseline` (the heuristic Config);
        the fastest wins, but only if it beat the baseline in this same timing by more than
        `noise_margin` (ties and noise go to it). Returns the winner, its time, and the
        baseline's time (None when it was no contestant).

        Search times are short and taken minutes apart, so a candidate can lead by noise or by
        drift (clocks, temperature): the H100 once tuned attention to a Config slower than its
        heuristic one. Here every contestant is timed twice with the same rep_ms, in two rounds,
        the second in reverse order, and ranked by the mean of its two medians, so drift during
        the phase is shared evenly. A baseline that failed the search (wrong, crashed) is not a
        contestant.
        """
        ranked = result.ranked()
        leaders = ranked[:top]
        base = next((n for n, t in enumerate(leaders) if t.config == baseline), None)
        if baseline is not None and base is None:
            trial = next((t for t in ranked if t.config == baseline), None)
            if trial is not None:
                leaders.append(trial)
                base = len(leaders) - 1
        if len(leaders) <= 1:
            alone = leaders[0].time_ms if base is not None else None
            return (leaders[0].config, leaders[0].time_ms, alone) if leaders else (None, math.inf, None)
        assert self.bench is not None
        order = list(range(len(leaders)))
        for round_, numbers in enumerate((order, order[::-1])):
            for number in numbers:
                plan = self.bound.plan(leaders[number].config)
                self.bench.submit(("final", round_, number), bench_task(plan, check=False, rep_ms=rep_ms))
        samples: dict[int, list[float]] = {}
        for outcome in self.bench.wait_all():
            task_id = outcome.task_id
            if isinstance(task_id, tuple) and task_id[0] == "final" and outcome.ok and outcome.value.time_ms is not None:
                samples.setdefault(task_id[2], []).append(outcome.value.time_ms)
        times = {number: sum(values) / len(values) for number, values in samples.items()}
        if not times:
            return leaders[0].config, leaders[0].time_ms, None
        winner = min(times, key=lambda number: (times[number], number != base))
        margin = noise_margin(samples)
        if base is not None and base in times and not times[winner] < times[base] * (1 - margin):
            winner = base
        progress.log(f"final timing (margin {margin:.1%}): "
                     + ", ".join(f"{leaders[n].config}{' (heuristic)' if n == base else ''}: {t:.4g} ms"
                                 for n, t in sorted(times.items())))
        return leaders[winner].config, times[winner], times.get(base) if base is not None else None

    def failure_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for candidate in self.candidates.values():
            if candidate.status not in ("ok", "pending"):
                counts[candidate.status] = counts.get(candidate.status, 0) + 1
        return counts

    # -- internals ----------------------------------------------------------------------------

    def _workers_ready(self) -> bool:
        assert self.compile_pool is not None and self.bench is not None
        return self.compile_pool.has_ready_worker() and self.bench.has_ready_worker()

    def _send_session(self) -> None:
        """Compute the eager reference (the compile pool is busy meanwhile) and give it to the bench worker."""
        if self._session_sent:
            return
        assert self.bench is not None
        begun = time.monotonic()
        reference, detail = tuning_reference(self.bound, self.reference_config, self.fallback_config)
        self.reference = reference
        self.bench.set_session(BenchSession(self.bound.tuning_storages, reference, self.tolerance,
                                            check=self.bound.kernel.settings.autotune_accuracy_check))
        self._session_sent = True
        for number in self._held:
            self._submit_check(number)
        self._held.clear()
        self.timeline.add("reference_s", time.monotonic() - begun)
        self.timeline.mark("reference_done", detail=detail)

    @property
    def tolerance(self) -> tuple[float, float] | None:
        return baseline_tolerance(self.bound.kernel.settings)

    def _plan_and_compile(self, config: Config) -> int:
        number = next(self._ids)
        candidate = self.candidates[number] = _Candidate(config)
        self.progress.total += 1
        overrides = self.bound.kernel.settings.autotune_config_overrides
        try:
            candidate.plan = self.bound.plan(config.merged(**overrides) if overrides else config)
            candidate.host_finished = finished_on_host(candidate.plan) or getattr(self.bound, "host_writes_after_launch", False)
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
                candidate.compile_s = outcome.value
                self.timeline.mark("first_compiled")
                self.timeline.add("compile_sum_s", outcome.value)
                progress.log(f"candidate {outcome.task_id} compiled in {outcome.value:.2f} s: {candidate.config}")
                if self._session_sent:
                    self._submit_check(outcome.task_id)
                else:
                    self._held.append(outcome.task_id)
            else:
                self._fail(outcome.task_id, "compile" if outcome.kind == "error" else outcome.kind, outcome.message)
        for outcome in self.bench.collect():
            if isinstance(outcome.task_id, int):
                self._finish(outcome)
            elif isinstance(outcome.task_id, tuple) and outcome.task_id[0] == "gate":
                self._gate_on_host(outcome)
        for group in (self.compile_pool, self.bench):
            if group.first_ready_at is not None:
                self.timeline.mark(f"{group.name}_worker_ready", at=group.first_ready_at,
                                   detail=f"started by {group.start_methods()}")
                self.timeline.note(f"{group.name}_started_by", group.start_methods())
            if group.first_warm_at is not None:
                self.timeline.mark(f"{group.name}_worker_warm", at=group.first_warm_at)

    def _submit_check(self, number: int) -> None:
        """Send a compiled candidate to the bench worker: checked and timed there, or, when host
        code finishes its results, run once there and checked here first (`_gate_on_host`)."""
        assert self.bench is not None
        candidate = self.candidates[number]
        if candidate.status != "pending":
            return
        if not candidate.host_finished:
            self._submit_bench(number, bench_task(candidate.plan, check=True, rep_ms=self.options.rep_ms,
                                                  cutoff_ms=self._cutoff_ms()))
            return
        # (no early check when the host code writes into the tuning copies: a gate's result may
        # lie there now, and the host code would write it again)
        if not getattr(self.bound, "host_writes_after_launch", False):
            self._poison_answered_outputs(candidate)
        self._submit_bench(("gate", number), bench_task(candidate.plan, check=True, rep_ms=0.0, run_only=True))

    def _poison_answered_outputs(self, candidate: _Candidate) -> None:
        """If the buffers already hold the answer (memory reused from an earlier candidate), poison
        those the candidate's launches store into, so launches that write nothing cannot pass."""
        try:
            error, finished = self._host_result_error(candidate)
            if error <= 1.0:
                with torch.no_grad():
                    for tensor in finished.outputs_outside([w for w, _ in self.bound.tuning_storages]):
                        tensor.fill_(math.nan if tensor.is_floating_point() else -1)
        except Exception:  # noqa: BLE001 - the check after the run reports what is wrong
            pass

    def _host_result_error(self, candidate: _Candidate) -> tuple[float, Finished]:
        """The accuracy error (tolerance units) of the candidate's host code run on what its
        launches wrote (host_finish.py), and that run."""
        assert self.reference is not None
        finished = finish_on_host(self.bound, candidate.plan)
        if not self.bound.kernel.settings.autotune_accuracy_check:
            return 0.0, finished
        return accuracy_error(finished.results, self.reference, self.tolerance)[0], finished

    def _submit_bench(self, task_id: Any, task: Any) -> None:
        """Send a task to the bench worker, or hold it while a gate's result lies in the tuning
        copies: every run restores and rewrites them, and the parent has yet to finish the gate's
        result there (its host code reads what the gate's launches wrote)."""
        if self._open_gate is not None:
            self._deferred.append((task_id, task))
            return
        assert self.bench is not None
        self.bench.submit(task_id, task)
        if isinstance(task_id, tuple) and task_id[0] == "gate" and getattr(self.bound, "host_writes_after_launch", False):
            self._open_gate = task_id

    def _close_gate(self, task_id: Any) -> None:
        if self._open_gate != task_id:
            return
        self._open_gate = None
        held, self._deferred = self._deferred, []
        for index, (held_id, task) in enumerate(held):
            self._submit_bench(held_id, task)
            if self._open_gate is not None:  # a held gate opened: the rest wait for it
                self._deferred = held[index + 1:] + self._deferred
                return

    def _gate_on_host(self, outcome: Outcome) -> None:
        """The worker ran a host-finished candidate once: finish and check it here, then time it."""
        try:
            self._check_gate(outcome)
        finally:
            self._close_gate(outcome.task_id)

    def _check_gate(self, outcome: Outcome) -> None:
        number = outcome.task_id[1]
        candidate = self.candidates[number]
        if candidate.status != "pending":
            return
        if not outcome.ok:
            self._fail(number, "error" if outcome.kind == "error" else outcome.kind, outcome.message)
            return
        try:
            error = self._host_result_error(candidate)[0]
        except Exception as failure:  # noqa: BLE001 - a candidate whose result cannot be finished is wrong
            self._fail(number, "wrong", f"finishing its result on the host raised {type(failure).__name__}: {failure}")
            return
        if not error <= 1.0:
            self._fail(number, "wrong", f"accuracy gate: the host-finished result is off by {error:.3g} tolerances")
            return
        assert self.bench is not None
        self._submit_bench(number, bench_task(candidate.plan, check=False, rep_ms=self.options.rep_ms,
                                              cutoff_ms=self._cutoff_ms()))

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
        self.timeline.mark("first_timed")
        progress.log(f"candidate {outcome.task_id}: {result.time_ms:.4g} ms {candidate.config}")
        self._report()

    def _fail(self, number: int, kind: str, message: str) -> None:
        candidate = self.candidates[number]
        candidate.status, candidate.time_ms, candidate.plan = kind, None, None
        progress.log(f"candidate {number} skipped ({kind}): {candidate.config}: {message}")
        self._report()

    def _cutoff_ms(self) -> float | None:
        """PRUNE_FACTOR times the fastest time so far (None before any): a candidate slower than
        that on its first timed run cannot win, so it is not timed in full."""
        times = [c.time_ms for c in self.candidates.values() if c.status == "ok" and c.time_ms is not None]
        return PRUNE_FACTOR * min(times) if times else None

    def _is_baseline(self, task_id: Any) -> bool:
        """Whether a task (a candidate's number, or ("gate", number)) is the baseline's."""
        number = task_id[1] if isinstance(task_id, tuple) and task_id[0] == "gate" else task_id
        return (self.baseline is not None and isinstance(number, int) and number in self.candidates
                and self.candidates[number].config == self.baseline)

    def _cancel_queued(self) -> None:
        assert self.compile_pool is not None and self.bench is not None
        kept = [(task_id, task) for task_id, task in self._deferred if self._is_baseline(task_id)]
        dropped = [task_id for task_id, _ in self._deferred if not self._is_baseline(task_id)]
        self._deferred = kept
        for number in (self.compile_pool.cancel_queued(keep=self._is_baseline)
                       + self.bench.cancel_queued(keep=self._is_baseline) + dropped):
            if isinstance(number, tuple) and number[0] == "gate":
                number = number[1]
            if isinstance(number, int) and self.candidates[number].status == "pending":
                self._fail(number, "budget", "the time budget ran out before it was timed")

    def _report(self) -> None:
        done = [c for c in self.candidates.values() if c.status != "pending"]
        times = [c.time_ms for c in done if c.time_ms is not None]
        self.progress.update(len(done), sum(c.time_ms is None for c in done), min(times) if times else None)


__all__ = ["CandidateRunner", "GroupSpec", "TuneOptions", "TuneResult", "decorator_line", "tune", "worker_groups"]
