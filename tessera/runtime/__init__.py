"""Kernel objects, argument binding, caches and the modes (eager / interpret / compiled).

`get_num_sm(device)` is here because Helion's examples call it as `helion.runtime.get_num_sm`; so are
Helion's other `helion.runtime` names (`Config`, `Kernel`, `exc`, `get_num_xcd`).
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.config import Config

__all__ = ["Config", "Kernel", "exc", "get_num_sm", "get_num_xcd"]


def get_num_xcd(device: Any = None) -> int:
    """Helion's count of an AMD GPU's compute dies, which its `xcd_remap` Config key uses: Tessera
    ignores xcd_remap (it targets NVIDIA GPUs and the CPU), so every device counts as one die."""
    return 1


def get_num_sm(device: Any = None, *, reserved_sms: int = 0) -> int:
    """Streaming multiprocessors of a CUDA device less `reserved_sms` (at least 1), e.g. the program
    count of a persistent kernel: `get_num_sm(x.device)`. A CPU device counts its threads; a TPU
    (or anything else with a `.type`, as Helion's TPU path) runs one program at a time: 1."""
    kind = getattr(device, "type", None)
    if kind is None:
        device = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
        kind = device.type
    if kind == "cuda":
        count = torch.cuda.get_device_properties(device).multi_processor_count
    elif kind == "cpu":
        count = torch.get_num_threads()
    else:
        return 1
    return max(count - reserved_sms, 1)


from tessera.runtime.kernel import Kernel  # noqa: E402  (after get_num_sm: its modules import that from here)
