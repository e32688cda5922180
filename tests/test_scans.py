"""Scans and user combine functions inside tile loops (issue 15): `torch.cumsum/cumprod`,
`hl.cumsum/cumprod`, `hl.associative_scan` and `hl.reduce`, in every mode against torch, at
shapes with size 1, non-powers of two and tail tiles (lanes past a tile's extent must never
reach a result, whatever the combine function)."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
SHAPES = ((5, 37), (1, 1), (3, 16))
CONFIG = tessera.Config(block_sizes=[4])


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def rows(x: T, op: Callable[[Any], Any]) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :])
    return out


def row_values(x: T, op: Callable[[Any], Any]) -> T:
    out = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = op(x[tile, :])
    return out


def _check(device: torch.device, kernel: Callable[..., T], x: T, op: Callable[[Any], Any], expected: T,
           tolerance: float = 1e-5) -> None:
    for mode in _modes(device):
        result = tessera.kernel(kernel, mode=mode, config=CONFIG)(x.to(device), op)
        torch.testing.assert_close(result.cpu(), expected, rtol=tolerance, atol=tolerance,
                                   msg=lambda text: f"{mode}: {text}")


def _suffix_max(x: T) -> T:
    return x.flip(1).cummax(1).values.flip(1)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cumsum_of_ints_is_int64_as_in_torch(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randint(-9, 9, shape, dtype=torch.int32)
    for mode in _modes(device):
        result = tessera.kernel(int64_rows, mode=mode, config=CONFIG)(x.to(device))
        assert result.dtype == torch.int64 and result.cpu().tolist() == x.cumsum(1).tolist(), mode


def int64_rows(x: T) -> T:
    out = torch.empty(x.shape, dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.cumsum(x[tile, :], dim=1)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cumsum_of_fp16_accumulates_in_fp32(shape: tuple[int, int], device: torch.device) -> None:
    x = (torch.rand(shape) * 100).half()
    _check(device, rows, x, lambda v: v.cumsum(-1), x.cumsum(1), tolerance=1e-2)


def scan_over_tiles(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = torch.cumprod(x[tile_m, tile_n], dim=0)
    return out


def test_scan_along_a_tiled_dimension_restarts_per_tile(device: torch.device) -> None:
    x = torch.rand(7, 5) + 0.5
    expected = torch.cat([x[:4].cumprod(0), x[4:].cumprod(0)])
    for mode in _modes(device):
        result = tessera.kernel(scan_over_tiles, mode=mode, config=tessera.Config(block_sizes=[4, 8]))(x.to(device))
        torch.testing.assert_close(result.cpu(), expected, msg=lambda text: f"{mode}: {text}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_reverse_cumsum_ignores_lanes_past_the_row(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape)
    _check(device, rows, x, lambda v: hl.cumsum(v, 1, reverse=True), x.flip(1).cumsum(1).flip(1), 1e-4)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_reverse_associative_scan_ignores_lanes_past_the_row(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape) - 5  # below the zeros of masked lanes: a leak would show
    _check(device, rows, x, lambda v: hl.associative_scan(lambda a, b: torch.maximum(a, b), v, 1, reverse=True),
           _suffix_max(x))


def _first_nonzero(a: Any, b: Any) -> Any:
    return torch.where(a != 0, a, b)  # associative, not commutative: the order of operands shows


def test_associative_scan_keeps_the_order_of_operands(device: torch.device) -> None:
    x = torch.tensor([[0.0, 0.0, 3.0, 0.0, 5.0, 7.0]])
    _check(device, rows, x, lambda v: hl.associative_scan(_first_nonzero, v, 1),
           torch.tensor([[0.0, 0.0, 3.0, 3.0, 3.0, 3.0]]))
    _check(device, rows, x, lambda v: hl.associative_scan(_first_nonzero, v, 1, reverse=True),
           torch.tensor([[7.0, 7.0, 7.0, 7.0, 7.0, 7.0]]))  # from the end: the running value comes first


def _sum_and_max_unpacked(a0: Any, a1: Any, b0: Any, b1: Any) -> tuple[Any, Any]:
    return a0 + b0, torch.maximum(a1, b1)


def _sum_and_max_packed(left: tuple, right: tuple) -> tuple[Any, Any]:
    return left[0] + right[0], torch.maximum(left[1], right[1])


@pytest.mark.parametrize("combine", [_sum_and_max_unpacked, _sum_and_max_packed], ids=["unpacked", "packed"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_associative_scan_of_a_tuple(combine: Callable[..., Any], shape: tuple[int, int],
                                     device: torch.device) -> None:
    x = torch.randn(shape) - 3

    def op(v: Any) -> Any:
        total, peak = hl.associative_scan(combine, (v, v * 2), 1)
        return total + peak
    _check(device, rows, x, op, x.cumsum(1) + (x * 2).cummax(1).values, 1e-4)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_reduce_with_a_combine_function_ignores_lanes_past_the_row(shape: tuple[int, int],
                                                                  device: torch.device) -> None:
    x = torch.randn(shape) - 5
    _check(device, row_values, x, lambda v: hl.reduce(lambda a, b: torch.maximum(a, b), v, dim=1), x.amax(1))


def _argmax_combine(value_a: Any, index_a: Any, value_b: Any, index_b: Any) -> tuple[Any, Any]:
    take_a = (value_a > value_b) | ((value_a == value_b) & (index_a < index_b))
    return torch.where(take_a, value_a, value_b), torch.where(take_a, index_a, index_b)


def argmax_rows(x: T) -> T:
    out = torch.empty(x.size(0), dtype=torch.int32, device=x.device)
    for tile in hl.tile(x.size(0)):
        row = x[tile, :]
        index = torch.zeros_like(row, dtype=torch.int32) + hl.arange(hl.specialize(x.size(1)))[None, :]
        _, where = hl.reduce(_argmax_combine, (row, index), dim=1, other=float("-inf"))
        out[tile] = where
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_reduce_of_a_tuple_gives_argmax(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape) - 5
    for mode in _modes(device):
        result = tessera.kernel(argmax_rows, mode=mode, config=CONFIG)(x.to(device))
        assert result.cpu().tolist() == x.argmax(1).int().tolist(), mode


def reduce_everything(x: T) -> T:
    out = torch.empty(x.size(0), 1, 1, dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :, :] = hl.reduce(lambda a, b: a + b, x[tile, :, :], dim=None, keep_dims=True)[None, :, :].sum(1)
    return out


def test_reduce_over_every_dim_keeps_dims(device: torch.device) -> None:
    x = torch.randn(3, 2, 5)
    expected = x.sum().expand(3, 1, 1)
    for mode in _modes(device):
        result = tessera.kernel(reduce_everything, mode=mode, config=CONFIG)(x.to(device))
        torch.testing.assert_close(result.cpu(), expected, rtol=1e-5, atol=1e-5, msg=lambda text: f"{mode}: {text}")


def scan_in_inner_loop(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        for tile_n in hl.tile(x.size(1)):
            out[tile_m, tile_n] = hl.cumsum(x[tile_m, tile_n], 1)
    return out


def test_scan_inside_an_inner_loop(device: torch.device) -> None:
    x = torch.randn(5, 11)
    expected = torch.cat([x[:, :8].cumsum(1), x[:, 8:].cumsum(1)], dim=1)
    for mode in _modes(device):
        result = tessera.kernel(scan_in_inner_loop, mode=mode, config=tessera.Config(block_sizes=[4, 8]))(x.to(device))
        torch.testing.assert_close(result.cpu(), expected, rtol=1e-5, atol=1e-5, msg=lambda text: f"{mode}: {text}")


def combine_reads_a_tile(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        row = x[tile, :]
        out[tile, :] = hl.associative_scan(lambda a, b: a + b * row, row, 1)  # line: outside
    return out


def test_a_combine_function_reading_a_tile_is_refused_with_its_line() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="a value from outside the function") as info:
        tessera.kernel(combine_reads_a_tile, mode="interpret", config=CONFIG)(torch.randn(3, 4))
    assert "# line: outside" in str(info.value)


def test_a_combine_function_returning_too_few_values_is_refused() -> None:
    with pytest.raises(exc.TesseraError, match="returned 1 values for 2 operands"):
        tessera.kernel(rows, mode="interpret", config=CONFIG)(
            torch.randn(3, 4), lambda v: hl.associative_scan(lambda a, b: a[0], (v, v), 1)[0])


def test_hl_reduce_is_the_function_not_a_module() -> None:
    assert callable(hl.reduce) and hl.reduce.__module__ == "tessera.language.scans"


def test_a_scan_along_a_long_row_holds_the_row_in_one_block(device: torch.device) -> None:
    x = torch.randn(2, 5000)  # longer than one block by default: chunks cannot carry a scan
    _check(device, rows, x, lambda v: v.cumsum(1), x.cumsum(1), tolerance=1e-3)


def segmented_sums(x: T, segment: T) -> T:
    out = torch.empty_like(x)
    for tile_r, tile_c in hl.tile(x.size()):
        values = x[tile_r, tile_c]
        ids = segment[tile_r].unsqueeze(1).expand_as(values)
        out[tile_r, tile_c], _ = torch._higher_order_ops.associative_scan(_segment_sum, (values, ids), 0)
    return out


def _segment_sum(a: Any, a_id: Any, b: Any, b_id: Any) -> tuple[Any, Any]:
    return torch.where(a_id == b_id, a + b, b), b_id


@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (16, 5)])
def test_torch_associative_scan_hop_in_a_tile_loop_is_hl_associative_scan(shape):
    x = torch.randn(*shape)
    segment = (torch.arange(shape[0]) // 2).float()
    kernel = tessera.kernel(segmented_sums, mode="interpret", config=tessera.Config(block_sizes=[16, 8]))
    expected = torch.cat([part.cumsum(0) for part in x.split(2)])  # sums restart at each pair of rows
    torch.testing.assert_close(kernel(x, segment), expected)


@tessera.kernel
def _decorated_add(a: Any, b: Any) -> Any:
    return a + b


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_kernel_as_combine_function_runs_inline(mode, shape):
    x = torch.randn(*shape)
    kernel = tessera.kernel(rows, mode=mode, config=CONFIG)
    op = lambda v: hl.associative_scan(_decorated_add, v, 1) + hl.reduce(_decorated_add, v, 1, keep_dims=True)  # noqa: E731
    torch.testing.assert_close(kernel(x, op), x.cumsum(1) + x.sum(1, keepdim=True), atol=1e-5, rtol=1e-5)


def test_generated_combine_helpers_are_named_after_the_users_function():
    def running_max(a: Any, b: Any) -> Any:
        return torch.maximum(a, b)
    x = torch.randn(3, 5)
    kernel = tessera.kernel(rows, config=CONFIG)
    code = kernel.bind(x, lambda v: hl.associative_scan(running_max, v, 1) + hl.reduce(lambda a, b: a + b, v, 1,
                                                                                          keep_dims=True)).to_triton_code()
    assert "def running_max_v" in code and "def combine_v" in code  # a lambda's helper keeps the plain name
