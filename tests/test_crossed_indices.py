"""A subscript with 1-D index tensors over different tiles (`out[tile_m.index, tile_n.index]`,
`x[rows[t0], cols[t1]]`) gives each its own dim, as Helion does and as `hl.load` already did;
index tensors over one tile still pair up elementwise, as in torch. Same answer in every mode."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (8, 8), (9, 3)])
def test_a_store_through_two_tiles_index_vectors_writes_the_block(mode, shape):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4, 4]))
    def doubled(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            rows, cols = tile_m.index.to(torch.int64), tile_n.index.to(torch.int64)
            out[rows, cols] = x[tile_m, tile_n] * 2.0
        return out

    x = torch.randn(shape)
    torch.testing.assert_close(doubled(x), x * 2.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sizes", [(1, 1), (5, 5), (3, 6)])
def test_a_gather_by_row_and_column_lists_of_two_tiles_is_their_outer_product(mode, sizes):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4, 4]))
    def submatrix(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        out = torch.empty(rows.size(0), cols.size(0), dtype=x.dtype, device=x.device)
        for tile_r, tile_c in hl.tile([rows.size(0), cols.size(0)]):
            out[tile_r, tile_c] = x[rows[tile_r], cols[tile_c]]
        return out

    x = torch.randn(9, 7)
    rows, cols = torch.randint(0, 9, (sizes[0],)), torch.randint(0, 7, (sizes[1],))
    torch.testing.assert_close(submatrix(x, rows, cols), x[rows][:, cols])


@pytest.mark.parametrize("mode", MODES)
def test_index_tensors_over_one_tile_still_pair_up_as_in_torch(mode):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4]))
    def pairs(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        out = torch.empty(rows.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(rows.size(0)):
            out[tile] = x[rows[tile], cols[tile]]
        return out

    x = torch.randn(9, 7)
    rows, cols = torch.randint(0, 9, (6,)), torch.randint(0, 7, (6,))
    torch.testing.assert_close(pairs(x, rows, cols), x[rows, cols])
