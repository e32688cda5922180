"""Issue 15: indexing and broadcasting as Helion's unit tests use them, in eager and interpret
(compiled: same code), against torch at shapes with size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")
T = torch.Tensor


def _run(fn, config, *args, modes=MODES):
    return {mode: tessera.kernel(fn, mode=mode, config=config)(*args) for mode in modes}


# -- a tile reading a dimension of size 1 broadcasts its one element ---------------------------
def add_size_one_biases(x: T, rows: T, cols: T) -> T:
    out = torch.empty_like(x)
    for tile_a, tile_b, tile_c in hl.tile(x.size()):
        out[tile_a, tile_b, tile_c] = x[tile_a, tile_b, tile_c] + rows[tile_a, tile_b, tile_c] \
            + cols[tile_a, tile_b, tile_c]
    return out


@pytest.mark.parametrize("shape", [(16, 24, 32), (5, 3, 7), (1, 1, 1), (2, 1, 9)])
def test_tile_over_size_one_dim_broadcasts(shape: tuple[int, int, int]) -> None:
    x = torch.randn(shape)
    rows, cols = torch.randn(1, *shape[1:]), torch.randn(shape[0], 1, shape[2])
    for mode, result in _run(add_size_one_biases, tessera.Config(block_sizes=[4, 2, 8]), x, rows, cols).items():
        torch.testing.assert_close(result, x + rows + cols, msg=lambda m: f"{mode}: {m}")


def masked_copy(x: T, mask: T) -> T:
    out = torch.zeros_like(x)
    for tile_a, tile_b, tile_c in hl.tile(x.size()):
        out[tile_a, tile_b, tile_c] = hl.load(x, [tile_a, tile_b, tile_c], extra_mask=mask[tile_a, tile_b, tile_c])
    return out


@pytest.mark.parametrize("mask_shape", [(1, 5, 1), (7, 1, 9), (7, 5, 9)])
def test_size_one_extra_mask_broadcasts(mask_shape: tuple[int, int, int]) -> None:
    x = torch.randn(7, 5, 9)
    mask = torch.rand(mask_shape) > 0.5
    for mode, result in _run(masked_copy, tessera.Config(block_sizes=[4, 4, 8]), x, mask).items():
        torch.testing.assert_close(result, torch.where(mask, x, 0), msg=lambda m: f"{mode}: {m}")


def store_into_size_one(x: T, out: T) -> T:
    for tile_a, tile_b in hl.tile(x.size()):
        out[tile_a, tile_b] = x[tile_a, tile_b]
    return out


def test_tile_storing_past_size_one_dim_is_an_error() -> None:
    # only reads broadcast: a store past a dimension of size 1 stays a located error
    for mode in MODES:
        with pytest.raises(tessera.exc.IndexingError):
            tessera.kernel(store_into_size_one, mode=mode, config=tessera.Config(block_sizes=[4, 4]))(
                torch.randn(3, 5), torch.empty(1, 5))
