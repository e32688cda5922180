"""Kernel objects, argument binding, caches and the modes (eager / interpret / compiled).

`get_num_sm(device)` is here because Helion's examples call it as `helion.runtime.get_num_sm`.
"""
from __future__ import annotations

from typing import Any

import torch


def get_num_sm(device: Any = None) -> int:
    """Streaming multiprocessors of a CUDA device (the CPU's core count for a CPU device), e.g. the
    program count of a persistent kernel: `get_num_sm(x.device)`."""
    device = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return torch.get_num_threads()
