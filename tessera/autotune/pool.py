"""The process's warm worker groups: one per name, kept between tuning runs, leased to one at a time.

`leased_group()` keeps one warm group per name for the whole process: the next kernel's tuning
reuses its workers (shut down at exit). `prestart_group()` starts one before any run needs it (see
prewarm.py), under the same idle shutdown. A group started before the program changed a variable
that matters to workers (`workers.WORKER_ENVIRONMENT`) is remade. A lease polls every worker first,
so a worker that died while idle is replaced, never handed out. A group left unleased for
`IDLE_SHUTDOWN_S` is stopped, so a long program does not keep idle workers (and the bench worker's
CUDA context) after its kernels are tuned. A forked child of this process has none of its groups.

>>> group = leased_group("compile", 4, setup=my_setup, payload="compiled", task_timeout=30)  # doctest: +SKIP
>>> group.submit(0, task); outcomes = group.wait_all()                                      # doctest: +SKIP
>>> release_group(group)                                                                     # doctest: +SKIP
"""
from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Callable

from tessera.autotune.workers import START_METHOD, WorkerGroup, _environment

IDLE_SHUTDOWN_S = 120.0  # a warm group nobody leased for this long is stopped (its CUDA memory freed)

_pools: dict[str, WorkerGroup] = {}
_pools_lock = threading.Lock()
_pools_pid = os.getpid()
_shutdown_registered = False


def leased_group(name: str, size: int, *, setup: Callable[[Any], Callable[[Any], Any]], payload: Any,
                 task_timeout: float, log: Callable[[str], None] | None = None,
                 start_method: str = START_METHOD) -> WorkerGroup:
    """This process's warm group `name`, leased to one run; give it back with `release_group`.

    The group is made on first use and remade when the setup, payload (e.g. the mode), start
    method or worker environment differ. While it is leased, another caller (a second thread
    tuning) gets a private group that `release_group` closes.
    """
    with _pools_lock:
        _forget_parent_pools()
        group = _pools.get(name)
        if group is not None and group.leased:
            private = WorkerGroup(name, size, setup=setup, payload=payload, task_timeout=task_timeout, log=log,
                                  start_method=start_method)
            private.begin_lease(size=size, task_timeout=task_timeout, log=log)
            return private
        if group is not None and (group.setup is not setup or group.payload != payload
                                  or group.start_method != start_method or group.environ != _environment()):
            group.close()
            group = None
        if group is None:
            group = _new_pool(name, size, setup=setup, payload=payload, task_timeout=task_timeout, log=log,
                              start_method=start_method)
        group.begin_lease(size=size, task_timeout=task_timeout, log=log)
        return group


def prestart_group(name: str, size: int, *, setup: Callable[[Any], Callable[[Any], Any]], payload: Any,
                   task_timeout: float, log: Callable[[str], None] | None = None,
                   start_method: str = START_METHOD) -> WorkerGroup | None:
    """Start this process's warm group `name` now, before a run leases it; None if there is one.

    Its workers start (and warm up) in the background; the first `leased_group` with the same
    setup, payload and start method gets them. Nobody leasing it within `IDLE_SHUTDOWN_S`
    stops it, as after a run.
    """
    with _pools_lock:
        _forget_parent_pools()
        if name in _pools:
            return None
        group = _new_pool(name, size, setup=setup, payload=payload, task_timeout=task_timeout, log=log,
                          start_method=start_method)
        group.prestarted = True
        group.start()
    _close_when_idle(group)
    return group


def has_group(name: str) -> bool:
    """Whether this process has a warm group `name` (leased or not)."""
    with _pools_lock:
        _forget_parent_pools()
        return name in _pools


def _forget_parent_pools() -> None:
    """In a forked child, the groups (and their workers) belong to the parent. Call with the lock."""
    global _pools_pid
    if _pools_pid != os.getpid():
        _pools.clear()
        _pools_pid = os.getpid()


def _new_pool(name: str, size: int, **options: Any) -> WorkerGroup:
    """A pooled group registered under `name` (stopped at exit). Call with the lock."""
    global _shutdown_registered
    group = _pools[name] = WorkerGroup(name, size, **options)
    group.pooled = True
    if not _shutdown_registered:
        atexit.register(shutdown_pools)
        _shutdown_registered = True
    return group


def _close_when_idle(group: WorkerGroup) -> None:
    """Stop `group` after `IDLE_SHUTDOWN_S` unless a run leases it meanwhile."""
    timer = threading.Timer(IDLE_SHUTDOWN_S, _close_if_idle, args=(group, group.lease))
    timer.daemon = True
    timer.start()


def release_group(group: WorkerGroup) -> list[Any]:
    """End a lease: a pooled group stays warm for the next run, a private one is closed.

    Returns the ids of tasks that were still queued.
    """
    if group.pooled:
        dropped = group.end_lease()
        _close_when_idle(group)
        return dropped
    dropped = group.cancel_queued()
    group.close()
    return dropped


def _close_if_idle(group: WorkerGroup, lease: int) -> None:
    """Stop a warm group that was not leased again since `lease` ended."""
    with _pools_lock:
        if _pools.get(group.name) is group and not group.leased and group.lease == lease:
            del _pools[group.name]
            group.close()


def shutdown_pools() -> None:
    """Stop every warm worker of this process (registered with atexit)."""
    with _pools_lock:
        groups = list(_pools.values())
        _pools.clear()
    for group in groups:
        group.close()


def _after_fork_in_child() -> None:
    """Any fork of this process: the groups and their lock stay the parent's."""
    global _pools_lock, _pools_pid
    _pools_lock = threading.Lock()
    _pools.clear()
    _pools_pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["IDLE_SHUTDOWN_S", "has_group", "leased_group", "prestart_group", "release_group", "shutdown_pools"]
