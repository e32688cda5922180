"""Issue 15: `hl.join` / `hl.split`, `torch.stack` / `torch.cat` of tile values, `hl.barrier` and
`hl.inline_asm_elementwise`, in every mode against torch (the assembly: compiled only, refused
elsewhere with its line)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
CONFIG = tessera.Config(block_sizes=[4])


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def join_then_split(x: T, y: T) -> tuple[T, T]:
    pairs = torch.empty(x.size(0), 2, dtype=x.dtype, device=x.device)
    difference = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        joined = hl.join(x[tile], y[tile])
        pairs[tile, :] = joined
        first, second = hl.split(joined * 2)
        difference[tile] = first - second
    return pairs, difference


@pytest.mark.parametrize("size", [1, 5, 37])
def test_join_adds_a_last_dimension_of_two_and_split_takes_it_apart(size: int, device: torch.device) -> None:
    x, y = torch.randn(size), torch.randn(size)
    for mode in _modes(device):
        pairs, difference = tessera.kernel(join_then_split, mode=mode, config=CONFIG)(x.to(device), y.to(device))
        torch.testing.assert_close(pairs.cpu(), torch.stack([x, y], dim=1), msg=lambda text: f"{mode}: {text}")
        torch.testing.assert_close(difference.cpu(), 2 * x - 2 * y, msg=lambda text: f"{mode}: {text}")


def stack_rows(x: T, y: T) -> T:
    out = torch.empty(2, x.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[:, tile, :] = torch.stack([x[tile, :], y[tile, :] + 1], dim=0)
    return out


def cat_rows(x: T, y: T) -> T:
    out = torch.empty(x.size(0), 2 * x.size(1), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.cat([x[tile, :], y[tile, :] * 2], dim=1)
    return out


@pytest.mark.parametrize("shape", [(5, 8), (1, 1), (9, 2)], ids=str)
def test_stack_and_cat_of_two_values(shape: tuple[int, int], device: torch.device) -> None:
    x, y = torch.randn(shape), torch.randn(shape)
    for mode in _modes(device):
        stacked = tessera.kernel(stack_rows, mode=mode, config=CONFIG)(x.to(device), y.to(device))
        torch.testing.assert_close(stacked.cpu(), torch.stack([x, y + 1]), msg=lambda text: f"{mode}: {text}")
        joined = tessera.kernel(cat_rows, mode=mode, config=CONFIG)(x.to(device), y.to(device))
        torch.testing.assert_close(joined.cpu(), torch.cat([x, y * 2], dim=1), msg=lambda text: f"{mode}: {text}")


def test_cat_along_a_padded_row_picks_lanes() -> None:
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    joined = tessera.kernel(cat_rows, mode="interpret", config=CONFIG)(x, y)
    torch.testing.assert_close(joined, torch.cat([x, y * 2], dim=1))


def cat_tiles(x: T) -> T:
    out = torch.empty(2 * x.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.cat([x[tile, :], x[tile, :]], dim=0)[:1]
    return out


def test_cat_along_a_tile_dim_is_refused_with_a_way_around() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="which is a tile"):
        tessera.kernel(cat_tiles, mode="interpret", config=CONFIG)(torch.randn(3, 5))


def two_phases(x: T) -> T:
    partial = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        partial[tile] = x[tile] * 2
    hl.barrier()
    for tile in hl.tile(x.size(0)):
        out[tile] = partial[tile] + partial[0]
    return out


def barrier_in_loop(x: T) -> T:
    for tile in hl.tile(x.size(0)):
        hl.barrier()  # line: barrier
        x[tile] = x[tile] + 1
    return x


def test_a_barrier_between_top_level_loops_orders_them(device: torch.device) -> None:
    x = torch.randn(37)
    for mode in _modes(device):
        result = tessera.kernel(two_phases, mode=mode, config=tessera.Config(block_sizes=[4, 8]))(x.to(device))
        torch.testing.assert_close(result.cpu(), 2 * x + 2 * x[0], msg=lambda text: f"{mode}: {text}")


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_a_barrier_inside_a_tile_loop_is_refused_with_its_line(mode: str) -> None:
    with pytest.raises(exc.UnsupportedSyntaxError, match="separates top-level tile loops") as info:
        tessera.kernel(barrier_in_loop, mode=mode)(torch.zeros(4))
    assert "# line: barrier" in str(info.value)


def add_in_assembly(x: T, y: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_asm_elementwise("add.f32 $0, $1, $2;", "=r,r,r", [x[tile], y[tile]],  # line: asm
                                              dtype=torch.float32, is_pure=True, pack=1)
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_inline_assembly_is_refused_off_the_gpu_with_its_line(mode: str) -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="runs only") as info:
        tessera.kernel(add_in_assembly, mode=mode)(torch.randn(4), torch.randn(4))
    assert "# line: asm" in str(info.value)


def test_inline_assembly_lowers_to_triton(device: torch.device) -> None:
    x, y = torch.randn(37, device=device), torch.randn(37, device=device)
    if device.type == "cuda":
        torch.testing.assert_close(tessera.kernel(add_in_assembly)(x, y), x + y)
    ir = tessera.kernel(add_in_assembly, config=CONFIG).bind(x, y).to_ir()
    assert "inline_asm" in str(ir) and "add.f32 $0, $1, $2;" in str(ir)


def rotate_halves(x: T) -> T:
    out = torch.empty_like(x)
    half = x.size(1) // 2
    for tile in hl.tile(x.size(0)):
        first, second = hl.split(x[tile, :].reshape([tile, 2, half]).permute(0, 2, 1))
        out[tile, :] = hl.join(-second, first).permute(0, 2, 1).reshape([tile, x.size(1)])
    return out


def regroup_a_tile(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :].reshape([2, -1]).reshape([tile, x.size(1)])  # line: regroup
    return out


@pytest.mark.parametrize("shape", [(5, 16), (1, 2), (3, 64)], ids=str)
def test_reshape_splits_and_merges_whole_dimensions(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape)
    half = shape[1] // 2
    expected = torch.cat([-x[:, half:], x[:, :half]], dim=1)
    for mode in _modes(device):
        result = tessera.kernel(rotate_halves, mode=mode, config=CONFIG)(x.to(device))
        torch.testing.assert_close(result.cpu(), expected, msg=lambda text: f"{mode}: {text}")


def test_a_reshape_regrouping_a_tile_is_refused_with_its_line() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="whole, power-of-two ones") as info:
        tessera.kernel(regroup_a_tile, mode="interpret", config=CONFIG)(torch.randn(8, 4))
    assert "# line: regroup" in str(info.value)
