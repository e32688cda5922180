"""What `hl` means in eager mode: tiles, iteration order, block sizes (memory, creation, products
and compile-time values: test_language_eager_values.py).

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
from tessera import exc
from tessera.config import DEFAULT_BLOCK_SIZE

from eager_kernels import eager_kernel


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


def test_tile_range_with_end_at_begin_runs_zero_times_and_a_reversed_one_is_refused(device):
    seen = []

    @eager_kernel()
    def record(begin: int, end: int) -> None:
        for tile in hl.tile(begin, end):
            seen.append(tile)

    record(4, 4)
    assert seen == []
    with pytest.raises(exc.InvalidTileRange, match="begin=5, end=3"):  # Helion's error for the mistake
        record(5, 3)


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
