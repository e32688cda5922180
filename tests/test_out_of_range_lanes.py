"""An index tensor's out-of-range lanes (an offset past a jagged batch's end, say) read 0 and write
nothing in every mode, so a kernel that drops those lanes later (Helion's jagged attention:
`torch.where(tile.index < length, scores, 0)`) gives the same answer in eager and generated code;
nothing outside a tensor is ever read or written. TESSERA_CHECK_INDICES reports them instead."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import settings

MODES = ("eager", "interpret")


def _jagged_row_sums(mode: str):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[1, 4]))
    def row_sums(values: torch.Tensor, offsets: torch.Tensor, longest: int) -> torch.Tensor:
        out = torch.zeros(offsets.size(0) - 1, dtype=values.dtype, device=values.device)
        for tile_b, tile_r in hl.tile([offsets.size(0) - 1, longest]):
            start = offsets[tile_b.begin]
            length = offsets[tile_b.begin + 1] - start
            rows = values[tile_r.index + start]  # past the last batch's end for its tail lanes
            kept = torch.where(tile_r.index < length, rows, 0.0)
            hl.atomic_add(out, [tile_b.begin], kept.sum())
        return out
    return row_sums


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lengths", [[1], [3, 5], [4, 0, 7], [2, 9, 1]])
def test_a_jagged_gather_past_the_end_in_lanes_dropped_later_matches_torch(mode, lengths):
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    values = torch.randn(int(offsets[-1]))
    expected = torch.stack([values[a:b].sum() for a, b in zip(offsets[:-1], offsets[1:])])
    result = _jagged_row_sums(mode)(values, offsets, max(lengths) + 3)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


def _scatter(mode: str):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4]))
    def scatter(values: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(index.size(0)):
            out[index[tile]] = values[tile]
            hl.atomic_max(out, [index[tile] + 1], values[tile])
        return out
    return scatter


def _gather(mode: str):
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4]))
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = x[index[tile]] + 1.0
        return out
    return gather


def test_out_of_range_lanes_read_zero_and_write_nothing_alike_in_every_mode():
    x = torch.arange(1.0, 7.0)
    index = torch.tensor([0, 6, -7, 5, 2, 40, -1])
    results = {mode: _gather(mode)(x, index) for mode in MODES}
    torch.testing.assert_close(results["eager"], torch.tensor([2.0, 1.0, 1.0, 7.0, 4.0, 1.0, 7.0]))
    torch.testing.assert_close(results["interpret"], results["eager"])
    values, positions = torch.tensor([5.0, 6.0, 7.0]), torch.tensor([1, 9, 3])
    stored = {mode: _scatter(mode)(values, positions, torch.zeros(6)) for mode in MODES}
    torch.testing.assert_close(stored["eager"], torch.tensor([0.0, 5.0, 5.0, 7.0, 7.0, 0.0]))
    torch.testing.assert_close(stored["interpret"], stored["eager"])


@pytest.mark.parametrize("mode", MODES)
def test_checked_indices_report_an_out_of_range_lane_in_every_mode(mode):
    kernel = _gather(mode)
    try:
        with settings.override(check_indices=True), pytest.raises(tessera.exc.IndexingError) as caught:
            kernel(torch.arange(6.0), torch.tensor([0, 6]))
    finally:
        kernel.reset()
    assert "test_out_of_range_lanes.py" in str(caught.value)
