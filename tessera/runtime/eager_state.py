"""The device of the eager call in progress (eager rules such as `hl.full` allocate there)."""
from __future__ import annotations

import torch

from tessera.runtime import interpreter

_CPU = torch.device("cpu")


def device() -> torch.device:
    """The running eager or host interpreter's device; CPU when none is running."""
    return getattr(interpreter.active(), "device", _CPU)
