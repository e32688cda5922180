"""Whether a worker may be forked from the tuning process now, and what a forked child undoes.

With the default start method "auto", a worker is forked from this process when that is safe at
that moment (`fork_hazard`): torch is imported here and neither torch nor the CUDA driver is
initialized in this process (typically: the workers prestarted when a kernel is defined, before
the program made CUDA tensors). A forked child has torch imported already (ready in well under a
second instead of a fresh interpreter's seconds) and initializes CUDA itself, as PyTorch's
DataLoader workers do. The check and the fork happen under torch's CUDA initialization lock
(`_fork_start`), so no thread of this process initializes CUDA meanwhile; a forked child whose
CUDA is unusable anyway (the driver initialized by something else) reports it at setup and is
replaced by a worker from the fork server, and this process forks no more workers
(`_forking_failed`). A forked child closes the pipes of the other workers it inherited and runs
torch on one CPU thread (the parent's OpenMP pool does not survive a fork):
`_become_forked_worker`. `forking_here()` forks the workers started inside it at once, on the
caller's thread (prewarm.py). Starting and running the workers is workers.py's job.

>>> fork_hazard()  # doctest: +SKIP
'CUDA is initialized in this process'
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import sys
import threading
import weakref
from typing import Any, Iterator

_connections: weakref.WeakSet[Any] = weakref.WeakSet()  # both ends of every worker's pipe (a forked child closes them)
_fork_failed: str | None = None  # why forking workers stopped in this process (a forked child's CUDA failed)
_libcuda: Any = None


_fork_here = threading.local()


@contextlib.contextmanager
def forking_here() -> Iterator[None]:
    """Workers of 'auto' groups started inside are forked at once on this thread when safe (see
    `fork_hazard`), not later on the starter thread, by which time CUDA may be initialized."""
    _fork_here.active = True
    try:
        yield
    finally:
        _fork_here.active = False


def fork_hazard() -> str | None:
    """Why forking a worker from this process now would not be safe or useful (None: it is).

    Forking needs torch imported (what the child would otherwise import) and CUDA untouched in
    this process: a child cannot use CUDA once the parent initialized it (torch's CUDA state, or
    only the driver: `torch.cuda.is_available()` calls `cuInit`).
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return "no fork on this platform"
    if _fork_failed is not None:
        return f"a forked worker could not use CUDA ({_fork_failed})"
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported in this process"
    if torch.cuda.is_initialized() or _in_bad_fork():
        return "CUDA is initialized in this process"
    if _cuda_driver_initialized():
        return "the CUDA driver is initialized in this process"
    return None


def _cuda_driver_initialized() -> bool:
    """Whether this process called `cuInit` (asked without calling it: before it, the driver
    answers every call but a few with CUDA_ERROR_NOT_INITIALIZED). False without a driver."""
    global _libcuda
    if _libcuda is None:
        try:
            _libcuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _libcuda = False
    if _libcuda is False:
        return False
    try:
        count = ctypes.c_int(0)
        return _libcuda.cuDeviceGetCount(ctypes.byref(count)) != 3  # 3: CUDA_ERROR_NOT_INITIALIZED
    except Exception:  # noqa: BLE001 - an odd driver: do not fork
        return True


def _fork_start(process: Any) -> str | None:
    """Start `process` (of the fork context) if forking is safe now; else say why not.

    Checked and forked while holding torch's CUDA initialization lock: no thread of this process
    can be initializing CUDA (torch's way) during the fork. A thread already holding it is doing
    so: no fork. The child inherits the lock held and releases it (`_become_forked_worker`).
    """
    torch = sys.modules.get("torch")
    lock = getattr(getattr(torch, "cuda", None), "_initialization_lock", None)
    if lock is None:
        return fork_hazard() or "torch has no CUDA initialization lock"
    if not lock.acquire(blocking=False):
        return "CUDA is being initialized in this process"
    try:
        hazard = fork_hazard()
        if hazard is None:
            process.start()
        return hazard
    finally:
        lock.release()


def _forking_failed(reason: str) -> None:
    global _fork_failed
    _fork_failed = reason


# -- the forked child -------------------------------------------------------------------------

_FORK_CUDA_MARKERS = ("forked subprocess", "CUDA", "cuda", "initialization error")
"""A forked child's setup error with one of these is blamed on the fork: retried in a fresh process."""

_forked_worker = False  # this process is a worker forked from the tuning process


def in_forked_worker() -> bool:
    """Whether this process is a worker forked from the tuning process (not from the fork server)."""
    return _forked_worker


def _become_forked_worker(own: Any) -> None:
    """First thing in a forked child: undo what it must not keep of the parent."""
    global _forked_worker
    _forked_worker = True
    for connection in list(_connections):  # the other workers' pipes: their EOFs must not wait for us
        if connection is not own:
            try:
                connection.close()
            except OSError:
                pass
    _connections.clear()
    if "torch" in sys.modules:
        import torch
        lock = getattr(torch.cuda, "_initialization_lock", None)
        if lock is not None and lock.locked():  # the parent held it while forking (`_fork_start`)
            try:
                lock.release()
            except RuntimeError:
                pass
        try:
            torch.set_num_threads(1)  # the parent's OpenMP threads are not here (as DataLoader workers)
        except Exception:  # noqa: BLE001
            pass


def _in_bad_fork() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda._is_in_bad_fork())
    except Exception:  # noqa: BLE001 - a torch without it
        return False


__all__ = ["fork_hazard", "forking_here", "in_forked_worker"]
