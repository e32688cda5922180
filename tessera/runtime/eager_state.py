"""State of the eager call in progress: its device (eager rules allocate there)."""
from __future__ import annotations

import torch

from tessera.thread_state import ThreadStack

_devices = ThreadStack()  # of torch.device; one per thread


def device() -> torch.device:
    return _devices.items[-1] if _devices.items else torch.device("cpu")


def push_device(value: torch.device) -> None:
    _devices.items.append(value)


def pop_device() -> None:
    _devices.items.pop()
