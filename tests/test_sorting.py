"""`torch.sort` / `torch.topk` of tile values (issue 15): values and indices as torch's stable sort
gives them, padding lanes never in the result, in every mode."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
CONFIG = tessera.Config(block_sizes=[4])


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def sort_rows(x: T, descending: bool) -> tuple[T, T]:
    values = torch.empty_like(x)
    indices = torch.empty(x.shape, dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        values[tile, :], indices[tile, :] = torch.sort(x[tile, :], dim=1, descending=descending)
    return values, indices


def top_four(x: T, largest: bool) -> tuple[T, T]:
    values = torch.empty(x.size(0), 4, dtype=x.dtype, device=x.device)
    indices = torch.empty(x.size(0), 4, dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        best = x[tile, :].topk(4, dim=-1, largest=largest)
        values[tile, :] = best.values
        indices[tile, :] = best.indices
    return values, indices


def sort_columns(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(1)):
        out[:, tile] = torch.sort(x[:, tile], dim=0).values
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(5, 13), (1, 4), (3, 16)], ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_gives_torchs_values_and_indices(dtype: torch.dtype, shape: tuple[int, int], descending: bool,
                                              device: torch.device) -> None:
    x = (torch.randn(shape) * 100).to(dtype)
    expected = torch.sort(x, dim=1, descending=descending, stable=True)
    for mode in _modes(device):
        values, indices = tessera.kernel(sort_rows, mode=mode, config=CONFIG)(x.to(device), descending)
        assert torch.equal(values.cpu(), expected.values), mode
        assert torch.equal(indices.cpu(), expected.indices), mode


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_a_row_with_a_tail(largest: bool, device: torch.device) -> None:
    x = torch.randn(6, 13) - 5  # below the padding's zeros
    expected = torch.topk(x, 4, dim=1, largest=largest)
    for mode in _modes(device):
        values, indices = tessera.kernel(top_four, mode=mode, config=CONFIG)(x.to(device), largest)
        assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices), mode


def test_sort_along_the_first_dimension(device: torch.device) -> None:
    x = torch.randn(7, 10)
    for mode in _modes(device):
        result = tessera.kernel(sort_columns, mode=mode, config=CONFIG)(x.to(device))
        assert torch.equal(result.cpu(), torch.sort(x, dim=0).values), mode


def test_equal_values_keep_their_order(device: torch.device) -> None:
    x = torch.tensor([[3.0, 1.0, 3.0, 1.0, -0.5]])
    for mode in _modes(device):
        values, indices = tessera.kernel(sort_rows, mode=mode, config=CONFIG)(x.to(device), True)
        assert indices.cpu().tolist() == [[0, 2, 1, 3, 4]], mode


def test_sorting_int64_is_refused_with_a_way_around() -> None:
    with pytest.raises(exc.DtypeError, match="convert to float32 or int32"):
        tessera.kernel(sort_rows, mode="interpret", config=CONFIG)(torch.zeros(2, 4, dtype=torch.int64), False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nans_with_the_sign_bit_set_sort_as_the_largest_values(dtype: torch.dtype, device: torch.device) -> None:
    # torch's CUDA radix sort put -NaN before the numbers in rows of 33+ (pytorch#190781): eager
    # mode on the H100 took it for the largest value's place in topk / kthvalue (found by the op fuzz)
    x = torch.randn(5, 37, device=device).to(dtype)
    x[1, 3], x[2, 30], x[3, 0], x[3, 36] = -float("nan"), float("nan"), -float("nan"), -float("nan")
    reference = torch.sort(x.cpu().float(), dim=1, descending=True, stable=True)
    for mode in _modes(device):
        values, indices = tessera.kernel(sort_rows, mode=mode, config=CONFIG)(x, True)
        torch.testing.assert_close(values.cpu().float(), reference.values, equal_nan=True, msg=mode)
        assert torch.equal(indices.cpu(), reference.indices), mode
