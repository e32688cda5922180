"""`torch.mean` over a tile dimension divides by the tile's valid lanes (the tail tile has fewer),
and `hl.specialize(n)` as a statement makes n a compile-time constant (Helion's in-place form);
eager and interpret modes against PyTorch, at size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor
MODES = ("eager", "interpret")


def center_by_tile_mean(x: T) -> T:
    out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
    for tile_n in hl.tile(x.size(0)):
        values = x[tile_n].to(torch.float32)
        out[tile_n] = values - torch.mean(values, dim=-1, keepdim=True)
    return out


def sum_of_tile_means(x: T) -> T:
    out = torch.empty([x.size(0)], device=x.device)
    for tile_m in hl.tile(x.size(0)):
        acc = hl.zeros([tile_m])
        for tile_n in hl.tile(x.size(1)):
            acc = acc + x[tile_m, tile_n].mean(1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 32, 70])
def test_mean_over_a_tile_counts_its_valid_lanes(mode, size):
    x = torch.randn(size, dtype=torch.float16)
    kernel = tessera.kernel(center_by_tile_mean, mode=mode, config=tessera.Config(block_sizes=[32]))
    expected = torch.cat([part - part.mean() for part in x.float().split(32)])
    torch.testing.assert_close(kernel(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 19), (9, 16)])
def test_mean_over_an_inner_loop_tile(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(sum_of_tile_means, mode=mode, config=tessera.Config(block_sizes=[4, 8]))
    expected = sum(part.mean(1) for part in x.split(8, dim=1))
    torch.testing.assert_close(kernel(x), expected, atol=1e-5, rtol=1e-5)


def add_a_row_of_ones(x: T) -> T:
    m, n = x.size()
    out = torch.empty([m, n], device=x.device)
    hl.specialize(n)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :] + hl.full([n], 1.0, x.dtype)  # n must be a compile-time size
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 64)])
def test_specialize_as_a_statement_makes_the_name_a_constant(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(add_a_row_of_ones, mode=mode)
    torch.testing.assert_close(kernel(x), x + 1)
    torch.testing.assert_close(kernel(x[:, :1].contiguous()), x[:, :1] + 1)  # another n: another variant


def row_statistics(x: T) -> tuple[T, T, T]:
    deviation = torch.empty([x.size(0)], device=x.device)
    variance = torch.empty([x.size(0), 1], device=x.device)
    mean = torch.empty([x.size(0), 1], device=x.device)
    for tile in hl.tile(x.size(0)):
        deviation[tile] = torch.std(x[tile, :], dim=1)
        variance[tile, :], mean[tile, :] = torch.var_mean(x[tile, :], dim=1, keepdim=True, correction=0)
    return deviation, variance, mean


@pytest.mark.parametrize("mode", MODES)
def test_std_and_mean_of_values_near_the_float32_limit_match_torch(mode):
    # a sum of the values, or the squares of their deviations, overflows; torch's results do not
    x = torch.tensor([[3e38, 3e38, 3e38, 1.0], [1.0, 2.0, 4.0, 8.0], [2e19, -2e19, 0.0, 1.0]])
    deviation, variance, mean = tessera.kernel(row_statistics, mode=mode, config=tessera.Config(block_sizes=[2]))(x)
    torch.testing.assert_close(deviation, torch.std(x, dim=1))
    expected_variance, expected_mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
    torch.testing.assert_close(mean, expected_mean)
    # (a variance beyond ~1e38 is inf in float32 either way; one whose squared deviations overflow
    # though it does not, like row 2's, is inf here: var keeps layer norm's cost, std is scaled)
    torch.testing.assert_close(variance[:2], expected_variance[:2])
