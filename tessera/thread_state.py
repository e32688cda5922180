"""Per-thread stacks of call state (the active interpreter, the active tracer).

Kernels may be called from several threads at once (data loaders, one thread per stream). What a
call pushes while it runs must be seen only by that call: each stack is a `threading.local`, so
every thread has its own.

>>> _stack = ThreadStack()
>>> _stack.items.append(interpreter)
"""
from __future__ import annotations

import threading
from typing import Any


class ThreadStack(threading.local):
    """A list per thread, in `items`."""

    def __init__(self) -> None:
        self.items: list[Any] = []
