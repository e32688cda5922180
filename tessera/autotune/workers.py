"""Worker processes that may hang or die without harming the process that tunes.

Both compiling and benchmarking run candidates in spawned processes: a candidate that hangs is
killed at its deadline, one that kills its process (a segfault, `os._exit`, a CUDA context
poisoned by an illegal memory access) is reported as a crash and the worker is restarted with
the same setup payload. The parent never blocks on a single worker: it waits on all of them
at once (`waitables()`), then `collect()`s what finished.

A worker is `setup(payload) -> handler`, then `handler(task)` per task; both are module-level
functions (spawn pickles them by name). A handler raises `FatalWorkerError` when its process
must not be reused (the worker reports the error, then exits).

>>> group = WorkerGroup("compile", 4, setup=my_setup, payload=None, task_timeout=30)  # doctest: +SKIP
>>> group.submit(0, task); outcomes = group.wait_all()                               # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import multiprocessing.connection
import os
import time
import traceback
from collections import deque
from typing import Any, Callable

STARTUP_TIMEOUT = 180.0  # importing torch and triton in a fresh process, on a loaded machine


class FatalWorkerError(RuntimeError):
    """Raised by a handler when its process is unusable after this task (e.g. a CUDA fault)."""


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


def _worker_main(connection: Any, setup: Callable[[Any], Callable[[Any], Any]], payload: Any) -> None:
    """Body of a worker process: set up once, then answer tasks until told to stop."""
    try:
        handler = setup(payload)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, never raised there
        connection.send(("setup_error", None, _describe(error)))
        return
    connection.send(("ready", None, None))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        task_id, task = message
        try:
            connection.send(("ok", task_id, handler(task)))
        except FatalWorkerError as error:
            connection.send(("error", task_id, _describe(error)))
            os._exit(3)  # the process state is broken: do not run another task in it
        except BaseException as error:  # noqa: BLE001
            connection.send(("error", task_id, _describe(error)))


def _describe(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    return "".join(lines).strip()


class _Worker:
    """One process of a group, with the task it is running and that task's deadline."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group
        parent_end, child_end = group.context.Pipe()
        self.connection = parent_end
        self.process = group.context.Process(target=_worker_main, args=(child_end, group.setup, group.payload),
                                             daemon=True, name=f"tessera-{group.name}")
        self.process.start()
        child_end.close()
        self.ready = False
        self.task: tuple[Any, Any] | None = None
        self.deadline = time.monotonic() + STARTUP_TIMEOUT
        self.started = time.monotonic()

    def assign(self, task_id: Any, task: Any) -> None:
        self.task = (task_id, task)
        self.connection.send((task_id, task))
        if self.ready:
            self.deadline = time.monotonic() + self.group.task_timeout

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)
        self.connection.close()


class WorkerGroup:
    """A fixed number of worker processes sharing a queue of tasks.

    Tasks past `task_timeout` seconds (counted from when a ready worker got them) are killed and
    reported as 'timeout'; a worker that dies is reported as 'crash' and replaced on demand.
    """

    def __init__(self, name: str, size: int, *, setup: Callable[[Any], Callable[[Any], Any]], payload: Any,
                 task_timeout: float, log: Callable[[str], None] | None = None) -> None:
        import torch.multiprocessing  # registers the reductions that share tensors between processes
        self.name = name
        self.size = max(1, size)
        self.setup = setup
        self.payload = payload
        self.task_timeout = task_timeout
        self.context = torch.multiprocessing.get_context("spawn")
        self.log = log or (lambda message: None)
        self.queue: deque[tuple[Any, Any]] = deque()
        self.workers: list[_Worker] = []
        self.finished: list[Outcome] = []
        self.restarts = 0
        self.setup_failure: str | None = None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, count: int | None = None) -> None:
        """Spawn workers now (they import torch and triton while the parent does other work)."""
        while len(self.workers) < min(self.size, count if count is not None else self.size):
            self.workers.append(_Worker(self))

    def close(self) -> None:
        for worker in self.workers:
            try:
                if worker.process.is_alive() and worker.task is None:
                    worker.connection.send(None)
            except OSError:
                pass
        for worker in self.workers:
            worker.process.join(timeout=2)
            worker.kill()
        self.workers.clear()

    # -- tasks --------------------------------------------------------------------------------

    def submit(self, task_id: Any, task: Any) -> None:
        self.queue.append((task_id, task))
        self._dispatch()

    def cancel_queued(self) -> list[Any]:
        """Drop tasks no worker has started; return their ids."""
        dropped = [task_id for task_id, _ in self.queue]
        self.queue.clear()
        return dropped

    def busy(self) -> bool:
        return bool(self.queue) or any(worker.task is not None for worker in self.workers)

    def waitables(self) -> list[Any]:
        return [w.connection for w in self.workers] + [w.process.sentinel for w in self.workers]

    def next_deadline(self) -> float | None:
        deadlines = [w.deadline for w in self.workers if w.task is not None or not w.ready]
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

    def _poll(self, worker: _Worker) -> None:
        while True:
            try:
                if not worker.connection.poll():
                    break
                kind, task_id, value = worker.connection.recv()
            except (EOFError, OSError):
                self._lost(worker, "crash", f"{self.name} worker exited (code {self._exit_code(worker)})")
                return
            if kind == "ready":
                worker.ready = True
                worker.deadline = time.monotonic() + self.task_timeout
            elif kind == "setup_error":
                self.setup_failure = value
                self._lost(worker, "error", f"{self.name} worker failed to start: {value}")
                return
            else:
                worker.task = None
                self.finished.append(Outcome(task_id, "ok", value) if kind == "ok" else
                                     Outcome(task_id, "error", message=value))
        if not worker.process.is_alive():
            self._lost(worker, "crash", f"{self.name} worker exited (code {self._exit_code(worker)})")
        elif time.monotonic() >= worker.deadline and (worker.task is not None or not worker.ready):
            limit = self.task_timeout if worker.ready else STARTUP_TIMEOUT
            self._lost(worker, "timeout", f"no answer within {limit:.0f} s; worker killed")

    def _lost(self, worker: _Worker, kind: str, message: str) -> None:
        """Report the worker's task (if any) as failed and remove the worker; a new one starts on demand."""
        worker.kill()
        self.workers.remove(worker)
        self.restarts += 1
        if worker.task is not None:
            self.finished.append(Outcome(worker.task[0], kind, message=message))
            self.log(f"{self.name}: candidate {worker.task[0]}: {kind}: {message}")
        if self.setup_failure is not None:
            # every worker would fail the same way: fail the queue instead of looping on restarts
            self.finished += [Outcome(task_id, "error", message=message) for task_id in self.cancel_queued()]

    @staticmethod
    def _exit_code(worker: _Worker) -> Any:
        worker.process.join(timeout=1)
        return worker.process.exitcode

    def _dispatch(self) -> None:
        if self.setup_failure is not None:
            message = f"{self.name} worker failed to start: {self.setup_failure}"
            self.finished += [Outcome(task_id, "error", message=message) for task_id in self.cancel_queued()]
        while self.queue:
            idle = next((w for w in self.workers if w.task is None), None)
            if idle is None:
                if len(self.workers) >= self.size:
                    return
                idle = _Worker(self)
                self.workers.append(idle)
            task_id, task = self.queue.popleft()
            try:
                idle.assign(task_id, task)
            except (OSError, ValueError) as error:  # the worker died between polls
                idle.task = (task_id, task)
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


__all__ = ["FatalWorkerError", "Outcome", "WorkerGroup", "wait_for"]
