"""Helion's module path `helion.language.loops`, for the probe its tests patch.

`_supports_warp_specialize()` says whether Triton can specialize warps on this machine's GPU
(`Config(range_warp_specializes=[True])` compiles there: NVIDIA, compute capability 9.0 or newer).
Tessera's tuner does not search that key, so patching the probe changes nothing Tessera chooses;
it exists so that code written for Helion imports.

>>> _supports_warp_specialize() in (True, False)
True
"""
from __future__ import annotations

import torch


def _supports_warp_specialize() -> bool:
    if torch.version.hip is not None or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(torch.cuda.current_device())[0] >= 9
