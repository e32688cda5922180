"""Issue 15: Helion's function spellings `hl.tile_index/tile_begin/tile_end/tile_block_size/tile_id`
and `hl.subscript`, in every mode against torch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def describe_tiles(x: T) -> T:
    out = torch.zeros(x.size(0), 5, dtype=torch.int32, device=x.device)
    for tile in hl.tile(x.size(0), block_size=4):
        ones = hl.full([tile], 1, dtype=torch.int32)
        out[tile, 0] = hl.tile_index(tile)
        out[tile, 1] = ones * hl.tile_begin(tile)
        out[tile, 2] = ones * hl.tile_end(tile)
        out[tile, 3] = ones * hl.tile_block_size(tile)
        out[tile, 4] = ones * hl.tile_id(tile)
    return out


def outer_product(x: T, y: T) -> T:
    out = torch.empty(x.size(0), y.size(0), device=x.device)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = hl.subscript(x[tile_m], [slice(None), None]) * hl.subscript(y[tile_n], [None, slice(None)])
    return out


@pytest.mark.parametrize("rows", [1, 6, 8])
def test_tile_attribute_functions(rows: int, device: torch.device) -> None:
    index = torch.arange(rows)
    begin = index // 4 * 4
    expected = torch.stack([index, begin, torch.clamp(begin + 4, max=rows), torch.full_like(index, 4), index // 4], 1)
    for mode in _modes(device):
        result = tessera.kernel(describe_tiles, mode=mode)(torch.zeros(rows, device=device))
        assert result.cpu().tolist() == expected.int().tolist(), mode


def test_subscript_adds_dimensions(device: torch.device) -> None:
    x, y = torch.randn(5), torch.randn(7)
    for mode in _modes(device):
        result = tessera.kernel(outer_product, mode=mode, config=tessera.Config(block_sizes=[4, 4]))(
            x.to(device), y.to(device))
        torch.testing.assert_close(result.cpu(), x[:, None] * y[None, :])


def test_a_tile_function_of_a_non_tile_is_refused() -> None:
    def bad(x: T) -> T:
        for tile in hl.tile(x.size(0)):
            x[tile] = hl.tile_begin(3)
        return x
    with pytest.raises(exc.TesseraError, match="not a tile of a tile loop"):
        tessera.kernel(bad, mode="eager")(torch.zeros(3))
