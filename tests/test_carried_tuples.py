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


# -- tuples and lists of tensors passed to a kernel: each tensor a kernel argument ----------------

def weighted_sum(tensors: list[T], scales: tuple[float, ...], outs: tuple[T, ...]) -> T:
    total = torch.zeros_like(tensors[0])
    for tile in hl.tile(total.size(0)):
        acc = torch.zeros_like(total[tile])
        for i, (t, s) in enumerate(zip(tensors, scales)):
            acc = acc + t[tile] * s + i
        total[tile] = acc
        outs[0][tile] = acc * 2.0  # a store into a tensor of a tuple
    return total


@pytest.mark.parametrize("size", [1, 7, 33])
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("as_tuple", [False, True])
def test_a_list_or_tuple_of_tensors_is_read_and_written_in_a_tile_loop(size, count, as_tuple, device) -> None:
    tensors = [torch.randn(size, device=device) for _ in range(count)]
    scales = tuple(float(i + 1) for i in range(count))
    expected = sum(t * s + i for i, (t, s) in enumerate(zip(tensors, scales)))
    for mode in _modes(device):
        kernel = tessera.kernel(weighted_sum, mode=mode)
        outs = (torch.empty(size, device=device),)
        result = kernel(tuple(tensors) if as_tuple else tensors, scales, outs)
        torch.testing.assert_close(result, expected, msg=mode)
        torch.testing.assert_close(outs[0], expected * 2.0, msg=mode)


def nested_pairs(pairs: tuple[tuple[T, T], ...], x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        acc = x[tile]
        for first, second in pairs:
            acc = acc + first[tile] * second[tile]
        out[tile] = acc
    return out


def test_nested_tuples_of_tensors_and_a_changed_length_recompile_correctly(device) -> None:
    x = torch.randn(10, device=device)
    for mode in _modes(device):
        kernel = tessera.kernel(nested_pairs, mode=mode)
        for count in (1, 2, 1):
            pairs = tuple((torch.randn(10, device=device), torch.randn(10, device=device)) for _ in range(count))
            expected = x + sum(a * b for a, b in pairs)
            torch.testing.assert_close(kernel(pairs, x), expected, msg=f"{mode} {count}")
