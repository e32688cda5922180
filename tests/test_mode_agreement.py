"""Eager, interpret and compiled modes compute the same thing (or refuse it the same way) for the
awkward cases found by the session-13 sweep: each test one behaviour, against PyTorch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor
CONFIG = tessera.Config(block_sizes=[4])


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def first_column(x: T) -> T:
    out = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :][:, 0]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (4, 8)], ids=str)
def test_a_picked_negative_zero_keeps_its_sign(dtype: torch.dtype, shape: tuple[int, int], device: torch.device) -> None:
    # the lane was picked by a float sum, which starts at +0.0 in Triton's interpreter (numpy) as in torch
    x = torch.full(shape, -0.0, dtype=dtype)
    for mode in _modes(device):
        result = tessera.kernel(first_column, mode=mode, config=CONFIG)(x.to(device)).cpu()
        assert torch.equal(result.signbit(), torch.ones(shape[0], dtype=torch.bool)), mode

