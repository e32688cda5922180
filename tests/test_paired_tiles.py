"""A product may sum over two different tiles of one range (`p[tq, tk] @ v[tq, :]`, the shape of
Helion's nested-tile attention tests): eager mode multiplies whenever the two tiles have the same
size, and the compiled modes accept it exactly when that holds on every iteration."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def _scores_times_values(mode: str, block: int):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[2, block, block]))
    def kernel(q: torch.Tensor) -> torch.Tensor:
        batch, length, width = q.shape
        out = torch.zeros_like(q)
        for tile_b, tile_q in hl.tile([batch, length]):
            rows = q[tile_b, tile_q, :]
            for tile_k in hl.tile(length):
                scores = (rows @ q[tile_b, tile_k, :].transpose(-1, -2) > 0).float()  # [b, q, k]
                out[tile_b, tile_q, :] += torch.matmul(scores, q[tile_b, tile_q, :])  # k summed against q's lanes
        return out
    return kernel


def _reference(q: torch.Tensor, block: int) -> torch.Tensor:
    out = torch.zeros_like(q)
    length = q.shape[1]
    for qs in range(0, length, block):
        rows = q[:, qs:qs + block]
        for ks in range(0, length, block):
            scores = (rows @ q[:, ks:ks + block].transpose(-1, -2) > 0).float()
            out[:, qs:qs + block] += scores @ rows
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("length", [1, 5, 16, 32, 48])
def test_a_product_sums_two_tiles_of_one_range_when_every_iteration_pairs_their_lanes(mode, length):
    q = torch.randn(3, length, 8)
    torch.testing.assert_close(_scores_times_values(mode, 16)(q), _reference(q, 16), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_a_product_over_two_tiles_whose_tails_differ_is_refused(mode):
    q = torch.randn(2, 20, 8)  # the second tile of each loop has 4 lanes: 16 lanes meet 4
    with pytest.raises(tessera.exc.TesseraError) as caught:
        _scores_times_values(mode, 16)(q)
    assert "test_paired_tiles.py" in str(caught.value)


def test_one_compiled_variant_serves_lengths_with_no_tail_and_refuses_a_tail_later():
    kernel = _scores_times_values("interpret", 16)
    for length in (16, 64):
        q = torch.randn(2, length, 8)
        torch.testing.assert_close(kernel(q), _reference(q, 16), atol=1e-4, rtol=1e-4)
    with pytest.raises(tessera.exc.ShapeMismatchError, match="same lanes on every iteration"):
        kernel(torch.randn(2, 24, 8))


def _window_store(mode: str, extra_rows: int):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4]))
    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(x.shape[0] + extra_rows, x.shape[1], dtype=x.dtype, device=x.device)
        for tile in hl.tile(x.shape[0]):
            out[tile.begin:tile.begin + 4, :] = x[tile, :] * 2.0
        return out
    return kernel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows", [1, 3, 4, 6, 13])
def test_a_tile_value_fills_the_window_that_starts_at_its_tile_and_ends_with_the_dimension(mode, rows):
    x = torch.randn(rows, 3)
    torch.testing.assert_close(_window_store(mode, 0)(x), x * 2.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows", [4, 8, 16])
def test_a_tile_value_fills_a_longer_dimension_window_by_window_when_no_tile_is_short(mode, rows):
    x = torch.randn(rows, 5)
    expected = torch.cat([x * 2.0, torch.zeros(8, 5)])
    torch.testing.assert_close(_window_store(mode, 8)(x), expected)


@pytest.mark.parametrize("mode", MODES)
def test_a_short_tail_tile_facing_a_full_window_is_refused(mode):
    with pytest.raises(tessera.exc.TesseraError) as caught:
        _window_store(mode, 8)(torch.randn(6, 3))  # the last tile has 2 rows, its window 4
    assert "test_paired_tiles.py" in str(caught.value)


def test_a_compiled_window_store_is_reused_while_its_facts_hold_and_refuses_a_short_tail_later():
    kernel = _window_store("interpret", 8)
    for rows in (4, 12):
        x = torch.randn(rows, 2)
        torch.testing.assert_close(kernel(x), torch.cat([x * 2.0, torch.zeros(8, 2)]))
    with pytest.raises(tessera.exc.ShapeMismatchError):
        kernel(torch.randn(6, 2))


def _rows_into_whole_dim(mode: str):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4, 4]))
    def kernel(x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        out = torch.empty(rows, cols, dtype=x.dtype, device=x.device)
        for tile in hl.tile(cols):
            for row_tile in hl.tile(rows):
                out[:, tile] = x[row_tile, tile] * 2.0
        return out
    return kernel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows", [3, 4])
def test_a_tile_that_covers_a_whole_dim_in_one_iteration_fills_that_dims_slice(mode, rows):
    x = torch.randn(rows, 7)
    torch.testing.assert_close(_rows_into_whole_dim(mode)(x), x * 2.0)


@pytest.mark.parametrize("mode", MODES)
def test_a_tile_that_needs_two_iterations_for_a_whole_dim_is_refused(mode):
    with pytest.raises(tessera.exc.TesseraError) as caught:
        _rows_into_whole_dim(mode)(torch.randn(6, 7))
    assert "test_paired_tiles.py" in str(caught.value)
