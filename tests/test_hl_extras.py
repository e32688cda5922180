"""`torch.prod` in tile loops, `hl.device_print` and `hl.breakpoint` (issue 15), in eager and
interpret modes against PyTorch, at size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
MODES = ("eager", "interpret")


def row_products(x: T) -> tuple[T, T, T]:
    rows = torch.empty(x.size(0), dtype=torch.int64 if not x.is_floating_point() else x.dtype, device=x.device)
    kept = torch.empty_like(rows)
    whole = torch.empty_like(rows)
    for tile in hl.tile(x.size(0)):
        values = x[tile, :]
        rows[tile] = torch.prod(values, dim=1)
        kept[tile] = values.prod(-1, keepdim=True).squeeze(1)
        whole[tile] = x[tile, 0:2].prod() + rows[tile] * 0  # every dim of the tile at once
    return rows, kept, whole


def tile_products(x: T) -> T:
    out = torch.ones(x.size(0), dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        acc = hl.full([tile_m], 1.0, dtype=x.dtype)
        for tile_n in hl.tile(x.size(1)):
            acc = acc * x[tile_m, tile_n].prod(1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("shape", [(1, 2), (5, 37), (9, 3)], ids=str)
def test_prod_of_rows_matches_torch(shape: tuple[int, int], dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(1)
    if dtype.is_floating_point:
        x = torch.rand(shape, generator=generator) * 0.5 + 0.75
    else:
        x = torch.randint(-2, 3, shape, generator=generator).to(dtype)
    firsts = [x[start:start + 4, :2].prod() for start in range(0, shape[0], 4)]  # one product per tile of 4
    expected = (x.prod(1), x.prod(1), torch.stack(firsts).repeat_interleave(4)[:shape[0]])
    for mode in MODES:
        kernel = tessera.kernel(row_products, mode=mode, config=tessera.Config(block_sizes=[4]))
        for actual, wanted in zip(kernel(x), expected):
            torch.testing.assert_close(actual, wanted.to(actual.dtype), rtol=1e-5, atol=1e-6, msg=mode)


@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (16, 16)], ids=str)
def test_prod_over_tiles_of_a_loop_leaves_the_tail_lanes_out(shape: tuple[int, int]) -> None:
    x = torch.rand(shape, generator=torch.Generator().manual_seed(2)) * 0.5 + 0.75
    for mode in MODES:
        kernel = tessera.kernel(tile_products, mode=mode, config=tessera.Config(block_sizes=[4, 8]))
        torch.testing.assert_close(kernel(x), x.prod(1), rtol=1e-5, atol=1e-6, msg=mode)


def printing(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        doubled = x[tile] * 2
        hl.device_print("doubled", doubled)
        out[tile] = doubled
    return out


@pytest.mark.parametrize("mode", MODES)
def test_device_print_prints_the_prefix_and_the_values(mode: str, capsys: Any) -> None:
    x = torch.tensor([1.0, 2.0, 3.5])
    result = tessera.kernel(printing, mode=mode, config=tessera.Config(block_sizes=[4]))(x)
    torch.testing.assert_close(result, x * 2)
    printed = capsys.readouterr().out
    assert "doubled" in printed and "7" in printed


def prints_a_size(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        hl.device_print("n", x.size(0))
        out[tile] = x[tile]
    return out


def test_device_print_of_a_host_value_is_refused() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="only tile values print"):
        tessera.kernel(prints_a_size, mode="interpret")(torch.zeros(3))


def stops(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        hl.breakpoint()
        out[tile] = x[tile] + 1
    return out


def test_breakpoint_stops_in_eager_mode(monkeypatch: Any) -> None:
    stops_seen: list[int] = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: stops_seen.append(1))
    x = torch.zeros(5)
    torch.testing.assert_close(tessera.kernel(stops, mode="eager", config=tessera.Config(block_sizes=[2]))(x), x + 1)
    assert stops_seen == [1, 1, 1]  # once per tile


def python_prints(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        tripled = x[tile] * 3
        print("tripled: ", tripled, x[tile])
        print("a tile")
        out[tile] = tripled
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 5])
def test_python_print_in_a_tile_body_is_a_device_print(mode: str, size: int, capfd: Any) -> None:
    x = torch.arange(size, dtype=torch.float32) + 1.5
    result = tessera.kernel(python_prints, mode=mode, config=tessera.Config(block_sizes=[4]))(x)
    torch.testing.assert_close(result, x * 3)
    printed = "".join(capfd.readouterr())
    assert "tripled:" in printed and "4.5" in printed and "a tile" in printed


def prints_nothing(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        print()
        out[tile] = x[tile]
    return out


def prints_no_prefix(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        print(1, x[tile])
        out[tile] = x[tile]
    return out


def prints_a_host_size(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        print("n: ", x.size(0))
        out[tile] = x[tile]
    return out


def prints_with_keywords(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        print("x: ", x[tile], sep="")
        out[tile] = x[tile]
    return out


@pytest.mark.parametrize("kernel_fn, message", [
    (prints_nothing, "requires at least one argument"), (prints_no_prefix, "must be a string prefix"),
    (prints_a_host_size, "only supports runtime tensor values"), (prints_with_keywords, "takes no keywords")])
def test_python_print_without_a_device_form_is_refused_at_its_line(kernel_fn: Any, message: str) -> None:
    with pytest.raises(exc.DevicePrintError, match=message) as caught:
        tessera.kernel(kernel_fn, mode="interpret")(torch.zeros(3))
    assert isinstance(caught.value, exc.InternalError)  # Helion's class for these
    assert caught.value.location is not None and "print(" in caught.value.location.render()


def test_interpret_mode_survives_triton_interpret_dropped_after_import(monkeypatch: Any) -> None:
    kernel = tessera.kernel(python_prints, mode="interpret", config=tessera.Config(block_sizes=[2]))
    x = torch.arange(3, dtype=torch.float32)
    torch.testing.assert_close(kernel(x), x * 3)  # Triton imported in interpret mode
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    kernel.reset()
    torch.testing.assert_close(kernel(x + 1), (x + 1) * 3)


def test_breakpoint_stops_once_per_program_in_interpret_mode(monkeypatch: Any) -> None:
    stops_seen: list[int] = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: stops_seen.append(1))
    x = torch.zeros(5)
    kernel = tessera.kernel(stops, mode="interpret", config=tessera.Config(block_sizes=[2]))
    torch.testing.assert_close(kernel(x), x + 1)
    assert stops_seen == [1, 1, 1]  # one program per tile


def test_breakpoint_compiled_for_the_gpu_is_refused_with_a_way_out() -> None:
    from tessera import backends
    from tessera.backends.base import LoweringOptions
    ir = tessera.kernel(stops, mode="interpret").bind((torch.zeros(3),)).to_ir()
    with pytest.raises(exc.BreakpointInDeviceLoopRequiresInterpret, match="debugger") as raised:
        backends.get("triton").check(ir, LoweringOptions(interpret=False))
    assert "mode='interpret'" in str(raised.value) and raised.value.location.filename == __file__
