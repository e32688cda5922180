"""Start the autotuning workers when a kernel is defined, if its first call will likely tune.

Starting the workers cold is most of a first tuning run (the fork server imports torch, each
worker imports Triton, sets up CUDA and pays for its first compile: seconds), and a program
usually does other things between defining a kernel and calling it (more imports, loading data,
making inputs). So `Kernel.__init__` calls `kernel_defined(kernel)`, which costs microseconds on
the user's thread: it goes on only when

- `TESSERA_PREWARM` is on (the default) and this process is not a multiprocessing child (a data
  loader's worker that re-imports the module must not start a pool of its own);
- the kernel has no `config=`, its effective `autotune_effort` (TESSERA_AUTOTUNE_EFFORT, else its
  own) is not "none", and its mode (`mode=`, else TESSERA_MODE) is "compiled" or left to the
  device.

Then a daemon thread checks that CUDA is available (`torch.cuda.device_count()`, which asks
NVML: it initializes neither torch's CUDA nor the driver in this process, so the workers can
still be forked from it, see forking.py), that the workers are not running already, and that the disk
cache holds no tuned config for the kernel's source with this torch and Triton (on this GPU,
when CUDA is initialized already): then the kernel will likely tune, and the thread starts the
compile pool and the bench worker (`pool.prestart_group`) with the settings a tuning run
uses, so that run finds them started and warmed up. Workers nobody uses stop after
`pool.IDLE_SHUTDOWN_S`. Nothing here raises into the user's code: a failure is logged
(TESSERA_LOG=autotune) and the first tuning run starts its workers itself, as before.

>>> @tessera.kernel            # doctest: +SKIP
... def softmax(x): ...        # on a CUDA machine with an empty cache: the workers start now
"""
from __future__ import annotations

import collections
import hashlib
import inspect
import multiprocessing
import os
import threading
from typing import Any

import torch

from tessera import settings
from tessera.autotune import disk_cache, forking, progress

_lock = threading.Lock()
_pending: collections.deque[Any] = collections.deque()
_running = False  # a thread is working through `_pending`


def kernel_defined(kernel: Any) -> None:
    """The hook `Kernel.__init__` calls; cheap, and never raises."""
    try:
        if _likely_to_tune(kernel):
            from tessera.autotune import pool  # the worker machinery (~8 ms): only for a kernel that will tune
            if forking.fork_hazard() is None and not pool.has_group("compile"):
                # CUDA is untouched now: fork the workers here (tens of ms), before the program
                # initializes CUDA and only the slow fork server (a fresh torch import) is left
                with forking.forking_here():
                    _log(f"{kernel.fn.__name__}: {consider(kernel)}")
            else:
                _submit(kernel)
    except Exception as error:  # noqa: BLE001 - prewarming is an optimization, never an error
        _log(f"not started for {getattr(kernel, '__name__', kernel)}: {type(error).__name__}: {error}")


def _likely_to_tune(kernel: Any) -> bool:
    """The checks that need neither CUDA nor the disk (they run on the user's thread)."""
    if not settings.get("prewarm") or multiprocessing.parent_process() is not None:
        return False
    options = kernel.settings
    if options.config is not None or (settings.get("autotune_effort") or options.autotune_effort) == "none":
        return False
    return (options.mode or settings.get("mode")) in (None, "compiled")


def _submit(kernel: Any) -> None:
    global _running
    with _lock:
        _pending.append(kernel)
        if _running:
            return
        _running = True
    threading.Thread(target=_work, name="tessera-prewarm", daemon=True).start()


def _work() -> None:
    """Consider each defined kernel in turn, then end (the next definition starts a new thread)."""
    global _running
    while True:
        with _lock:
            if not _pending:
                _running = False
                return
            kernel = _pending.popleft()
        try:
            _log(f"{kernel.fn.__name__}: {consider(kernel)}")
        except Exception as error:  # noqa: BLE001
            _log(f"{kernel.fn.__name__}: not started: {type(error).__name__}: {error}")


def consider(kernel: Any, options: Any = None) -> str:
    """Start the workers if `kernel` will likely tune (see the module docstring); says what it did."""
    if torch.cuda.device_count() <= 0:  # not `is_available()`: it initializes the driver, and then no
        return "no CUDA: workers not started"  # worker could be forked from this process (forking.py)
    from tessera.autotune import pool  # the worker machinery (~8 ms): only on a CUDA machine
    if pool.has_group("compile") and pool.has_group("bench"):
        return "the workers are running already"
    names = (frozenset(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
             if torch.cuda.is_initialized() else None)  # asking the name would initialize CUDA
    if disk_cache.has_entry_for(source_hash(kernel.fn), names):
        return "the disk cache has tuned configs for it: workers not started"
    from tessera.autotune.pipeline import TuneOptions, worker_groups  # only now: the whole tuner (~25 ms)
    options = options or TuneOptions()
    device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_initialized() else "cuda:0"
    for group in worker_groups(options, "compiled", device):
        pool.prestart_group(group.name, group.size, setup=group.setup, payload=group.payload,
                            task_timeout=group.timeout, log=_log, start_method=options.start_method)
    return f"will likely tune: started the autotuning workers for {device} in the background"


def source_hash(fn: Any) -> str:
    """`Kernel.source_hash` of a kernel of `fn`, computed apart (the kernel's own cached source
    belongs to the user's thread)."""
    return hashlib.sha256("".join(inspect.getsourcelines(fn)[0]).encode()).hexdigest()[:20]


def _log(message: str) -> None:
    progress.log(f"prewarm: {message}")


def _after_fork_in_child() -> None:
    global _running, _lock
    _lock = threading.Lock()
    _pending.clear()
    _running = False  # the parent's thread does not exist here


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["consider", "kernel_defined", "source_hash"]
