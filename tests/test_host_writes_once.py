"""The host code of a kernel runs once per call in every mode as far as the call's tensors can
tell: choosing the first call's Config plans the call (the host code runs, its launches are
recorded), and that plan no longer writes into the arguments, so a host-side in-place update
or `hl.store` is applied once, not twice (it was, on the first call in interpret/compiled modes)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def bump_then_copy(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    x.add_(1.0)
    x[0] *= 3.0
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2.0
    return out


def scatter_then_scale(out: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    hl.store(out, [index], torch.ones(index.size(0)))
    out.mul_(5.0)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 6, 33])
def test_a_host_in_place_update_is_applied_once_on_the_first_call_and_after(mode, size):
    kernel = tessera.kernel(bump_then_copy, mode=mode)
    for _ in range(2):
        x = torch.randn(size)
        expected_x = x + 1.0
        expected_x[0] *= 3.0
        out = kernel(x, torch.empty(size))
        torch.testing.assert_close(x, expected_x)
        torch.testing.assert_close(out, expected_x * 2.0)


@pytest.mark.parametrize("mode", MODES)
def test_a_host_store_and_scale_without_tile_loops_run_once(mode):
    kernel = tessera.kernel(scatter_then_scale, mode=mode)
    out = torch.zeros(5)
    kernel(out, torch.tensor([1, 3]))
    torch.testing.assert_close(out, torch.tensor([0.0, 5.0, 0.0, 5.0, 0.0]))


def test_a_plan_leaves_the_arguments_as_they_were():
    x = torch.zeros(4)
    plan = tessera.kernel(bump_then_copy, mode="interpret").bind((x, torch.empty(4))).plan()
    assert plan.launches  # the launch was recorded
    torch.testing.assert_close(x, torch.zeros(4))
