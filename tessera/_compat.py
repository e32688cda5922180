"""Feature probes at Helion's module path `helion._compat`, for the examples that branch on them.

>>> use_tileir_tunables()
False
"""
from __future__ import annotations

import torch


def use_tileir_tunables() -> bool:
    """Whether the TileIR backend's tunables apply: never (Tessera lowers to Triton)."""
    return False


def _supports_tensor_descriptor() -> bool:
    # TMA tensor descriptors need an NVIDIA GPU of compute capability 9.0 (Hopper) or newer
    if torch.version.hip is not None or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(torch.cuda.current_device())[0] >= 9


def supports_tensor_descriptor() -> bool:
    """Whether `Config(indexing="tensor_descriptor")` can run compiled on this machine's GPU
    (it also runs in interpret mode). Calls `_supports_tensor_descriptor`, which tests may patch."""
    return _supports_tensor_descriptor()


def get_tensor_descriptor_fn_name() -> str:
    """The Triton function Tessera's generated code makes tensor descriptors with."""
    return "tl.make_tensor_descriptor"


def _min_dot_size(device: torch.device, lhs: torch.dtype, rhs: torch.dtype) -> tuple[int, int, int]:
    # tl.dot takes M, N, K of at least 16; Tessera refuses narrower whole dims in compiled mode
    # (backends/triton/backend.py) and gives tiled dims blocks of at least 16 in products
    return (16, 16, 16)


def min_dot_size(device: torch.device, lhs: torch.dtype, rhs: torch.dtype) -> tuple[int, int, int]:
    """The smallest (M, N, K) of a matrix product Tessera's Triton code runs as `tl.dot`.
    Calls `_min_dot_size`, which tests may patch."""
    return _min_dot_size(device, lhs, rhs)


__all__ = ["get_tensor_descriptor_fn_name", "min_dot_size", "supports_tensor_descriptor", "use_tileir_tunables"]
