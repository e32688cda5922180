"""`hl.jagged_tile` (issue 15): a loop to the largest of per-lane ends whose lanes past their own
end are left out of every load, store and reduction; eager (which follows the tiles of each value's
dims: language/eager_lanes.py), interpret and compiled modes, against torch at tails and empty rows."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
BLOCKS = ([2, 2], [4, 8], [8, 4])
LENGTHS = torch.tensor([3, 0, 7, 1, 5])


MODES = ("eager", "traced")


def _mode(mode: str, device: torch.device) -> str:
    """eager, or the traced mode of the device (compiled on a GPU, interpret on CPU)."""
    return mode if mode == "eager" else "compiled" if device.type == "cuda" else "interpret"


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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("blocks", BLOCKS, ids=str)
def test_reductions_over_a_jagged_tile_leave_out_lanes_past_each_end(blocks: list[int], mode: str,
                                                                     device: torch.device) -> None:
    x = torch.randn(5, 8) - 3  # below the zeros masked lanes read
    inside = torch.arange(8)[None, :] < LENGTHS[:, None]
    sums, maxima = tessera.kernel(row_sums_and_maxima, mode=_mode(mode, device),
                                  config=tessera.Config(block_sizes=blocks))(x.to(device), LENGTHS.to(device))
    torch.testing.assert_close(sums.cpu(), torch.where(inside, x, 0).sum(1))
    torch.testing.assert_close(maxima.cpu(), torch.where(inside, x, float("-inf")).amax(1))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("blocks", BLOCKS, ids=str)
def test_packed_rows_gathered_through_the_jagged_index(blocks: list[int], mode: str, device: torch.device) -> None:
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), LENGTHS.cumsum(0)])
    data = torch.randn(int(offsets[-1]))
    expected = torch.stack([data[offsets[i]:offsets[i + 1]].sum() for i in range(len(LENGTHS))])
    result = tessera.kernel(packed_sums, mode=_mode(mode, device), config=tessera.Config(block_sizes=blocks))(
        data.to(device), offsets.to(device))
    torch.testing.assert_close(result.cpu(), expected)


@pytest.mark.parametrize("mode", MODES)
def test_stores_over_a_jagged_tile_skip_lanes_past_each_end(mode: str, device: torch.device) -> None:
    x = torch.randn(5, 8)
    inside = torch.arange(8)[None, :] < LENGTHS[:, None]
    out = torch.full((5, 8), -7.0, device=device)
    tessera.kernel(jagged_copy, mode=_mode(mode, device), config=tessera.Config(block_sizes=[4, 4]))(
        x.to(device), LENGTHS.to(device), out)
    torch.testing.assert_close(out.cpu(), torch.where(inside, x + 1, -7.0))


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
    with pytest.raises(exc.InvalidJaggedTileUsage, match="outermost loop"):
        tessera.kernel(outermost, mode="interpret")(torch.tensor([3, 1]))
    for mode in ("eager", "interpret"):
        with pytest.raises(exc.InvalidJaggedTileUsage, match="without the tiles its ends are over") as info:
            tessera.kernel(without_parent, mode=mode)(torch.randn(8), LENGTHS, torch.zeros(8))
        assert "# line: parent" in str(info.value)


def scalar_bound(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        for tile_n in hl.jagged_tile(x.size(1)):  # line: scalar
            out[tile_m, tile_n] = x[tile_m, tile_n]
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_a_jagged_tile_over_a_scalar_bound_is_refused_at_its_line(mode: str) -> None:
    with pytest.raises(exc.InvalidJaggedTileUsage, match="tensor of per-lane ends") as info:
        tessera.kernel(scalar_bound, mode=mode)(torch.randn(4, 5))
    assert "# line: scalar" in str(info.value)


def jagged_row_softmax(x: T, lengths: T, out: T) -> T:
    for tile_b in hl.tile(lengths.size(0)):
        ends = lengths[tile_b]
        best = hl.full([tile_b], float("-inf"), dtype=torch.float32)
        total = hl.zeros([tile_b], dtype=torch.float32)
        for tile_k in hl.jagged_tile(ends):
            values = x[tile_b, tile_k]
            new_best = torch.maximum(best, values.amax(dim=1))
            total = total * torch.exp(best - new_best) + torch.exp(values - new_best[:, None]).sum(dim=1)
            best = new_best
        for tile_k in hl.jagged_tile(ends):
            out[tile_b, tile_k] = torch.exp(x[tile_b, tile_k] - best[:, None]) / total[:, None]
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("blocks", ([2, 2, 2], [4, 8, 2], [8, 1, 4]), ids=str)
def test_an_online_softmax_over_a_jagged_tile(blocks: list[int], mode: str, device: torch.device) -> None:
    lengths = torch.tensor([3, 1, 7, 1, 5, 6, 2])  # every row has one value: its softmax is defined
    x = torch.randn(7, 9) + 4  # above the zeros lanes past an end read
    inside = torch.arange(9)[None, :] < lengths[:, None]
    out = torch.full((7, 9), -7.0, device=device)
    tessera.kernel(jagged_row_softmax, mode=_mode(mode, device), config=tessera.Config(block_sizes=blocks))(
        x.to(device), lengths.to(device), out)
    expected = torch.where(inside, torch.softmax(torch.where(inside, x, float("-inf")), dim=1), -7.0)
    torch.testing.assert_close(out.cpu(), expected)


def nested_jagged_sums(x: T, rows: T, columns: T, out: T) -> T:
    for tile_b in hl.tile(rows.size(0)):
        row_ends = rows[tile_b]
        for tile_m in hl.jagged_tile(columns[tile_b]):
            total = hl.zeros([tile_b, tile_m], dtype=x.dtype)
            for tile_k in hl.jagged_tile(row_ends):
                total = total + x[tile_b, tile_k, tile_m].sum(dim=1)
            out[tile_b, tile_m] = total
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("blocks", ([1, 1, 1], [2, 4, 2], [8, 2, 4]), ids=str)
def test_jagged_tiles_nested_in_jagged_tiles(blocks: list[int], mode: str, device: torch.device) -> None:
    rows, columns = LENGTHS, torch.tensor([2, 5, 0, 6, 1])
    x = torch.randn(5, 7, 6)
    out = torch.full((5, 6), -7.0, device=device)
    tessera.kernel(nested_jagged_sums, mode=_mode(mode, device), config=tessera.Config(block_sizes=blocks))(
        x.to(device), rows.to(device), columns.to(device), out)
    row_inside = torch.arange(7)[None, :, None] < rows[:, None, None]
    column_inside = torch.arange(6)[None, :] < columns[:, None]
    expected = torch.where(column_inside, torch.where(row_inside, x, 0).sum(1), -7.0)
    torch.testing.assert_close(out.cpu(), expected)


def jagged_rows_times_matrix(x: T, lengths: T, w: T, out: T) -> T:
    for tile_b in hl.tile(lengths.size(0)):
        for tile_k in hl.jagged_tile(lengths[tile_b]):
            for tile_n in hl.tile(w.size(2)):
                product = torch.matmul(x[tile_b, tile_k, :], w[tile_b, :, tile_n])
                out[tile_b, tile_k, tile_n] = product + 1
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_batched_product_over_jagged_rows(mode: str, device: torch.device) -> None:
    x, w = torch.randn(5, 7, 16), torch.randn(5, 16, 5)
    out = torch.full((5, 7, 5), -7.0, device=device)
    tessera.kernel(jagged_rows_times_matrix, mode=_mode(mode, device), config=tessera.Config(block_sizes=[2, 4, 4]),
                   dot_precision="ieee")(
        x.to(device), LENGTHS.to(device), w.to(device), out)
    inside = torch.arange(7)[None, :, None] < LENGTHS[:, None, None]
    torch.testing.assert_close(out.cpu(), torch.where(inside, torch.bmm(x, w) + 1, -7.0), rtol=1e-4, atol=1e-4)


def jagged_mean(x: T, lengths: T, out: T) -> T:
    for tile_b in hl.tile(lengths.size(0)):
        for tile_k in hl.jagged_tile(lengths[tile_b]):
            out[tile_b] = x[tile_b, tile_k].softmax(dim=1).sum(dim=1)  # line: softmax
    return out


def test_eager_refuses_reductions_over_a_jagged_tile_it_cannot_mask() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="over an hl.jagged_tile dim in eager mode") as info:
        tessera.kernel(jagged_mean, mode="eager")(torch.randn(5, 8), LENGTHS, torch.zeros(5))
    assert "# line: softmax" in str(info.value)


def _doubled_by_a_helper_loop(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):  # line: helper-loop
        out[tile] = x[tile] * 2
    return out


def calls_a_helper_with_a_tile_loop(x: T) -> T:
    return _doubled_by_a_helper_loop(x)


@pytest.mark.parametrize("size", [1, 37])
def test_a_tile_loop_in_a_called_function_is_refused_not_run_on_the_host(size: int) -> None:
    # its tiles would index host tensors as ints: a wrong result, so compiled modes refuse it
    with pytest.raises(exc.UnsupportedOperationError, match="in a function the kernel calls") as info:
        tessera.kernel(calls_a_helper_with_a_tile_loop, mode="interpret")(torch.randn(size))
    assert "# line: helper-loop" in str(info.value)
    x = torch.randn(size)  # eager mode runs every loop as Python: the helper's loop too
    torch.testing.assert_close(tessera.kernel(calls_a_helper_with_a_tile_loop, mode="eager")(x), x * 2)
