"""Behaviours Helion's own unit tests rely on (issue 15, run through `benchmarks/helion_tests.py`):
each test here is Tessera's own statement of one behaviour a Helion user meets, in eager and
interpret modes against PyTorch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (16, 3)])
def test_one_block_size_applies_to_every_dimension_of_a_multi_dim_tile(mode, shape):
    @tessera.kernel(mode=mode)
    def scale(x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n], block_size=2):
            out[tile_m, tile_n] = x[tile_m, tile_n] * 2.0 + tile_n.block_size
        return out

    x = torch.randn(shape)
    torch.testing.assert_close(scale(x), x * 2.0 + 2)


def test_block_sizes_that_match_neither_one_nor_every_dimension_are_refused():
    @tessera.kernel(mode="eager")
    def three(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(), block_size=[2, 4]):
            out[tile] = x[tile]
        return out

    with pytest.raises(tessera.exc.TesseraError, match="2 block sizes for 3 dimensions"):
        three(torch.zeros(2, 3, 4))
