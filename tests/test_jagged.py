"""`hl.jagged_tile` (issue 15): a loop to the largest of per-lane ends whose lanes past their own
end are left out of every load, store and reduction; compiled and interpret modes (eager mode
refuses it, located, with the dense spelling), against torch at tails and empty rows."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
BLOCKS = ([2, 2], [4, 8], [8, 4])
LENGTHS = torch.tensor([3, 0, 7, 1, 5])


def _compiled_mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def row_sums_and_maxima(x: T, lengths: T) -> tuple[T, T]:
    sums = torch.zeros(lengths.size(0), dtype=x.dtype, device=x.device)
    maxima = torch.zeros(lengths.size(0), dtype=x.dtype, device=x.device)
    for tile_b in hl.tile(lengths.size(0)):
        ends = lengths[tile_b]
        total = hl.zeros([tile_b], dtype=x.dtype)
        best = hl.full([tile_b], float("-inf"), dtype=x.dtype)
        for tile_k in hl.jagged_tile(ends):
            values = x[tile_b, tile_k]
            total = total + values.sum(dim=1)
            best = torch.maximum(best, values.amax(dim=1))
        sums[tile_b] = total
        maxima[tile_b] = best
    return sums, maxima


def packed_sums(data: T, offsets: T) -> T:
    out = torch.zeros(offsets.size(0) - 1, dtype=data.dtype, device=data.device)
    for tile_b in hl.tile(offsets.size(0) - 1):
        starts = offsets[tile_b]
        lengths = offsets[tile_b.index + 1] - starts
        total = hl.zeros([tile_b], dtype=data.dtype)
        for tile_k in hl.jagged_tile(lengths):
            total = total + data[starts[:, None] + tile_k.index[None, :]].sum(dim=1)
        out[tile_b] = total
    return out


def jagged_copy(x: T, lengths: T, out: T) -> T:
    for tile_b in hl.tile(lengths.size(0)):
        for tile_k in hl.jagged_tile(lengths[tile_b]):
            out[tile_b, tile_k] = x[tile_b, tile_k] + 1
    return out


@pytest.mark.parametrize("blocks", BLOCKS, ids=str)
def test_reductions_over_a_jagged_tile_leave_out_lanes_past_each_end(blocks: list[int],
                                                                     device: torch.device) -> None:
    x = torch.randn(5, 8) - 3  # below the zeros masked lanes read
    inside = torch.arange(8)[None, :] < LENGTHS[:, None]
    sums, maxima = tessera.kernel(row_sums_and_maxima, mode=_compiled_mode(device),
                                  config=tessera.Config(block_sizes=blocks))(x.to(device), LENGTHS.to(device))
    torch.testing.assert_close(sums.cpu(), torch.where(inside, x, 0).sum(1))
    torch.testing.assert_close(maxima.cpu(), torch.where(inside, x, float("-inf")).amax(1))


@pytest.mark.parametrize("blocks", BLOCKS, ids=str)
def test_packed_rows_gathered_through_the_jagged_index(blocks: list[int], device: torch.device) -> None:
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), LENGTHS.cumsum(0)])
    data = torch.randn(int(offsets[-1]))
    expected = torch.stack([data[offsets[i]:offsets[i + 1]].sum() for i in range(len(LENGTHS))])
    result = tessera.kernel(packed_sums, mode=_compiled_mode(device), config=tessera.Config(block_sizes=blocks))(
        data.to(device), offsets.to(device))
    torch.testing.assert_close(result.cpu(), expected)


def test_stores_over_a_jagged_tile_skip_lanes_past_each_end(device: torch.device) -> None:
    x = torch.randn(5, 8)
    inside = torch.arange(8)[None, :] < LENGTHS[:, None]
    out = torch.full((5, 8), -7.0, device=device)
    tessera.kernel(jagged_copy, mode=_compiled_mode(device), config=tessera.Config(block_sizes=[4, 4]))(
        x.to(device), LENGTHS.to(device), out)
    torch.testing.assert_close(out.cpu(), torch.where(inside, x + 1, -7.0))


def test_eager_mode_refuses_a_jagged_tile_with_the_dense_spelling() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="interpret and compiled modes only"):
        tessera.kernel(packed_sums, mode="eager")(torch.randn(16), torch.tensor([0, 3, 16]))


def outermost(x: T) -> T:
    for tile in hl.jagged_tile(x):
        x[tile] = 0
    return x


def without_parent(x: T, lengths: T, out: T) -> T:
    for tile_b in hl.tile(lengths.size(0)):
        for tile_k in hl.jagged_tile(lengths[tile_b]):
            out[tile_k] = x[tile_k]  # line: parent
    return out


def test_a_jagged_tile_needs_an_enclosing_loop_and_its_parent_tiles() -> None:
    with pytest.raises(exc.TesseraError):
        tessera.kernel(outermost, mode="interpret")(torch.tensor([3, 1]))
    with pytest.raises(exc.IndexingError, match="without the tiles its ends are over") as info:
        tessera.kernel(without_parent, mode="interpret")(torch.randn(8), LENGTHS, torch.zeros(8))
    assert "# line: parent" in str(info.value)
