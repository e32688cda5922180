"""torch's factories called with plain int sizes by code the kernel's rewrite does not see (a
helper function, a lambda passed in) make tile values inside a tile loop, as the same call written
in the loop body does, in every mode (Helion's tensor-factory specialization tests)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def _zeros_row(width: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(width, dtype=dtype, device="cpu")


FACTORIES = {
    "zeros": _zeros_row,
    "ones": lambda width, dtype: torch.ones(width, dtype=dtype) - 1,
    "empty": lambda width, dtype: torch.empty(width, dtype=dtype) * 0,
    "full": lambda width, dtype: torch.full([width], 2.0, dtype=dtype) - 2,
    "arange": lambda width, dtype: torch.arange(width).to(dtype) * 0,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("rows", [1, 7, 32])
def test_a_factory_in_a_helper_with_a_specialized_width_makes_a_carried_tile_value(mode, name, rows):
    factory = FACTORIES[name]

    @tessera.kernel(mode=mode)
    def column_sums(x: torch.Tensor) -> torch.Tensor:
        width = hl.specialize(x.size(1))
        block = hl.register_block_size(x.size(0))
        partial = x.new_empty([(x.size(0) + block - 1) // block, width], dtype=torch.float32)
        for outer in hl.tile(x.size(0), block_size=block):
            acc = factory(width, torch.float32)
            for inner in hl.tile(outer.begin, outer.end):
                acc += x[inner, :].to(torch.float32).sum(0)
            partial[outer.id, :] = acc
        return partial.sum(0)

    x = torch.randn(rows, 6)
    torch.testing.assert_close(column_sums(x), x.sum(0), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_a_helper_factory_outside_tile_loops_stays_a_host_tensor(mode):
    @tessera.kernel(mode=mode)
    def shifted(x: torch.Tensor) -> torch.Tensor:
        offset = _zeros_row(x.size(0), x.dtype) + 1.0  # host code: a tensor of the call
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + offset[tile]
        return out

    x = torch.randn(5)
    torch.testing.assert_close(shifted(x), x + 1.0)
