"""Host ints that are symbols when traced (int arguments, a closure's ints) where the generated code
needs a constant: a slice step and a var/std correction are pinned to the call's value (guarded,
one variant per value) as eager mode uses them. Found by benchmarks/feature_fuzz.py: the step was
refused in interpret mode only, the correction was a raw sympy TypeError."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def _every_step_th(step: int) -> Any:
    def kernel(x: torch.Tensor) -> torch.Tensor:
        picked = x[1::step]
        out = torch.empty([picked.size(0)], dtype=x.dtype, device=x.device)
        for tile in hl.tile(picked.size(0)):
            out[tile] = x[1::step][tile] + 1
        return out
    return kernel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("step", [1, 2, 3])
def test_slice_step_from_a_closure_int(step: int, mode: str) -> None:
    x = torch.randn(11)
    result = tessera.kernel(_every_step_th(step), mode=mode, config=tessera.Config(block_sizes=[4]))(x)
    torch.testing.assert_close(result, x[1::step] + 1)


def _row_spread(correction: int) -> Any:
    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
        for tile in hl.tile(x.size(0)):
            spread, mean = torch.std_mean(x[tile, :], dim=1, correction=correction)
            out[tile] = spread - mean
        return out
    return kernel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_std_mean_correction_from_a_closure_int(correction: int, mode: str) -> None:
    x = torch.randn(5, 6)
    spread, mean = torch.std_mean(x, dim=1, correction=correction)
    result = tessera.kernel(_row_spread(correction), mode=mode, config=tessera.Config(block_sizes=[2]))(x)
    torch.testing.assert_close(result, spread - mean, rtol=1e-5, atol=1e-5)
