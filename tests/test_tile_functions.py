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


# -- issue 15: `tile + k` / `tile - k` are the tile's indices shifted, as in Helion ---------------
def shifted_rows(x: T, offset: int) -> T:
    rows = x.size(0) - offset
    out = torch.empty(rows, x.size(1), dtype=x.dtype, device=x.device)
    for tile in hl.tile(rows):
        out[tile, :] = x[tile + offset, :] + x[offset + tile, :] - x[tile - 0, :] * 0 - x[tile + offset, :]
    return out


def rows_counted_from(x: T, base: int) -> T:
    out = torch.empty(x.size(0), dtype=torch.int32, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = (base - tile).to(torch.int32)
    return out


@pytest.mark.parametrize(("rows", "offset"), [(1, 0), (7, 2), (9, 1)])
def test_a_tile_plus_an_offset_gathers_the_shifted_rows(rows: int, offset: int, device: torch.device) -> None:
    x = torch.randn(rows + offset, 3, device=device)
    for mode in _modes(device):
        got = tessera.kernel(shifted_rows, mode=mode, config=tessera.Config(block_sizes=[4]))(x, offset)
        torch.testing.assert_close(got, x[offset:], msg=mode)
        counted = tessera.kernel(rows_counted_from, mode=mode, config=tessera.Config(block_sizes=[4]))(x, 100)
        assert counted.cpu().tolist() == [100 - i for i in range(rows + offset)], mode


def scaled_tile(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile * 2]  # line: tile-times
    return out


def summed_tiles(x: T) -> T:
    out = torch.empty_like(x)
    for tile, other in hl.tile([x.size(0), x.size(0)]):
        out[tile] = x[tile + other]  # line: tile-plus-tile
    return out


@pytest.mark.parametrize(("kernel", "line", "wording"), [(scaled_tile, "tile-times", "tile.index"),
                                                         (summed_tiles, "tile-plus-tile", "tile \\+ tile")])
def test_other_arithmetic_on_a_tile_is_refused_with_its_line(kernel: object, line: str, wording: str,
                                                             device: torch.device) -> None:
    from marked_lines import marked_line
    for mode in _modes(device):
        with pytest.raises(exc.UnsupportedOperationError, match=wording) as caught:
            tessera.kernel(kernel, mode=mode)(torch.zeros(8, device=device))
        assert caught.value.location.lineno == marked_line(__file__, line)[0], mode


# -- issue 15: `.device` of a tile value, and allocations shaped by a tensor argument -------------
def ones_on_the_values_device(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        out[tile] = v + v.new_ones(size=(), dtype=v.dtype, device=v.device) * 2
    return out


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_a_tile_value_is_on_the_kernels_device(rows: int, device: torch.device) -> None:
    x = torch.randn(rows, device=device)
    for mode in _modes(device):
        got = tessera.kernel(ones_on_the_values_device, mode=mode, config=tessera.Config(block_sizes=[4]))(x)
        torch.testing.assert_close(got, x + 2, msg=mode)


def column_sums_per_block(x: T, weight: T) -> T:
    """Per block of rows, the column sums, in an accumulator made by `weight.new_zeros(n)`,
    `torch.zeros_like(weight)` (static shapes: its size is known) and `weight.new_full`."""
    m_block = hl.register_block_size(x.size(0))
    n = hl.specialize(x.size(1))
    partial = x.new_empty([(x.size(0) + m_block - 1) // m_block, n], dtype=torch.float32)
    for block in hl.tile(x.size(0), block_size=m_block):
        acc = weight.new_zeros(n, dtype=torch.float32)
        extra = torch.zeros_like(weight, dtype=torch.float32) + weight.new_full([n], 0.5, dtype=torch.float32)
        for rows in hl.tile(block.begin, block.end):
            acc += x[rows, :].to(torch.float32).sum(0)
        partial[block.id, :] = acc + extra - 0.5
    return partial.sum(0)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (9, 5), (33, 16)])
def test_new_zeros_and_zeros_like_of_a_tensor_argument_allocate_a_register_tile(m: int, n: int,
                                                                                device: torch.device) -> None:
    x = torch.randn(m, n, device=device)
    weight = torch.randn(n, dtype=torch.float16, device=device)
    for mode in _modes(device):
        got = tessera.kernel(column_sums_per_block, mode=mode, static_shapes=True,
                             config=tessera.Config(block_sizes=[8, 4]))(x, weight)
        torch.testing.assert_close(got, x.sum(0), rtol=1e-5, atol=1e-5, msg=mode)


def like_of_a_runtime_sized_argument(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + torch.zeros_like(x).sum()  # line: like-runtime
    return out


def test_zeros_like_of_a_runtime_sized_argument_is_refused_with_its_line(device: torch.device) -> None:
    from marked_lines import marked_line
    with pytest.raises(exc.DynamicAllocationError) as caught:
        tessera.kernel(like_of_a_runtime_sized_argument, mode=_modes(device)[1])(torch.zeros(8, device=device))
    assert caught.value.location.lineno == marked_line(__file__, "like-runtime")[0]


def weighted_group_sums(x: T, w: T) -> T:
    """A register_block_size accumulator `hl.zeros([rows, block])` added to tile values, as
    Helion's nvfp4_gemv does, with a Config whose block is wider than the bound."""
    groups = hl.specialize(x.size(1))
    block = hl.register_block_size(groups)
    out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
    for rows in hl.tile(x.size(0)):
        acc = hl.zeros([rows], dtype=torch.float32)
        for cols in hl.tile(groups, block_size=block):
            part = hl.zeros([rows, block], dtype=torch.float32)
            part = part + x[rows, cols] * w[cols][None, :]
            acc = acc + part.sum(-1)
        out[rows] = acc
    return out


@pytest.mark.parametrize("groups", [1, 5, 16])
def test_a_config_block_wider_than_its_registered_bound_matches_the_tiles(groups: int,
                                                                          device: torch.device) -> None:
    x, w = torch.randn(6, groups, device=device), torch.randn(groups, device=device)
    for mode in _modes(device):
        got = tessera.kernel(weighted_group_sums, mode=mode, config=tessera.Config(block_sizes=[4, 128]))(x, w)
        torch.testing.assert_close(got, x @ w, rtol=1e-5, atol=1e-5, msg=mode)
