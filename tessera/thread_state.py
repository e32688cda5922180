"""Per-thread stacks of call state (the active interpreter, runner, device, tracer).

Kernels may be called from several threads at once (data loaders, one thread per stream). What a
call pushes while it runs must be seen only by that call: each stack is a `threading.local`, so
every thread has its own.

>>> _runners = ThreadStack()
>>> _runners.items.append("runner")
"""
from __future__ import annotations

import threading
from typing import Any


class ThreadStack(threading.local):
    """A list per thread, in `items`."""

    def __init__(self) -> None:
        self.items: list[Any] = []
