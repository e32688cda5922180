"""Scratch buffers: the device memory a launch takes after its own arguments (split-K's partial
sums and arrival counters, `backends.base.ScratchBuffer`), kept between launches where that is safe.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from tessera.backends.base import ScratchBuffer


def scratch_arguments(buffers: tuple[ScratchBuffer, ...], grid: tuple[int, ...], arguments: list[Any],
                      host: Any, keep: bool = True) -> list[torch.Tensor]:
    """The trailing scratch arguments of a launch: each buffer at least large enough for every
    program of `grid`, on the launch's device. On a GPU, with `keep`, buffers are kept per device,
    stream, dtype and zeroing and only grow: launches on one stream run one after another, and a
    zeroed buffer's kernel leaves it zeroed (split-K resets its counters), so reusing one costs no
    allocation or memset per call. Fresh buffers instead: on the CPU (an interpreted launch that
    raises half-way would leave counters set), for a plan (the tuner's workers may kill a
    candidate mid-launch) and while a CUDA graph is captured (a zero fill recorded in a graph runs
    only on replay, and a kept buffer may be freed when it grows while the graph still uses it)."""
    device = next((a.device for a in arguments if isinstance(a, torch.Tensor)),
                  host.device if host is not None else torch.device("cpu"))
    programs = math.prod(grid)
    fresh = not keep or not keeps_scratch(device)
    stream = 0 if fresh else stream_handle(device)
    tensors = []
    for buffer in buffers:
        needed = max(programs * buffer.per_program, 1)
        key = (device, stream, buffer.dtype, buffer.zeroed)
        kept = None if fresh else _SCRATCH.get(key)
        if kept is None or kept.numel() < needed:
            kept = (torch.zeros if buffer.zeroed else torch.empty)(needed, dtype=buffer.dtype, device=device)
            if not fresh:
                _SCRATCH[key] = kept
        tensors.append(kept)
    return tensors


def kept_scratch(buffers: tuple[ScratchBuffer, ...], programs: int, device: torch.device) -> list[torch.Tensor] | None:
    """The buffers `scratch_arguments` would pass a launch of `programs` programs on `device`
    when it keeps them and has them large enough already; None otherwise (the caller then takes
    the launch path that calls `scratch_arguments`). What a remembered split-K launch runs with."""
    if not keeps_scratch(device):
        return None
    stream = stream_handle(device)
    tensors = []
    for buffer in buffers:
        kept = _SCRATCH.get((device, stream, buffer.dtype, buffer.zeroed))
        if kept is None or kept.numel() < programs * buffer.per_program:
            return None
        tensors.append(kept)
    return tensors


def keeps_scratch(device: torch.device) -> bool:
    """Whether launches on `device` reuse kept scratch buffers (see `scratch_arguments`)."""
    return device.type == "cuda" and not _capturing()


def stream_handle(device: torch.device) -> int:
    """The raw handle of `device`'s current CUDA stream: the private getter Triton's own driver
    uses (one C call) where this torch has it, else the public Stream object's."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _RAW_STREAM(index) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


_SCRATCH: dict[tuple, torch.Tensor] = {}  # scratch_arguments' buffers
