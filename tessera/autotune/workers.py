"""Worker processes that may hang or die without harming the process that tunes.

Both compiling and benchmarking run candidates in child processes: a candidate that hangs is
killed at its deadline, one that kills its process (a segfault, `os._exit`, a CUDA context
poisoned by an illegal memory access) is reported as a crash and the worker is replaced with
the same setup payload. The parent never blocks on a single worker: it waits on all of them
at once (`waitables()`), then `collect()`s what finished.

A worker is `setup(payload) -> handler`, then `handler(task)` per task (the child's side is
worker_process.py); `setup` is a module-level function (children unpickle it by name). A handler that takes sessions (below) also has
`begin_session(payload)` and `end_session()`. A handler raises `FatalWorkerError` when its
process must not be reused (the worker reports the error, then exits).

Start-up is what a tuning run waits for (a fresh process imports torch and Triton and sets up
CUDA: seconds), so:

- with the default start method "auto", a worker is forked from this process when that is
  safe at that moment (forking.py says when, and what a forked child undoes of its parent): it
  has torch imported already, ready in well under a second instead of a fresh interpreter's
  seconds. A forked child whose CUDA is unusable is replaced by a worker from the fork server,
  and this process forks no more workers. A forked child leaves with `os._exit`.
- otherwise (CUDA initialized here, or start_method="forkserver") children come from a fork
  server that imported torch and Tessera's worker modules once (`PRELOAD`; "spawn" where there
  is none). The backend's compiler (Triton) is imported by each child, in its setup's
  `Backend.prepare_worker`, after it picked the interpreter or not.
- `Process.start()` runs on a background thread (the first one waits for the fork server's
  imports), so the tuning thread traces and plans while workers start.
- children never import the user's `__main__` (spawn would re-run a script's top level in each
  worker: slow, and a script without a main guard would tune recursively).
- a handler may have `warm_up()`: the child runs it on a thread right after setup (before any
  task arrives, when the group started early), e.g. compiling a tiny kernel so the process's
  first real compile does not pay Triton's one-time costs. A task waits for it (at most
  `WARM_UP_WAIT_S`). A warm-up that fails is ignored; a worker that dies or hangs while warming
  up is blamed, not its task: the task is queued again and the group's later workers skip the
  warm-up.
- a group is leased to one run at a time (`begin_lease`, `end_lease`; pool.py keeps one warm
  group per name for the whole process). Per-run state (the bench worker's inputs and
  reference) travels as a *session* (`set_session`), sent to each worker before its first task
  of the run, again to a replacement, and dropped when the lease ends.

>>> group = WorkerGroup("compile", 4, setup=my_setup, payload="compiled", task_timeout=30)  # doctest: +SKIP
>>> group.submit(0, task); outcomes = group.wait_all()                                   # doctest: +SKIP
>>> group.close()                                                                         # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import multiprocessing.connection
import os
import queue
import sys
import threading
import time
from collections import deque
from typing import Any, Callable

from tessera.autotune import forking
from tessera.autotune.worker_process import FatalWorkerError, _worker_main

STARTUP_TIMEOUT = 180.0  # importing torch and triton in a fresh process, on a loaded machine
STARTING_POLL_S = 0.25       # how often a wait looks again while a worker's process is being started
FORK_STARTUP_TIMEOUT = 60.0  # a forked worker not ready by then is presumed stuck on a lock copied
# mid-use from another thread of the parent (e.g. an import): replaced from the fork server
START_METHOD = "auto"
START_METHODS = ("auto", "forkserver", "spawn")
"""'auto': fork this process where safe (see `forking.fork_hazard`), else the fork server; the others force one."""
PRELOAD = ("torch", "tessera.autotune.workers", "tessera.autotune.worker_process", "tessera.autotune.compile_pool",
           "tessera.autotune.bench_worker")
"""What the fork server imports once for every child. Not triton (nor a backend module that might
import it): importing it fixes whether its interpreter runs, and each child decides that from its mode."""
SESSION_ATTEMPTS = 3     # workers a session may kill before the run's tasks fail instead
CLOSE_GRACE = 2.0        # seconds idle workers get to exit on their own before they are killed
WARM_UP_WAIT_S = 15.0    # longest a task waits for its worker's warm-up before it runs anyway
WORKER_ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR", "TRITON_HOME", "TESSERA_CACHE_DIR")
"""Environment variables a warm group must have been started with to be reused: the ones a
program may set after it defined a kernel that change what a worker does. (Not a wider set:
torch and Triton set some themselves, e.g. CUDA_MODULE_LOADING when CUDA starts.)"""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one task ended: 'ok' (value holds the result), 'error', 'timeout' or 'crash'."""

    task_id: Any
    kind: str
    value: Any = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


# -- starting processes ------------------------------------------------------------------------

def _environment() -> dict[str, str]:
    """The environment variables that decide how a worker behaves (its GPU, Triton's caches, ...)."""
    return {key: os.environ[key] for key in WORKER_ENVIRONMENT if key in os.environ}


_starting = threading.local()


def _install_main_filter() -> None:
    """Let our children skip importing `__main__` (see the module docstring); other users of
    multiprocessing in this process are unaffected (the filter acts only while we start one)."""
    from multiprocessing import spawn
    original = spawn.get_preparation_data
    if getattr(original, "tessera_filter", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data = original(name)
        if getattr(_starting, "active", False):
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
        return data

    get_preparation_data.tessera_filter = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = get_preparation_data


def _context(start_method: str) -> Any:
    """The context of workers not forked from this process ('auto' falls back to the fork server)."""
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {', '.join(START_METHODS)}, not {start_method!r}")
    import torch.multiprocessing  # registers the reductions that share tensors between processes
    if start_method in ("auto", "forkserver") and "forkserver" in multiprocessing.get_all_start_methods():
        context = torch.multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))  # no effect once the server runs
        return context
    return torch.multiprocessing.get_context("spawn")


class _Starter:
    """One daemon thread that starts worker processes in order, off the tuning thread."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[_Worker, Any]] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def submit(self, worker: _Worker, child_end: Any) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="tessera-worker-starter", daemon=True)
                self.thread.start()
        self.jobs.put((worker, child_end))

    def _run(self) -> None:
        while True:
            worker, child_end = self.jobs.get()
            worker.launch(child_end)


_starter = _Starter()


def _after_fork_in_child() -> None:
    """Any fork of this process: the starter thread stays the parent's."""
    global _starter
    _starter = _Starter()


class _Worker:
    """One process of a group, with the task it is running and that task's deadline."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group
        parent_end, child_end = group.context.Pipe()
        forking._connections.add(parent_end)
        forking._connections.add(child_end)
        self.connection = parent_end
        warm_up_wait = group.warm_up_wait if group.warm_up else None
        self.args = (child_end, group.setup, group.payload, dict(os.environ), warm_up_wait)
        self.process = group.context.Process(target=_worker_main, daemon=True, name=f"tessera-{group.name}",
                                             args=self.args)
        self.method: str | None = None  # how it was started: 'fork', 'forkserver' or 'spawn'
        self.fork_skipped: str | None = None  # why an 'auto' group's worker was not forked
        self.lock = threading.Lock()
        self.started = False            # set by the starter thread once the process runs
        self.start_error: str | None = None
        self.cancelled = False
        self.ready = False
        self.warming = False            # ready, and its warm-up (if any) has not reported yet
        self.task: tuple[Any, Any, int] | None = None  # (task id, task, lease it belongs to)
        self.session: int | None = None  # id of the session last sent to it
        self.session_confirmed = False
        self.created = time.monotonic()
        self.deadline = self.created + STARTUP_TIMEOUT
        if getattr(forking._fork_here, "active", False) and group.start_method == "auto":
            # fork on the caller's thread, now: CUDA is untouched at this moment, maybe not later
            with self.lock:
                forked = self._try_fork()
            if forked:
                child_end.close()
                return
        _starter.submit(self, child_end)

    def _try_fork(self) -> bool:
        """Fork this worker from this process if that is safe now (`forking.fork_hazard`). Call with the lock."""
        if getattr(self.group.payload, "backend", None) == "pallas" and "jaxlib" in sys.modules:
            # a Pallas worker runs JAX, whose runtime keeps thread pools: a child forked from a
            # process that imported JAX can hang on a lock one of them held (Triton workers never
            # touch JAX, so they still fork)
            self.fork_skipped = "JAX is imported in this process"
            return False
        import torch.multiprocessing
        process = torch.multiprocessing.get_context("fork").Process(
            target=_worker_main, daemon=True, name=f"tessera-{self.group.name}", args=self.args + (True,))
        self.fork_skipped = forking._fork_start(process)
        if self.fork_skipped is not None:
            return False
        self.process, self.method, self.started = process, "fork", True
        self.deadline = min(self.deadline, time.monotonic() + FORK_STARTUP_TIMEOUT)
        return True

    def launch(self, child_end: Any) -> None:
        """Start the process (on the starter thread); a failure closes the pipe, which the parent sees."""
        with self.lock:
            try:
                if self.started:  # forked already, on the thread that made it
                    return
                if not self.cancelled:
                    forked = self.group.start_method == "auto" and self._try_fork()
                    if not forked:
                        _install_main_filter()
                        _starting.active = True
                        try:
                            self.process.start()
                        finally:
                            _starting.active = False
                        self.method = self.process._start_method or "fork"
                    self.started = True
                    if self.cancelled:  # killed while it was starting (see `kill`)
                        self.process.kill()
            except BaseException as error:  # noqa: BLE001 - reported as this worker's crash
                self.start_error = f"{type(error).__name__}: {error}"
            finally:
                child_end.close()  # the child has its own copy; EOF now means the child is gone

    def alive(self) -> bool:
        return self.started and self.process.is_alive()

    def send(self, message: Any) -> None:
        self.connection.send(message)

    def assign(self, task_id: Any, task: Any, lease: int, timeout: float) -> None:
        self.task = (task_id, task, lease)
        self.send(("task", task_id, task))
        if self.ready:
            self.deadline = time.monotonic() + timeout

    def kill(self) -> None:
        self.cancelled = True
        # A start may be waiting for the fork server (seconds, at first): do not wait for it
        # (a program exiting right after it defined a kernel would); `launch` kills the
        # process once it runs.
        if not self.lock.acquire(timeout=0.1):
            self.connection.close()
            return
        started = self.started
        self.lock.release()
        if started:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=10)
        self.connection.close()


class WorkerGroup:
    """A number of worker processes sharing a queue of tasks.

    Tasks past `task_timeout` seconds (counted from when a ready worker got them) are killed and
    reported as 'timeout'; a worker that dies is reported as 'crash' and replaced. Used alone
    (`start`, `submit`, `wait_all`, `close`) or as a warm group leased per run (`pool.leased_group`).
    """

    def __init__(self, name: str, size: int, *, setup: Callable[[Any], Callable[[Any], Any]], payload: Any,
                 task_timeout: float, log: Callable[[str], None] | None = None,
                 start_method: str = START_METHOD, warm_up: bool = True) -> None:
        self.name = name
        self.size = max(1, size)
        self.setup = setup
        self.payload = payload
        self.task_timeout = task_timeout
        self.start_method = start_method
        self.context = _context(start_method)
        self.log = log or (lambda message: None)
        self.queue: deque[tuple[Any, Any]] = deque()
        self.workers: list[_Worker] = []
        self.finished: list[Outcome] = []
        self.restarts = 0
        self.warm_up = warm_up          # workers run their handler's warm_up (off once one dies doing it)
        self.warm_up_wait = WARM_UP_WAIT_S
        self.environ = _environment()   # what its workers were started with (see pool.leased_group)
        self.created = time.monotonic()
        self.prestarted = False         # started by prestart_group, not leased yet
        self.head_start: float | None = None
        self.setup_failure: str | None = None
        self.lease = 0
        self.leased = False
        self.pooled = False
        self.lease_started = time.monotonic()
        self.first_ready_at: float | None = None  # this lease: when a worker first could take a task
        self.first_warm_at: float | None = None   # this lease: when a worker first finished its warm-up
        self._session_ids = itertools.count(1)
        self.session: tuple[int, Any] | None = None
        self.session_failure: str | None = None
        self.session_crashes = 0

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, count: int | None = None) -> None:
        """Start workers now (they import torch and triton while the parent does other work)."""
        while len(self.workers) < min(self.size, count if count is not None else self.size):
            self._add_worker()

    def begin_lease(self, *, size: int, task_timeout: float, log: Callable[[str], None] | None = None) -> None:
        """Hand the group to a new run: drop dead workers and stale results, fill up to `size`."""
        self.lease += 1
        self.leased = True
        self.size = max(1, size)
        self.task_timeout = task_timeout
        self.log = log or self.log
        self.setup_failure = self.session_failure = None
        self.session_crashes = 0
        self.lease_started = time.monotonic()
        for worker in list(self.workers):
            self._poll(worker)  # a worker that died while idle goes now; late results are dropped
        self.finished.clear()
        surplus = len(self.workers) - self.size
        for worker in [w for w in self.workers if w.task is None][:max(0, surplus)]:
            self._retire(worker)
        warm = sum(worker.ready for worker in self.workers)
        self.first_ready_at = self.lease_started if warm else None
        warmed = any(worker.ready and not worker.warming for worker in self.workers)
        self.first_warm_at = self.lease_started if warmed else None
        self.start()
        # a prestarted group's first lease: how long its workers had to start before the run
        self.head_start = self.lease_started - self.created if self.prestarted else None
        self.prestarted = False
        started = "" if self.head_start is None else f", prestarted {self.head_start:.2f} s before"
        self.log(f"{self.name}: {warm} warm worker(s) reused, {len(self.workers) - warm} starting "
                 f"(start method {self.start_method}{'' if not warm else '; started by ' + self.start_methods()}"
                 f"{started})")

    def end_lease(self) -> list[Any]:
        """The run is over: drop queued tasks (returned), forget running ones, end the session.

        A worker still busy finishes its task (its result is ignored) and then ends the session.
        """
        dropped = self.cancel_queued()
        self.lease += 1  # results of tasks still running belong to no run now
        self.leased = False
        self.finished.clear()
        self.set_session(None)
        return dropped

    def close(self) -> None:
        """Stop every worker: idle ones exit on their own; busy, stuck or still starting ones
        (a program that exits while its workers import: no waiting for them) are killed."""
        self.queue.clear()
        idle = [worker for worker in self.workers if worker.ready and worker.task is None and worker.alive()]
        for worker in idle:
            try:
                worker.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + CLOSE_GRACE
        for worker in self.workers:
            if worker in idle:
                worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            worker.kill()
        self.workers.clear()
        self.leased = False

    # -- sessions -----------------------------------------------------------------------------

    def set_session(self, payload: Any) -> None:
        """Per-run state every worker gets before its next task (None: end the current one)."""
        self.session = None if payload is None else (next(self._session_ids), payload)
        self.session_failure = None
        self.session_crashes = 0
        for worker in list(self.workers):
            if worker.task is None or payload is None:  # a busy worker gets it with its next task
                try:
                    self._send_session(worker)
                except (OSError, ValueError):
                    pass  # a dead worker: the next poll removes it

    def _send_session(self, worker: _Worker) -> None:
        wanted = None if self.session is None else self.session[0]
        if worker.session == wanted:
            return
        worker.send(("session", wanted, None if self.session is None else self.session[1]))
        worker.session, worker.session_confirmed = wanted, False

    # -- tasks --------------------------------------------------------------------------------

    def submit(self, task_id: Any, task: Any) -> None:
        self.queue.append((task_id, task))
        self._dispatch()

    def cancel_queued(self, keep: Callable[[Any], bool] | None = None) -> list[Any]:
        """Drop tasks no worker has started, but those whose id `keep` accepts; return the dropped ids."""
        dropped = [task_id for task_id, _ in self.queue if keep is None or not keep(task_id)]
        self.queue = deque(entry for entry in self.queue if keep is not None and keep(entry[0]))
        return dropped

    def busy(self) -> bool:
        return bool(self.queue) or any(self._current(worker) for worker in self.workers)

    def start_methods(self) -> str:
        """How its started workers were started: e.g. 'fork', 'forkserver' or 'fork+forkserver'."""
        return "+".join(sorted({w.method for w in self.workers if w.started and w.method})) or "none"

    def has_ready_worker(self) -> bool:
        return any(worker.ready for worker in self.workers)

    def waitables(self) -> list[Any]:
        return [w.connection for w in self.workers] + [w.process.sentinel for w in self.workers if w.started]

    def next_deadline(self) -> float | None:
        deadlines = [w.deadline for w in self.workers if w.task is not None or not w.ready]
        if any(not w.started and w.start_error is None for w in self.workers):
            # not started yet: its process sentinel cannot be waited on, and a forked one gets a
            # shorter deadline once it runs (`launch`): look again soon
            deadlines.append(time.monotonic() + STARTING_POLL_S)
        return min(deadlines) if deadlines else None

    def collect(self) -> list[Outcome]:
        """Outcomes that are ready now; kills overdue tasks and replaces dead workers."""
        for worker in list(self.workers):
            self._poll(worker)
        self._dispatch()
        finished, self.finished = self.finished, []
        return finished

    def wait_all(self, timeout: float | None = None) -> list[Outcome]:
        """Block until every submitted task has an outcome (for callers with a single group)."""
        outcomes: list[Outcome] = []
        end = None if timeout is None else time.monotonic() + timeout
        while self.busy():
            wait_for(self, until=end)
            outcomes += self.collect()
            if end is not None and time.monotonic() >= end:
                break
        return outcomes + self.collect()

    # -- internals ----------------------------------------------------------------------------

    def _current(self, worker: _Worker) -> bool:
        """Whether the worker runs a task of the current run (not one left over from an earlier run)."""
        return worker.task is not None and worker.task[2] == self.lease

    def _add_worker(self) -> _Worker:
        worker = _Worker(self)
        self.workers.append(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        try:
            worker.send(None)
        except (OSError, ValueError):
            pass
        self.workers.remove(worker)
        worker.kill()

    def _poll(self, worker: _Worker) -> None:
        if not worker.started:
            if worker.start_error is not None:
                self._lost(worker, "crash", f"could not start a {self.name} worker: {worker.start_error}")
            elif time.monotonic() >= worker.deadline:
                self._lost(worker, "timeout", f"{self.name} worker did not start within {STARTUP_TIMEOUT:.0f} s")
            return
        while True:
            try:
                if not worker.connection.poll():
                    break
                kind, ident, value = worker.connection.recv()
            except (EOFError, OSError):
                self._lost(worker, "crash", f"{self.name} worker exited (code {self._exit_code(worker)})")
                return
            if kind == "ready":
                self._became_ready(worker, value)
            elif kind == "warm":
                self._became_warm(worker, value)
            elif kind == "fork_unusable":
                forking._forking_failed(value)
                self.log(f"{self.name}: a forked worker cannot use CUDA ({value}); replacing it with one "
                         f"from the fork server, and forking no more workers")
                self._lost(worker, "crash", f"{self.name} forked worker unusable: {value}", retry=True)
                return
            elif kind == "setup_error":
                self.setup_failure = value
                self._lost(worker, "error", f"{self.name} worker failed to start: {value}")
                return
            elif kind == "session_ok":
                worker.session_confirmed = ident == worker.session
            elif kind == "session_error":
                if self.session is not None and ident == self.session[0]:
                    self.session_failure = value
                    self.log(f"{self.name}: the run's setup failed in a worker: {value}")
            elif kind == "unusable":
                self.log(f"{self.name}: a worker found itself unusable ({value}); replacing it")
            else:
                task, worker.task = worker.task, None
                if task is not None and task[2] == self.lease:
                    self.finished.append(Outcome(ident, "ok", value) if kind == "ok" else
                                         Outcome(ident, "error", message=value))
        if not worker.process.is_alive():
            self._lost(worker, "crash", f"{self.name} worker exited (code {self._exit_code(worker)})")
        elif time.monotonic() >= worker.deadline and not worker.ready and worker.method == "fork":
            reason = f"not ready {FORK_STARTUP_TIMEOUT:.0f} s after the fork"
            forking._forking_failed(reason)
            self.log(f"{self.name}: a forked worker was {reason}; replacing it with one from the fork server, "
                     "and forking no more workers")
            self._lost(worker, "timeout", f"{self.name} forked worker {reason}", retry=True)
        elif time.monotonic() >= worker.deadline and (worker.task is not None or not worker.ready):
            limit = self.task_timeout if worker.ready else STARTUP_TIMEOUT
            self._lost(worker, "timeout", f"no answer within {limit:.0f} s; worker killed")

    def _became_ready(self, worker: _Worker, value: tuple[float, bool]) -> None:
        setup_seconds, worker.warming = value
        worker.ready = True
        now = time.monotonic()
        if worker.task is not None:
            worker.deadline = now + self.task_timeout
        ready = sum(w.ready for w in self.workers)
        if self.first_ready_at is None:
            self.first_ready_at = now
        if ready == 1 or ready == len(self.workers):
            skipped = f"; not forked: {worker.fork_skipped}" if worker.fork_skipped else ""
            self.log(f"{self.name}: {ready}/{len(self.workers)} worker(s) ready, {now - worker.created:.2f} s "
                     f"after start (its setup took {setup_seconds:.2f} s; started by {worker.method}{skipped})")
        if not worker.warming and self.first_warm_at is None:
            self.first_warm_at = now  # nothing to warm up

    def _became_warm(self, worker: _Worker, value: tuple[float, str]) -> None:
        seconds, detail = value
        worker.warming = False
        if self.first_warm_at is None:
            self.first_warm_at = time.monotonic()
        warm = sum(w.ready and not w.warming for w in self.workers)
        if warm == 1 or warm == len(self.workers):
            self.log(f"{self.name}: {warm}/{len(self.workers)} worker(s) warmed up; this one in {seconds:.2f} s"
                     + (f" ({detail})" if detail else ""))

    def _lost(self, worker: _Worker, kind: str, message: str, retry: bool = False) -> None:
        """Report the worker's task (if any) as failed and replace the worker; with `retry` (the
        worker was not to blame, e.g. a forked one whose CUDA failed) its task is queued again
        and the replacement starts even while the group is not leased."""
        worker.kill()
        self.workers.remove(worker)
        self.restarts += 1
        task = worker.task
        # died or hung warming up (its task, if any, had not begun): the warm-up's fault, and
        # its replacements go without one
        warming = worker.warming and kind in ("crash", "timeout")
        if warming and self.warm_up:
            self.warm_up = False
            self.log(f"{self.name}: a worker was lost during its warm-up ({message}); later workers skip it")
        # died setting up the run (e.g. a CUDA context poisoned earlier): not its task's fault
        setting_up = (not warming and kind == "crash" and self.session is not None
                      and worker.session == self.session[0] and not worker.session_confirmed
                      and self.session_failure is None)
        if setting_up:
            self.session_crashes += 1
            if self.session_crashes >= SESSION_ATTEMPTS:
                self.session_failure = f"{self.session_crashes} {self.name} workers died setting up the run"
        if task is not None and task[2] == self.lease:
            if retry or warming or (setting_up and self.session_failure is None):
                self.queue.appendleft(task[:2])
            else:
                self.finished.append(Outcome(task[0], kind, message=message))
                self.log(f"{self.name}: candidate {task[0]}: {kind}: {message}")
        elif task is None and kind == "crash" and worker.ready:
            self.log(f"{self.name}: an idle worker died ({message}); replacing it")
        failure = self.setup_failure or self.session_failure
        if failure is not None:
            # every worker would fail the same way: fail the queue instead of looping on restarts
            self.finished += [Outcome(task_id, "error", message=message) for task_id in self.cancel_queued()]
        elif self.leased or self.queue or retry:
            self.start()  # warm up the replacement now, not when the next task needs it

    @staticmethod
    def _exit_code(worker: _Worker) -> Any:
        worker.process.join(timeout=1)
        return worker.process.exitcode

    def _dispatch(self) -> None:
        failure = self.setup_failure or self.session_failure
        if failure is not None:
            message = (f"{self.name} worker failed to start: {failure}" if self.setup_failure
                       else f"{self.name}: the run's setup failed: {failure}")
            self.finished += [Outcome(task_id, "error", message=message) for task_id in self.cancel_queued()]
        while self.queue:
            idle = next((w for w in self.workers if w.task is None), None)
            if idle is None:
                if len(self.workers) >= self.size:
                    return
                idle = self._add_worker()
            task_id, task = self.queue.popleft()
            try:
                self._send_session(idle)
                idle.assign(task_id, task, self.lease, self.task_timeout)
            except (OSError, ValueError) as error:  # the worker died between polls
                idle.task = (task_id, task, self.lease)
                self._lost(idle, "crash", f"could not send the task: {error}")


def wait_for(*groups: WorkerGroup, until: float | None = None) -> None:
    """Sleep until any worker of `groups` answers, dies, or reaches a deadline (or `until`)."""
    waitables = [w for group in groups for w in group.waitables()]
    deadlines = [d for group in groups if (d := group.next_deadline()) is not None]
    if until is not None:
        deadlines.append(until)
    timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
    if waitables:
        multiprocessing.connection.wait(waitables, timeout=timeout)
    elif timeout:
        time.sleep(min(timeout, 0.05))


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["START_METHODS", "FatalWorkerError", "Outcome", "WorkerGroup", "wait_for"]
