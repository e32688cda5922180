"""One tuning candidate's launches, as the autotuner's workers hand them to a backend.

Plain values that pickle: a compile worker gets `CompileLaunch`es, whose tensors are replaced by
`TensorStandIn`s (compiling needs only a tensor's dtype and alignment, so a task stays small); a
bench worker gets `RunLaunch`es with the real tensors (shared with the tuning process).

>>> CompileLaunch("/tmp/k.py", "add_kernel", (TensorStandIn(torch.float32, True), 1024), 4, 2).num_warps
4
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class TensorStandIn:
    """What a compiler's specialization needs to know of a tensor argument."""

    dtype: torch.dtype
    aligned: bool  # its address is a multiple of 16 bytes


@dataclasses.dataclass(frozen=True)
class CompileLaunch:
    """One launch of a candidate, to compile without running it."""

    source_path: str
    function_name: str
    arguments: tuple[Any, ...]  # TensorStandIn | int | float
    num_warps: int
    num_stages: int


@dataclasses.dataclass(frozen=True)
class RunLaunch:
    """One launch of a candidate, to run (and time) on its arguments."""

    source_path: str
    function_name: str
    arguments: tuple[Any, ...]  # torch.Tensor | int | float
    grid: tuple[int, ...]
    num_warps: int
    num_stages: int


__all__ = ["CompileLaunch", "RunLaunch", "TensorStandIn"]
