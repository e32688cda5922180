"""Every bound is checked or masked at both ends, in every mode.

Eager mode (the specification) raises a located `IndexingError` for a tile or index outside a
tensor; the generated code proves the same by a guard (and raises the same error when this
call's host values break it) or masks the access, so nothing before or after a tensor is
ever read or written. Negative int indices count from the end, as in torch.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from marked_lines import marked_line


def _generated_mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _modes(device: torch.device) -> list[str]:
    return ["eager", _generated_mode(device)]


def _run(mode: str, kernel: Any, *args: Any) -> Any:
    with settings.override(mode=mode):
        return kernel(*args)


# -- tile loops that begin below 0 ---------------------------------------------------------------
@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def add_one_over_range(buf: torch.Tensor, begin: int, end: int) -> torch.Tensor:
    for tile in hl.tile(begin, end):
        buf[tile] = buf[tile] + 1.0
    return buf


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_tile_loop_with_a_negative_host_begin_raises_indexing_error(mode: str, device: torch.device) -> None:
    mode = _generated_mode(device) if mode == "generated" else mode
    guard = torch.zeros(32, device=device)
    buf = guard[8:24]
    with pytest.raises(exc.IndexingError, match="below 0"):
        _run(mode, add_one_over_range, buf, -2, 12)
    assert not guard.any(), "nothing may be written, before the tensor or inside it"


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_tile_loop_with_a_nonnegative_begin_still_runs_after_a_negative_one(mode: str, device: torch.device) -> None:
    mode = _generated_mode(device) if mode == "generated" else mode
    with pytest.raises(exc.IndexingError):
        _run(mode, add_one_over_range, torch.zeros(16, device=device), -2, 12)
    out = _run(mode, add_one_over_range, torch.zeros(16, device=device), 2, 12)
    expected = torch.zeros(16, device=device)
    expected[2:12] = 1.0
    assert torch.equal(out, expected)


@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def copy_rows_from_loaded_begins(values: torch.Tensor, begins: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for group in hl.grid(begins.size(0)):
        begin = hl.load(begins, [group])
        for tile in hl.tile(begin, begin + 4):
            out[tile] = values[tile] + 1.0
    return out


def test_a_loaded_negative_begin_is_masked_in_generated_code(device: torch.device) -> None:
    guard = torch.full((24,), 7.0, device=device)
    values, out = torch.arange(8.0, device=device), guard[8:16]
    begins = torch.tensor([-2], device=device)
    _run(_generated_mode(device), copy_rows_from_loaded_begins, values, begins, out)
    expected = torch.full((24,), 7.0, device=device)
    expected[8:10] = torch.tensor([1.0, 2.0])  # lanes -2 and -1 are masked, 0 and 1 written
    assert torch.equal(guard, expected)


def test_a_loaded_negative_begin_raises_indexing_error_in_eager_mode(device: torch.device) -> None:
    values, out = torch.arange(8.0, device=device), torch.zeros(8, device=device)
    with pytest.raises(exc.IndexingError, match="below 0"):
        _run("eager", copy_rows_from_loaded_begins, values, torch.tensor([-2], device=device), out)


def test_a_loaded_nonnegative_begin_matches_eager(device: torch.device) -> None:
    values, begins = torch.arange(8.0, device=device), torch.tensor([0, 4], device=device)
    results = [_run(mode, copy_rows_from_loaded_begins, values, begins, torch.zeros(8, device=device))
               for mode in _modes(device)]
    assert torch.equal(results[0], values + 1.0) and torch.equal(results[1], values + 1.0)


# -- int indices ---------------------------------------------------------------------------------
@tessera.kernel
def fill_last_column(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        x[tile, -1] = 1.0
    return x


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_a_literal_negative_index_counts_from_the_end(mode: str, device: torch.device) -> None:
    mode = _generated_mode(device) if mode == "generated" else mode
    out = _run(mode, fill_last_column, torch.zeros(3, 4, device=device))
    expected = torch.zeros(3, 4, device=device)
    expected[:, -1] = 1.0
    assert torch.equal(out, expected)


@tessera.kernel
def read_column(x: torch.Tensor, column: int) -> torch.Tensor:
    out = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, column]
    return out


@pytest.mark.parametrize("column", [0, 2, -1, -4])
def test_a_host_int_index_matches_torch_for_either_sign(column: int, device: torch.device) -> None:
    x = torch.arange(12.0, device=device).reshape(3, 4)
    for mode in _modes(device):
        assert torch.equal(_run(mode, read_column, x, column), x[:, column]), mode


@pytest.mark.parametrize("column", [4, -5])
def test_an_out_of_range_host_int_index_raises_indexing_error_in_eager_mode(column: int, device: torch.device) -> None:
    x = torch.zeros(3, 4, device=device)
    with pytest.raises(exc.IndexingError, match="out of bounds"):
        _run("eager", read_column, x, column)


@pytest.mark.parametrize("column", [4, -5])
def test_an_out_of_range_host_int_index_reads_nothing_outside_the_tensor(column: int, device: torch.device) -> None:
    storage = torch.full((5, 4), 9.0, device=device)
    x = storage[1:4]
    assert not _run(_generated_mode(device), read_column, x, column).any()


@tessera.kernel
def copy_rows_of_grid(x: torch.Tensor, begin: int) -> torch.Tensor:
    out = torch.zeros(x.size(0) - begin, x.size(1), dtype=x.dtype, device=x.device)
    for row in hl.grid(begin, x.size(0)):
        out[row - begin, :] = x[row, :]
    return out


def test_a_grid_from_a_negative_begin_wraps_like_torch(device: torch.device) -> None:
    x = torch.arange(12.0, device=device).reshape(3, 4)
    expected = torch.cat([x[1:], x])  # rows -2, -1, 0, 1, 2
    for mode in _modes(device):
        assert torch.equal(_run(mode, copy_rows_of_grid, x, -2), expected), mode


# -- views ---------------------------------------------------------------------------------------
@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def copy_from_slice(x: torch.Tensor, start: int, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = x[start:][tile]
    return out


@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def copy_from_loaded_slice(x: torch.Tensor, starts: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for row in hl.grid(out.size(0)):
        start = hl.load(starts, [row])
        for tile in hl.tile(out.size(1)):
            out[row, tile] = x[start:start + 3][tile]
    return out


def test_a_loaded_negative_slice_start_counts_from_the_end_like_python(device: torch.device) -> None:
    x = torch.arange(10.0, device=device)
    starts = torch.tensor([2, -4, 0, -10], device=device)
    expected = torch.stack([x[int(s):int(s) + 3] for s in starts])
    for mode in _modes(device):
        out = torch.zeros(4, 3, device=device)
        assert torch.equal(_run(mode, copy_from_loaded_slice, x, starts, out), expected), mode


@pytest.mark.parametrize("start", [2, -3])
def test_a_host_int_slice_start_counts_from_the_end_like_python(start: int, device: torch.device) -> None:
    x = torch.arange(8.0, device=device)
    expected = x[start:]
    for mode in _modes(device):
        out = torch.zeros(expected.numel(), device=device)
        assert torch.equal(_run(mode, copy_from_slice, x, start, out), expected), mode


# -- index tensors checked on the device (TESSERA_CHECK_INDICES) ----------------------------------
@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def gather_checked(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(indices.size(0), device=x.device)
    for tile in hl.tile(indices.size(0)):
        out[tile] = x[indices[tile]]  # line: checked-gather
    return out


@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def gather_checked_masked(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(indices.size(0), device=x.device)
    for tile in hl.tile(indices.size(0)):
        lanes = indices[tile]
        out[tile] = hl.load(x, [lanes], extra_mask=lanes < x.size(0))
    return out


@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def scatter_checked(values: torch.Tensor, indices: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(indices.size(0)):
        out[indices[tile]] = values[tile]  # line: checked-scatter
    return out


def _checked(kernel: Any, *args: Any) -> Any:
    kernel.reset()  # each test compiles (and reports) from a fresh kernel
    try:
        with settings.override(check_indices=True, mode=_generated_mode(args[0].device)):
            return kernel(*args)
    finally:
        kernel.reset()


def test_checked_indices_report_an_out_of_range_gather_at_its_line(device: torch.device) -> None:
    x = torch.arange(10.0, device=device)
    with pytest.raises(exc.IndexingError) as caught:
        _checked(gather_checked, x, torch.tensor([1, 3, 12, 2, 5], device=device))
    assert caught.value.location.lineno == marked_line(__file__, "checked-gather")[0]
    assert "TESSERA_CHECK_INDICES" in str(caught.value)


def test_checked_indices_report_a_negative_scatter_index(device: torch.device) -> None:
    out = torch.zeros(6, device=device)
    with pytest.raises(exc.IndexingError) as caught:
        # -1 counts from the end, as in torch; -7 is below -6, out of range
        _checked(scatter_checked, torch.ones(3, device=device), torch.tensor([0, -7, 2], device=device), out)
    assert caught.value.location.lineno == marked_line(__file__, "checked-scatter")[0]


@pytest.mark.parametrize("size", [1, 5, 9])
def test_checked_indices_pass_in_range_and_masked_lanes(size: int, device: torch.device) -> None:
    x = torch.arange(10.0, device=device)
    indices = torch.arange(size, device=device) * 7 % 10
    torch.testing.assert_close(_checked(gather_checked, x, indices), x[indices])
    wild = indices + 10 * (torch.arange(size, device=device) % 2)  # odd lanes out of range, masked
    expected = torch.where(wild < 10, x[wild.clamp(max=9)], torch.zeros((), device=device))
    torch.testing.assert_close(_checked(gather_checked_masked, x, wild), expected)


# -- lanes of one store that write one element ---------------------------------------------------
@tessera.kernel(config=tessera.Config(block_sizes=[4, 8]))
def scatter_rows(x: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile_m, tile_n in hl.tile(x.size()):
        hl.store(out, [rows[tile_m], tile_n], x[tile_m, tile_n], extra_mask=keep[tile_m][:, None])  # line: scatter
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_a_store_whose_lanes_write_different_values_to_one_element_is_refused_on_the_cpu(mode: str) -> None:
    """On the GPU which of the lanes wins is undefined (Triton's interpreter keeps the last), so
    eager and interpret modes refuse instead of answering one of them."""
    x, rows = torch.randn(6, 5), torch.tensor([0, 2, 2, 1, 3, 4])
    with pytest.raises(exc.DuplicateStoreIndicesError, match="writes different values to one element") as info:
        _run(mode, scatter_rows, x, rows, torch.ones(6, dtype=torch.bool), torch.zeros(5, 5))
    assert isinstance(info.value, exc.IndexingError)  # Helion's name for the race is an IndexingError too
    line, _ = marked_line(__file__, "scatter")
    assert f":{line}:" in str(info.value)


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_stores_to_one_element_agree_when_their_values_do_or_when_masked(mode: str, device: torch.device) -> None:
    mode = _generated_mode(device) if mode == "generated" else mode
    x, rows = torch.randn(7, 5), torch.tensor([0, 2, 2, 1, 3, 4, 2])
    x[2] = x[1]
    keep = torch.tensor([True, True, True, True, True, True, False])  # the last row 2 differs: masked
    out = _run(mode, scatter_rows, x.to(device), rows.to(device), keep.to(device), torch.zeros(5, 5, device=device))
    torch.testing.assert_close(out.cpu(), torch.zeros(5, 5).index_copy(0, rows[:6], x[:6]))


# -- issue 15: a masked load may run a tile past its dimension --------------------------------------
@tessera.kernel
def join_columns(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`torch.cat([a, b], 1)` with one tile loop over the output: each load masks the columns its
    tensor does not have."""
    out = torch.empty([a.size(0), a.size(1) + b.size(1)], dtype=a.dtype, device=a.device)
    for rows, cols in hl.tile(out.size()):
        left = cols.index < a.size(1)
        from_a = hl.load(a, [rows, cols], extra_mask=left[None, :])
        from_b = hl.load(b, [rows, cols.index - a.size(1)], extra_mask=~left[None, :])
        out[rows, cols] = torch.where(left[None, :], from_a, from_b)
    return out


@pytest.mark.parametrize(("rows", "a_cols", "b_cols", "blocks"),
                         [(1, 1, 1, [1, 2]), (5, 7, 3, [2, 4]), (3, 16, 16, [2, 16]), (6, 3, 13, [4, 8])])
def test_a_masked_load_may_run_a_tile_past_its_dimension(rows: int, a_cols: int, b_cols: int, blocks: list[int],
                                                         device: torch.device) -> None:
    a = torch.randn(rows, a_cols, device=device)
    b = torch.randn(rows, b_cols, device=device)
    for mode in _modes(device):
        with settings.override(mode=mode):
            got = tessera.kernel(join_columns.fn, config=tessera.Config(block_sizes=blocks))(a, b)
        torch.testing.assert_close(got, torch.cat([a, b], 1), rtol=0, atol=0)


@tessera.kernel(config=tessera.Config(block_sizes=[2, 4]))
def copy_with_a_mask_one_column_short(a: torch.Tensor, width: int) -> torch.Tensor:
    out = torch.zeros([a.size(0), width], dtype=a.dtype, device=a.device)
    for rows, cols in hl.tile([a.size(0), width]):
        out[rows, cols] = hl.load(a, [rows, cols], extra_mask=(cols.index < a.size(1) + 1)[None, :])  # line: short
    return out


def test_a_masked_load_past_the_dimension_in_an_unmasked_lane_is_an_error_in_eager_mode(device: torch.device) -> None:
    a = torch.randn(3, 5, device=device)
    with pytest.raises(exc.IndexingError, match="extra_mask does not mask") as caught:
        _run("eager", copy_with_a_mask_one_column_short, a, 8)
    assert caught.value.location.lineno == marked_line(__file__, "short")[0]


def test_a_masked_load_past_the_dimension_is_checked_by_check_indices(device: torch.device) -> None:
    a = torch.randn(3, 5, device=device)
    with settings.override(mode=_generated_mode(device), check_indices=True), \
            pytest.raises(exc.IndexingError) as caught:
        tessera.kernel(copy_with_a_mask_one_column_short.fn, config=tessera.Config(block_sizes=[2, 4]))(a, 8)
    assert caught.value.location.lineno == marked_line(__file__, "short")[0]


def test_a_masked_load_past_the_dimension_reads_nothing_outside_the_tensor(device: torch.device) -> None:
    a = torch.randn(3, 5, device=device)
    got = _run(_generated_mode(device), copy_with_a_mask_one_column_short, a, 8)
    expected = torch.zeros(3, 8, device=device)
    expected[:, :5] = a
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_an_unmasked_tile_past_its_dimension_is_still_an_error(device: torch.device) -> None:
    a = torch.randn(3, 5, device=device)
    for mode in _modes(device):
        with pytest.raises(exc.IndexingError, match="out of bounds|has size"):
            _run(mode, copy_rows_past_the_end, a, 8)


@tessera.kernel(config=tessera.Config(block_sizes=[2, 4]))
def copy_rows_past_the_end(a: torch.Tensor, width: int) -> torch.Tensor:
    out = torch.zeros([a.size(0), width], dtype=a.dtype, device=a.device)
    for rows, cols in hl.tile([a.size(0), width]):
        out[rows, cols] = a[rows, cols]
    return out


# -- issue 15: a dimension of size 1 broadcasts on reads, as in Helion ------------------------------
@tessera.kernel(config=tessera.Config(block_sizes=[1, 4]))
def scale_rows_by_shared_factors(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """`factors` is [b or 1, 1]: an int index into a size-1 dim reads its one element (the
    column index is always 1 here), and `:` of a size-1 dim is a unit dim that broadcasts."""
    out = torch.empty_like(x)
    for b, cols in hl.tile([x.size(0), x.size(1)]):
        out[b, cols] = x[b, cols] * factors[b.begin, :][None, :] + factors[b.begin, 1]
    return out


@tessera.kernel(config=tessera.Config(block_sizes=[2]))
def scale_by_column_vector(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for rows in hl.tile(x.size(0)):
        out[rows, :] = x[rows, :] * scale[rows, :]
    return out


@pytest.mark.parametrize(("b", "n", "shared_rows"), [(1, 1, 1), (3, 5, 1), (2, 7, 2)])
def test_an_int_index_into_a_size_one_dimension_reads_its_one_element(b: int, n: int, shared_rows: int,
                                                                       device: torch.device) -> None:
    x = torch.randn(b, n, device=device)
    factors = torch.randn(shared_rows, 1, device=device)
    expected = x * factors.expand(b, 1) + factors.expand(b, 1)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, scale_rows_by_shared_factors, x, factors), expected)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 7), (4, 16)])
def test_a_whole_slice_of_a_size_one_dimension_broadcasts(m: int, n: int, device: torch.device) -> None:
    x = torch.randn(m, n, device=device)
    scale = torch.randn(m, 1, device=device)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, scale_by_column_vector, x, scale), x * scale)
