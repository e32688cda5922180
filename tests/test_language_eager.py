"""What `hl` means in eager mode: tiles, iteration order, block sizes, memory ops, math.

Eager mode is the specification every other mode is checked against, so these tests pin down
the language surface itself. Each test is one behaviour, named after it. Kernels live either at
module level or inside the test that uses them; both placements must work.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.config import DEFAULT_BLOCK_SIZE


def eager_kernel(config: tessera.Config | None = None):
    """`@tessera.kernel` in eager mode, optionally with a fixed Config."""
    return tessera.kernel(mode="eager", config=config)


# ---------------------------------------------------------------------------------------------
# Module-level kernels
# ---------------------------------------------------------------------------------------------

FIELDS = ("begin", "end", "block_size", "id", "count")


@tessera.kernel(mode="eager")
def tile_fields(n: int, fields: torch.Tensor) -> torch.Tensor:
    """Row `tile.id` of `fields` gets (begin, end, block_size, id, count) of that tile."""
    for tile in hl.tile(n):
        fields[tile.id, 0] = tile.begin
        fields[tile.id, 1] = tile.end
        fields[tile.id, 2] = tile.block_size
        fields[tile.id, 3] = tile.id
        fields[tile.id, 4] = tile.count
    return fields


def tiles_of(n: int, device: torch.device, max_tiles: int = 16) -> list[tuple[int, ...]]:
    """(begin, end, block_size, id, count) of every tile of `hl.tile(n)` with default blocks."""
    fields = torch.full([max_tiles, len(FIELDS)], -1, dtype=torch.int64, device=device)
    rows = tile_fields(n, fields).tolist()
    return [tuple(row) for row in rows if row[0] != -1]


@tessera.kernel(mode="eager")
def tile_index(out: torch.Tensor) -> torch.Tensor:
    """out[i] = the `tile.index` entry of the tile that covers i."""
    for tile in hl.tile(out.size(0)):
        out[tile] = tile.index
    return out


# ---------------------------------------------------------------------------------------------
# Tile attributes
# ---------------------------------------------------------------------------------------------

def test_default_block_size_is_the_documented_constant(device):
    assert DEFAULT_BLOCK_SIZE == 32
    assert {row[2] for row in tiles_of(100, device)} == {DEFAULT_BLOCK_SIZE}


def test_tiles_cover_the_range_in_consecutive_blocks(device):
    tiles = tiles_of(100, device)
    assert [(begin, end) for begin, end, *_ in tiles] == [(0, 32), (32, 64), (64, 96), (96, 100)]


def test_tail_tile_ends_at_the_extent_but_keeps_the_block_size(device):
    begin, end, block_size, _, _ = tiles_of(100, device)[-1]
    assert (begin, end, block_size) == (96, 100, 32)


def test_tile_id_numbers_the_tiles_of_a_loop_from_zero(device):
    assert [row[3] for row in tiles_of(100, device)] == [0, 1, 2, 3]


def test_tile_count_is_the_number_of_tiles_including_the_tail(device):
    assert {row[4] for row in tiles_of(100, device)} == {4}


def test_extent_that_is_a_multiple_of_the_block_size_has_no_short_tile(device):
    assert [(begin, end) for begin, end, *_ in tiles_of(64, device)] == [(0, 32), (32, 64)]


def test_tile_index_holds_the_positions_the_tile_covers(device):
    out = tile_index(torch.full([70], -1, dtype=torch.int32, device=device))
    assert torch.equal(out, torch.arange(70, dtype=torch.int32, device=device))


def test_tile_index_is_int32_on_the_kernel_device(device):
    seen = []

    @eager_kernel()
    def record_index(x: torch.Tensor) -> None:
        for tile in hl.tile(x.size(0)):
            seen.append(tile.index)

    x = torch.zeros(40, device=device)
    record_index(x)
    assert [index.dtype for index in seen] == [torch.int32, torch.int32]
    assert all(index.device == x.device for index in seen)
    assert seen[-1].tolist() == list(range(32, 40))


def test_config_block_sizes_set_the_block_size_of_a_tile_loop(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(x: torch.Tensor) -> None:
        for tile in hl.tile(x.size(0)):
            seen.append((tile.begin, tile.end, tile.block_size, tile.count))

    record(torch.zeros(40, device=device))
    assert seen == [(0, 16, 16, 3), (16, 32, 16, 3), (32, 40, 16, 3)]


def test_config_without_block_sizes_uses_the_default_block_size(device):
    seen = []

    @eager_kernel(tessera.Config(num_warps=4))
    def record(x: torch.Tensor) -> None:
        for tile in hl.tile(x.size(0)):
            seen.append(tile.block_size)

    record(torch.zeros(40, device=device))
    assert seen == [DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE]


def test_multi_dim_tile_takes_one_config_entry_per_dim_in_order(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 4]))
    def record(x: torch.Tensor) -> None:
        for tile_m, tile_n in hl.tile(x.size()):
            seen.append((tile_m.block_size, tile_n.block_size))

    record(torch.zeros(8, 8, device=device))
    assert set(seen) == {(8, 4)}


def test_tile_over_a_list_of_one_extent_yields_one_tuples(device):
    seen = []

    @eager_kernel()
    def record(n: int) -> None:
        for tiles in hl.tile([n]):
            seen.append(tiles)

    record(5)
    assert len(seen) == 1
    assert isinstance(seen[0], tuple) and len(seen[0]) == 1
    assert (seen[0][0].begin, seen[0][0].end) == (0, 5)


# ---------------------------------------------------------------------------------------------
# Iteration order
# ---------------------------------------------------------------------------------------------

def test_two_dim_tile_iterates_row_major_with_the_last_dim_fastest(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[2, 2]))
    def record(m: int, n: int) -> None:
        for tile_m, tile_n in hl.tile([m, n]):
            seen.append((tile_m.begin, tile_n.begin))

    record(4, 6)
    assert seen == list(itertools.product([0, 2], [0, 2, 4]))


def test_three_dim_tile_iterates_row_major_with_the_last_dim_fastest(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[1, 1, 1]))
    def record(a: int, b: int, c: int) -> None:
        for tile_a, tile_b, tile_c in hl.tile([a, b, c]):
            seen.append((tile_a.id, tile_b.id, tile_c.id))

    record(2, 2, 3)
    assert seen == list(itertools.product(range(2), range(2), range(3)))


def test_grid_yields_every_index_once_in_order(device):
    seen = []

    @eager_kernel()
    def record(n: int) -> None:
        for index in hl.grid(n):
            seen.append(int(index))

    record(5)
    assert seen == [0, 1, 2, 3, 4]


def test_two_dim_grid_iterates_row_major_with_the_last_dim_fastest(device):
    seen = []

    @eager_kernel()
    def record(m: int, n: int) -> None:
        for i, j in hl.grid([m, n]):
            seen.append((int(i), int(j)))

    record(2, 3)
    assert seen == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_grid_with_begin_end_and_step_yields_the_strided_indices(device):
    seen = []

    @eager_kernel()
    def record(begin: int, end: int) -> None:
        for index in hl.grid(begin, end, 3):
            seen.append(int(index))

    record(1, 8)
    assert seen == [1, 4, 7]


def test_grid_takes_no_config_block_size_entry(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[4]))
    def record(n: int) -> None:
        for _ in hl.grid(n):
            pass
        for tile in hl.tile(n):
            seen.append(tile.block_size)

    record(8)
    assert seen == [4, 4]


# ---------------------------------------------------------------------------------------------
# begin/end sub-ranges
# ---------------------------------------------------------------------------------------------

def test_tile_with_begin_and_end_covers_only_that_range(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(begin: int, end: int) -> None:
        for tile in hl.tile(begin, end):
            seen.append((tile.begin, tile.end, tile.id, tile.count))

    record(10, 50)
    assert seen == [(10, 26, 0, 3), (26, 42, 1, 3), (42, 50, 2, 3)]


def test_tile_range_with_end_not_after_begin_runs_zero_times(device):
    seen = []

    @eager_kernel()
    def record(begin: int, end: int) -> None:
        for tile in hl.tile(begin, end):
            seen.append(tile)

    record(5, 3)
    record(4, 4)
    assert seen == []


def test_nested_tile_over_an_outer_tile_partitions_that_tile(device):
    seen: dict[tuple[int, int], list[tuple[int, int]]] = {}

    @eager_kernel(tessera.Config(block_sizes=[16, 4]))
    def record(n: int) -> None:
        for outer in hl.tile(n):
            for inner in hl.tile(outer.begin, outer.end):
                seen.setdefault((outer.begin, outer.end), []).append((inner.begin, inner.end))

    record(22)
    assert seen == {
        (0, 16): [(0, 4), (4, 8), (8, 12), (12, 16)],
        (16, 22): [(16, 20), (20, 22)],
    }


def test_nested_tile_ids_restart_at_zero_for_every_outer_tile(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 4]))
    def record(n: int) -> None:
        for outer in hl.tile(n):
            for inner in hl.tile(outer.begin, outer.end):
                seen.append((outer.id, inner.id, inner.count))

    record(16)
    assert seen == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]


def test_nested_sub_range_tile_reads_the_rows_of_its_outer_tile(device):
    @eager_kernel(tessera.Config(block_sizes=[16, 4]))
    def row_sums(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
        for outer in hl.tile(x.size(0)):
            for inner in hl.tile(outer.begin, outer.end):
                out[inner] = x[inner, :].sum(dim=1)
        return out

    x = torch.randn(37, 5, device=device)
    torch.testing.assert_close(row_sums(x), x.sum(dim=1))


# ---------------------------------------------------------------------------------------------
# Block-size slots
# ---------------------------------------------------------------------------------------------

def test_fixed_int_block_size_takes_no_config_entry(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(n: int) -> None:
        for tile in hl.tile(n, block_size=4):
            seen.append(("fixed", tile.block_size))
        for tile in hl.tile(n):
            seen.append(("tuned", tile.block_size))

    record(16)
    assert seen == [("fixed", 4)] * 4 + [("tuned", 16)]


def test_block_size_list_with_none_tunes_only_the_none_dims(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 16]))
    def record(n: int) -> None:
        for tile_m, tile_n in hl.tile([n, n], block_size=[None, 4]):
            seen.append((tile_m.block_size, tile_n.block_size))
        for tile in hl.tile(n):
            seen.append(tile.block_size)

    record(16)
    assert seen == [(8, 4)] * 8 + [16]


def test_block_size_none_from_a_variable_is_tuned_and_takes_its_own_entry(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 16]))
    def record(n: int, block: int | None = None) -> None:
        for tile in hl.tile(n, block_size=block):
            seen.append(("first", tile.block_size))
        for tile in hl.tile(n):
            seen.append(("second", tile.block_size))

    record(16)
    assert seen == [("first", 8), ("first", 8), ("second", 16)]


def test_register_block_size_shares_one_config_entry_between_loops(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 16]))
    def record(m: int, n: int) -> None:
        block = hl.register_block_size(m)
        for tile in hl.tile(m, block_size=block):
            seen.append(("a", tile.block_size))
        for tile in hl.tile(n, block_size=block):
            seen.append(("b", tile.block_size))
        for tile in hl.tile(n):
            seen.append(("c", tile.block_size))

    record(16, 16)
    assert seen == [("a", 8)] * 2 + [("b", 8)] * 2 + [("c", 16)]


def test_register_block_size_returns_the_configured_value(device):
    @eager_kernel(tessera.Config(block_sizes=[64]))
    def configured(n: int) -> int:
        return hl.register_block_size(16, n)

    assert configured(1024) == 64


def test_block_size_slots_follow_source_order_when_an_earlier_loop_has_zero_trips(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 16]))
    def record(m: int, n: int) -> None:
        for tile in hl.tile(m):
            seen.append(("first", tile.block_size))
        for tile in hl.tile(n):
            seen.append(("second", tile.block_size))

    record(0, 16)
    assert seen == [("second", 16)]


def test_loops_nested_in_a_zero_trip_loop_still_hold_their_config_entries(device):
    seen = []

    @eager_kernel(tessera.Config(block_sizes=[8, 16, 32, 4]))
    def record(m: int, k: int, n: int) -> None:
        for _ in hl.tile(m):
            for _, _ in hl.tile([k, k]):
                pass
        for tile in hl.tile(n):
            seen.append(tile.block_size)

    record(0, 8, 8)
    assert seen == [4, 4]


# ---------------------------------------------------------------------------------------------
# Memory: load / store / extra_mask / index tensors / atomics
# ---------------------------------------------------------------------------------------------

@tessera.kernel(mode="eager", config=tessera.Config(block_sizes=[4]))
def load_first(x: torch.Tensor, n: int) -> torch.Tensor:
    """out[i] = x[i] for i < n, and what a masked load gives elsewhere."""
    out = torch.full_like(x, -1.0)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.load(x, [tile], extra_mask=tile.index < n)
    return out


def test_load_with_extra_mask_reads_zero_in_masked_lanes(device):
    x = torch.arange(1.0, 9.0, device=device)
    expected = torch.tensor([1.0, 2, 3, 4, 5, 0, 0, 0], device=device)
    assert torch.equal(load_first(x, 5), expected)


def test_store_with_extra_mask_does_not_write_masked_lanes(device):
    @eager_kernel(tessera.Config(block_sizes=[4]))
    def store_odd(x: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(x, -1.0)
        for tile in hl.tile(x.size(0)):
            hl.store(out, [tile], x[tile], extra_mask=tile.index % 2 == 1)
        return out

    x = torch.arange(1.0, 7.0, device=device)
    assert torch.equal(store_odd(x), torch.tensor([-1.0, 2, -1, 4, -1, 6], device=device))


def test_load_without_mask_equals_tensor_indexing(device):
    @eager_kernel()
    def copy(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            hl.store(out, [tile_m, tile_n], hl.load(x, [tile_m, tile_n]))
        return out

    x = torch.randn(33, 65, device=device)
    assert torch.equal(copy(x), x)


def test_load_with_an_index_tensor_gathers_rows(device):
    @eager_kernel()
    def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        out = torch.empty(rows.size(0), x.size(1), dtype=x.dtype, device=x.device)
        for tile_r, tile_c in hl.tile([rows.size(0), x.size(1)]):
            out[tile_r, tile_c] = hl.load(x, [rows[tile_r], tile_c])
        return out

    x = torch.randn(6, 3, device=device)
    rows = torch.tensor([5, 0, 0, 2], device=device)
    assert torch.equal(gather_rows(x, rows), x[rows])


def test_subscript_with_an_index_tensor_gathers(device):
    @eager_kernel()
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = x[index[tile]]
        return out

    x = torch.randn(10, device=device)
    index = torch.tensor([9, 3, 3, 0, 7], device=device)
    assert torch.equal(gather(x, index), x[index])


def test_store_with_an_index_tensor_scatters(device):
    @eager_kernel()
    def scatter(values: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=values.dtype, device=values.device)
        for tile in hl.tile(index.size(0)):
            hl.store(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 2.0, 3.0], device=device)
    index = torch.tensor([4, 0, 2], device=device)
    assert torch.equal(scatter(values, index, 5), torch.tensor([2.0, 0, 3, 0, 1], device=device))


def test_masked_lanes_may_hold_out_of_range_indices(device):
    @eager_kernel()
    def gather_in_range(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            i = index[tile]
            out[tile] = hl.load(x, [i], extra_mask=i < x.size(0))
        return out

    x = torch.tensor([1.0, 2, 3, 4], device=device)
    index = torch.tensor([0, 4, 3, 9], device=device)
    assert torch.equal(gather_in_range(x, index), torch.tensor([1.0, 0, 4, 0], device=device))


def test_atomic_add_accumulates_every_repeated_index(device):
    @eager_kernel()
    def histogram(values: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=values.dtype, device=values.device)
        for tile in hl.tile(index.size(0)):
            hl.atomic_add(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    index = torch.tensor([1, 1, 3, 1], device=device)
    assert torch.equal(histogram(values, index, 4), torch.tensor([0.0, 7, 0, 3], device=device))


def test_atomic_add_from_every_tile_into_one_element_sums_them_all(device):
    @eager_kernel(tessera.Config(block_sizes=[8]))
    def count_tiles(n: int, out: torch.Tensor) -> torch.Tensor:
        for _ in hl.tile(n):
            hl.atomic_add(out, [0], 1.0)
        return out

    assert count_tiles(100, torch.zeros(1, device=device)).item() == 13


def test_atomic_max_keeps_the_largest_of_repeated_indices_and_the_old_value(device):
    @eager_kernel()
    def scatter_max(values: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(index.size(0)):
            hl.atomic_max(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 5.0, 3.0, -4.0], device=device)
    index = torch.tensor([1, 1, 1, 2], device=device)
    out = scatter_max(values, index, torch.zeros(4, device=device))
    assert torch.equal(out, torch.tensor([0.0, 5.0, 0.0, 0.0], device=device))


def test_atomic_min_keeps_the_smallest_of_repeated_indices_and_the_old_value(device):
    @eager_kernel()
    def scatter_min(values: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(index.size(0)):
            hl.atomic_min(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 5.0, -3.0, 4.0], device=device)
    index = torch.tensor([1, 1, 1, 2], device=device)
    out = scatter_min(values, index, torch.zeros(4, device=device))
    assert torch.equal(out, torch.tensor([0.0, -3.0, 0.0, 0.0], device=device))


def test_tile_past_the_end_of_a_smaller_tensor_raises_indexing_error(device):
    @eager_kernel()
    def copy_n(x: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=x.dtype, device=x.device)
        for tile in hl.tile(n):
            out[tile] = x[tile]
        return out

    with pytest.raises(tessera.exc.IndexingError, match=r"out of bounds for dimension 0 of size 64"):
        copy_n(torch.zeros(64, device=device), 100)


def test_store_of_a_tile_past_the_end_raises_indexing_error(device):
    @eager_kernel()
    def fill(out: torch.Tensor, n: int) -> None:
        for tile in hl.tile(n):
            hl.store(out, [tile], 1.0)

    with pytest.raises(tessera.exc.IndexingError):
        fill(torch.zeros(10, device=device), 40)


def test_unmasked_out_of_range_index_raises_indexing_error(device):
    @eager_kernel()
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = hl.load(x, [index[tile]])
        return out

    with pytest.raises(tessera.exc.IndexingError, match="not masked"):
        gather(torch.zeros(4, device=device), torch.tensor([0, 4], device=device))


def test_negative_index_is_out_of_range_not_counted_from_the_end(device):
    @eager_kernel()
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = hl.load(x, [index[tile]])
        return out

    with pytest.raises(tessera.exc.IndexingError):
        gather(torch.zeros(4, device=device), torch.tensor([0, -1], device=device))


def test_unmasked_out_of_range_scatter_index_raises_indexing_error(device):
    @eager_kernel()
    def scatter_ones(index: torch.Tensor, out: torch.Tensor) -> None:
        for tile in hl.tile(index.size(0)):
            hl.store(out, [index[tile]], 1.0)

    out = torch.zeros(4, device=device)
    with pytest.raises(tessera.exc.IndexingError):
        scatter_ones(torch.tensor([0, 4], device=device), out)


# ---------------------------------------------------------------------------------------------
# Creation: hl.zeros / hl.full / hl.arange
# ---------------------------------------------------------------------------------------------

def test_zeros_takes_its_shape_from_tiles_and_ints(device):
    shapes = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(n: int) -> None:
        for tile in hl.tile(n):
            block = hl.zeros([tile, 3], dtype=torch.float16)
            shapes.append((tuple(block.shape), block.dtype, bool((block == 0).all())))

    record(20)
    assert shapes == [((16, 3), torch.float16, True), ((4, 3), torch.float16, True)]


def test_zeros_is_float32_by_default(device):
    dtypes = []

    @eager_kernel()
    def record(n: int) -> None:
        for tile in hl.tile(n):
            dtypes.append(hl.zeros([tile]).dtype)

    record(4)
    assert dtypes == [torch.float32]


def test_full_fills_the_tile_with_the_value(device):
    @eager_kernel()
    def filled(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            out[tile_m, tile_n] = hl.full([tile_m, tile_n], 2.5, dtype=x.dtype)
        return out

    out = filled(torch.zeros(40, 3, device=device))
    assert torch.equal(out, torch.full([40, 3], 2.5, device=device))


def test_allocations_live_on_the_kernel_device(device):
    devices = []

    @eager_kernel()
    def record(x: torch.Tensor) -> None:
        for tile in hl.tile(x.size(0)):
            devices.append(hl.zeros([tile]).device)
            devices.append(hl.arange(4).device)

    x = torch.zeros(4, device=device)
    record(x)
    assert devices == [x.device, x.device]


def test_arange_is_int32_by_default(device):
    @eager_kernel()
    def positions(out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size(0)):
            out[tile] = hl.arange(tile.begin, tile.end)
        return out

    out = positions(torch.zeros(40, dtype=torch.int32, device=device))
    assert torch.equal(out, torch.arange(40, dtype=torch.int32, device=device))


def test_arange_of_the_block_size_has_block_size_elements(device):
    lengths = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(n: int) -> None:
        for tile in hl.tile(n):
            lengths.append(hl.arange(tile.block_size).numel())

    record(20)
    assert lengths == [16, 16]


def test_helper_function_called_from_a_tile_loop_may_use_hl(device):
    def ones_like_tile(tile: hl.Tile) -> torch.Tensor:
        return hl.full([tile], 1.0)

    @eager_kernel()
    def ones(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = ones_like_tile(tile)
        return out

    assert torch.equal(ones(torch.zeros(50, device=device)), torch.ones(50, device=device))


# ---------------------------------------------------------------------------------------------
# Products: hl.dot and torch.addmm on tiles
# ---------------------------------------------------------------------------------------------

def test_dot_of_bf16_tiles_returns_float32(device):
    dtypes = []

    @eager_kernel()
    def record(a: torch.Tensor, b: torch.Tensor) -> None:
        for tile_m, tile_n in hl.tile([a.size(0), b.size(1)]):
            dtypes.append(hl.dot(a[tile_m, :], b[:, tile_n]).dtype)

    a = torch.randn(4, 8, device=device).bfloat16()
    record(a, a.T.contiguous())
    assert dtypes == [torch.float32]


def test_dot_accumulates_bf16_products_in_float32(device):
    # 512 products of 1 * 1: a bf16 sum stops growing at 256, a float32 sum reaches 512.
    @eager_kernel(tessera.Config(block_sizes=[16, 16, 64]))
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = a.size()
        out = torch.empty(m, b.size(1), dtype=torch.float32, device=a.device)
        for tile_m, tile_n in hl.tile([m, b.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = hl.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
            out[tile_m, tile_n] = acc
        return out

    a = torch.ones(2, 512, dtype=torch.bfloat16, device=device)
    b = torch.ones(512, 3, dtype=torch.bfloat16, device=device)
    out = matmul(a, b)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.full([2, 3], 512.0, device=device))


def test_dot_matches_a_float32_matmul_of_the_bf16_inputs(device):
    @eager_kernel(tessera.Config(block_sizes=[16, 16, 32]))
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = a.size()
        out = torch.empty(m, b.size(1), dtype=torch.float32, device=a.device)
        for tile_m, tile_n in hl.tile([m, b.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = hl.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
            out[tile_m, tile_n] = acc
        return out

    a = torch.randn(40, 70, device=device).bfloat16()
    b = torch.randn(70, 20, device=device).bfloat16()
    torch.testing.assert_close(matmul(a, b), a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def test_addmm_of_a_float32_accumulator_and_bf16_tiles_accumulates_in_float32(device):
    # Plain torch rejects addmm(f32, bf16, bf16); inside a kernel it is the canonical K loop.
    @eager_kernel(tessera.Config(block_sizes=[16, 16, 64]))
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = a.size()
        out = torch.empty(m, b.size(1), dtype=torch.float32, device=a.device)
        for tile_m, tile_n in hl.tile([m, b.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, a[tile_m, tile_k], b[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    a = torch.ones(2, 512, dtype=torch.bfloat16, device=device)
    b = torch.ones(512, 3, dtype=torch.bfloat16, device=device)
    out = matmul(a, b)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.full([2, 3], 512.0, device=device))


def test_addmm_in_a_kernel_matches_a_float32_reference(device):
    @eager_kernel(tessera.Config(block_sizes=[16, 16, 32]))
    def matmul_into(acc_in: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(acc_in)
        for tile_m, tile_n in hl.tile(acc_in.size()):
            acc = acc_in[tile_m, tile_n]
            for tile_k in hl.tile(a.size(1)):
                acc = torch.addmm(acc, a[tile_m, tile_k], b[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    acc = torch.randn(40, 20, device=device)
    a = torch.randn(40, 70, device=device).bfloat16()
    b = torch.randn(70, 20, device=device).bfloat16()
    torch.testing.assert_close(matmul_into(acc, a, b), acc + a.float() @ b.float(),
                               rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Compile-time values
# ---------------------------------------------------------------------------------------------

def test_specialize_returns_a_python_int(device):
    @eager_kernel()
    def width(x: torch.Tensor) -> object:
        return hl.specialize(x.size(1))

    n = width(torch.zeros(3, 7, device=device))
    assert isinstance(n, int) and n == 7


def test_specialize_of_a_shape_returns_ints(device):
    @eager_kernel()
    def shape(x: torch.Tensor) -> object:
        return hl.specialize(x.shape)

    dims = shape(torch.zeros(3, 7, device=device))
    assert all(isinstance(d, int) for d in dims) and list(dims) == [3, 7]


def test_specialized_size_may_size_an_allocation_in_a_tile_loop(device):
    @eager_kernel()
    def row_copy(x: torch.Tensor) -> torch.Tensor:
        n = hl.specialize(x.size(1))
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = hl.zeros([tile, n]) + x[tile, :]
        return out

    x = torch.randn(40, 6, device=device)
    assert torch.equal(row_copy(x), x)
