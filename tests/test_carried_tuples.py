"""Issue 15: tuples and lists of tile values carried through an inner loop (Helion kernels keep
several accumulators in one tuple), in every mode against torch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def sum_and_max(x: T) -> tuple[T, T]:
    sums = torch.empty(x.size(0), device=x.device)
    maxima = torch.empty(x.size(0), device=x.device)
    for tile_m in hl.tile(x.size(0)):
        state = (hl.zeros([tile_m]), hl.full([tile_m], float("-inf")))
        for tile_k in hl.tile(x.size(1)):
            total, best = state
            state = (total + x[tile_m, tile_k].sum(1), torch.maximum(best, x[tile_m, tile_k].amax(1)))
        sums[tile_m], maxima[tile_m] = state
    return sums, maxima


def list_of_three(x: T) -> T:
    out = torch.empty(x.size(0), device=x.device)
    for tile_m in hl.tile(x.size(0)):
        powers = [hl.zeros([tile_m]), hl.zeros([tile_m]), 0.0]
        for tile_k in hl.tile(x.size(1)):
            v = x[tile_m, tile_k]
            powers = [powers[0] + v.sum(1), powers[1] + (v * v).sum(1), powers[2]]
        out[tile_m] = powers[0] + powers[1] + powers[2]
    return out


def shrinking(x: T) -> T:
    out = torch.empty(x.size(0), device=x.device)
    for tile_m in hl.tile(x.size(0)):
        state = (hl.zeros([tile_m]), hl.zeros([tile_m]))
        for tile_k in hl.tile(x.size(1)):  # line: shrink
            state = (state[0] + x[tile_m, tile_k].sum(1),)
        out[tile_m] = state[0]
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1)], ids=str)
def test_a_carried_tuple(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape)
    for mode in _modes(device):
        config = tessera.Config(block_sizes=[4, 16])
        sums, maxima = tessera.kernel(sum_and_max, mode=mode, config=config)(x.to(device))
        torch.testing.assert_close(sums.cpu(), x.sum(1), rtol=1e-5, atol=1e-5, msg=lambda text: f"{mode}: {text}")
        torch.testing.assert_close(maxima.cpu(), x.amax(1), msg=lambda text: f"{mode}: {text}")
        result = tessera.kernel(list_of_three, mode=mode, config=config)(x.to(device))
        torch.testing.assert_close(result.cpu(), x.sum(1) + (x * x).sum(1), rtol=1e-5, atol=1e-5)


def test_a_carried_tuple_changing_length_is_refused_with_its_line() -> None:
    with pytest.raises(exc.ShapeMismatchError, match="tuple of 2 values holds 1 after an iteration") as info:
        tessera.kernel(shrinking, mode="interpret", config=tessera.Config(block_sizes=[4, 16]))(torch.randn(3, 5))
    assert "# line: shrink" in str(info.value)
