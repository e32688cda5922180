"""State of the eager call in progress: its device (eager rules allocate there)."""
from __future__ import annotations

import torch

_devices: list[torch.device] = []


def device() -> torch.device:
    return _devices[-1] if _devices else torch.device("cpu")


def push_device(value: torch.device) -> None:
    _devices.append(value)


def pop_device() -> None:
    _devices.pop()
