"""A fixed slice of benchmarks/program_fuzz.py, and the minimised programs its campaign found.

The fuzz draws kernels that chain session 11's ops (lane moves, order statistics, contractions,
pointwise extras) over odd shapes, dtypes and layouts and compares eager and interpret mode with
PyTorch. Each regression below is one finding, minimised, named after the behaviour it broke; it
runs in eager mode and in the device's compiled mode (interpret on CPU).
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from benchmark_modules import load_benchmark
from tessera import exc

program_fuzz = load_benchmark("program_fuzz")

SEEDS = range(12)
T = torch.Tensor


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


def _assert_located(error: BaseException, kind: type[exc.TesseraError] = exc.TesseraError) -> None:
    assert isinstance(error, kind), f"{type(error).__name__}: {error}"
    assert "internal error" not in str(error), str(error)
    assert error.location is not None and os.path.basename(error.location.filename) == os.path.basename(__file__), \
        f"located at {error.location}"
    assert error.hint, str(error)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_agrees_with_torch_in_every_mode(seed: int) -> None:
    findings, _refusal = program_fuzz.run_seed(seed)
    assert not findings, "\n".join(f"[{f.kind}] {f.detail}\n{f.program}" for f in findings)


# -- torch.isclose: integer differences wrapped (int8 -128 vs 127 "close"), bools were an internal
# -- error, isclose(1, inf) and isclose(inf, -inf) were True, zero tolerances given as arguments --
def isclose_with(a: T, b: T, out: T, rtol: float, atol: float, equal_nan: bool) -> T:
    for tile in hl.tile(a.size(0)):
        out[tile] = torch.isclose(a[tile], b[tile], rtol=rtol, atol=atol, equal_nan=equal_nan)
    return out


def isclose_constant(a: T, b: T, out: T) -> T:
    for tile in hl.tile(a.size(0)):
        out[tile] = torch.isclose(a[tile], b[tile], rtol=3.0, atol=1.0) | torch.isclose(a[tile], b[tile], 0.0, 0.0)
    return out


def _isclose_operands(dtype: torch.dtype) -> tuple[T, T]:
    if dtype == torch.bool:
        return torch.tensor([0, 1, 0, 1]).bool(), torch.tensor([0, 0, 1, 1]).bool()
    if dtype.is_floating_point:
        inf, nan, top = float("inf"), float("nan"), torch.finfo(dtype).max
        a = [1.0, inf, inf, -inf, nan, nan, top, top, 1.0, 0.0, -0.0, 1e-8, 3.0]
        b = [inf, inf, -inf, -inf, nan, 1.0, -top, top / 2, 1.00001, -0.0, 1e-9, 0.0, 3.5]
        return torch.tensor(a, dtype=torch.float64).to(dtype), torch.tensor(b, dtype=torch.float64).to(dtype)
    info = torch.iinfo(dtype)
    low = 0 if dtype == torch.uint8 else info.min
    a = torch.tensor([low, info.max, 0, 5, 100, low, 3, info.max - 1], dtype=torch.int64)
    b = torch.tensor([info.max, low, 0, 6, 100, low + 1, 4, info.max], dtype=torch.int64)
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64, torch.float32,
                                   torch.float16, torch.bfloat16], ids=lambda dtype: str(dtype)[6:])
def test_isclose_matches_torch_for_every_dtype_and_tolerance(dtype: torch.dtype, device: torch.device) -> None:
    a, b = _isclose_operands(dtype)
    for rtol, atol, equal_nan in [(1e-5, 1e-8, False), (0.5, 1.0, True), (0.0, 0.0, False), (0.0, 1e-3, True)]:
        expected = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        for mode in _modes(device):
            out = torch.zeros(a.shape, dtype=torch.bool, device=device)
            result = tessera.kernel(isclose_with, mode=mode)(a.to(device), b.to(device), out, rtol, atol, equal_nan)
            assert torch.equal(result.cpu(), expected), f"{mode} rtol={rtol} atol={atol}: {result} vs {expected}"
    expected = torch.isclose(a, b, rtol=3.0, atol=1.0) | torch.isclose(a, b, 0.0, 0.0)
    for mode in _modes(device):
        out = torch.zeros(a.shape, dtype=torch.bool, device=device)
        result = tessera.kernel(isclose_constant, mode=mode)(a.to(device), b.to(device), out)
        assert torch.equal(result.cpu(), expected), f"{mode} constant tolerances: {result} vs {expected}"


# -- the method spellings torch takes: v.flip(1) was refused, v.flip(0, 1) / v.tile(1, 2) raw TypeErrors
def rearranged(x: T, out: T, rearrange: Callable[[Any], Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = rearrange(x[tile, :])
    return out


def _flip_one(v: Any) -> Any:
    return v.flip(1)


def _flip_varargs(v: Any) -> Any:
    return v[:, None, :].flip(1, 2)[:, 0]


def _tile_varargs(v: Any) -> Any:
    return v.tile(1, 2)


def _tile_one(v: Any) -> Any:
    return v.tile(2)


@pytest.mark.parametrize("rearrange", [_flip_one, _flip_varargs, _tile_varargs, _tile_one])
def test_flip_and_tile_method_spellings_match_torch(rearrange: Callable[[Any], Any], device: torch.device) -> None:
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(1)).to(device)
    expected = rearrange(x)
    for mode in _modes(device):
        out = torch.zeros(expected.shape, device=device)
        result = tessera.kernel(rearranged, mode=mode, config=tessera.Config(block_sizes=[4]))(x, out, rearrange)
        torch.testing.assert_close(result, expected, msg=lambda text: f"{mode}: {text}")


# -- Tensor.narrow: a negative start was an empty slice (refused), a start + length past the end a
# -- shorter value (computed where torch raises) ---------------------------------------------------
def narrowed_sum(x: T, start: int, length: int) -> T:
    out = torch.zeros(x.size(0), device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].narrow(1, start, length).sum(1)
    return out


@pytest.mark.parametrize("start, length", [(-2, 2), (-5, 5), (-3, 1), (2, 3)])
def test_narrow_counts_a_negative_start_from_the_end(start: int, length: int, device: torch.device) -> None:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(2)).to(device)
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(narrowed_sum, mode=mode)(x, start, length),
                                   x.narrow(1, start, length).sum(1), msg=lambda text: f"{mode}: {text}")


@pytest.mark.parametrize("start, length", [(3, 5), (-6, 1)])
def test_narrow_past_the_dim_is_a_located_error(start: int, length: int, device: torch.device) -> None:
    x = torch.randn(3, 5, device=device)
    with pytest.raises(exc.IndexingError) as caught:
        tessera.kernel(narrowed_sum, mode=_modes(device)[1])(x, start, length)
    _assert_located(caught.value)


# -- eager mode lost track of a tile dim after a slice, repeat or index_select: it flipped the
# -- block's rows (an answer that depends on the block size) where the trace refuses --------------
def _sliced(v: Any) -> Any:
    return v[:, :3].flip(0)


def _repeated(v: Any) -> Any:
    return v[:, :1].repeat(1, 3).roll(1, 0)


def _selected(v: Any) -> Any:
    return v.index_select(1, torch.tensor([0, 1, 2])).flip(0)


def _after_median(v: Any) -> Any:
    return v.median(dim=1).values[:, None].repeat(1, 3).flip([0, 1])


def _after_cummax(v: Any) -> Any:
    return torch.cummax(v, 1).values[:, 0][:, None].expand(-1, 3).flip(0)


@pytest.mark.parametrize("rearrange", [_sliced, _repeated, _selected, _after_median, _after_cummax])
def test_moving_lanes_along_a_tile_dim_is_refused_in_every_mode(rearrange: Callable[[Any], Any],
                                                                device: torch.device) -> None:
    x = torch.randn(6, 5, device=device)
    for mode in _modes(device):
        with pytest.raises(exc.UnsupportedOperationError) as caught:
            tessera.kernel(rearranged, mode=mode, config=tessera.Config(block_sizes=[2]))(
                x, torch.zeros(6, 3, device=device), rearrange)
        assert "which is a tile" in str(caught.value), f"{mode}: {caught.value}"


def _narrowed_then_flipped(v: Any) -> Any:
    return v.narrow(1, 1, 3).flip(1)[:, 0][:, None].repeat(1, 3)


def test_whole_dim_moves_after_a_slice_still_match_torch_in_eager(device: torch.device) -> None:
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(3)).to(device)
    for mode in _modes(device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = tessera.kernel(rearranged, mode=mode, config=tessera.Config(block_sizes=[4]))(
                x, torch.zeros(6, 3, device=device), _narrowed_then_flipped)
        torch.testing.assert_close(result, _narrowed_then_flipped(x), msg=lambda text: f"{mode}: {text}")


def first_row_of_block(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile].repeat(1, 1, 2)[0][:, 0]
    return out


def test_an_int_index_of_a_tile_dim_is_refused_after_a_partial_index_in_every_mode(device: torch.device) -> None:
    """`x[tile]` of a 3-D tensor lost its lanes in eager mode, so `[0]` of its tile dim read each
    block's first row (an answer that depends on the block size) where the trace refuses."""
    x = torch.randn(4, 2, 3, device=device)
    for mode in _modes(device):
        with pytest.raises(exc.UnsupportedOperationError) as caught:
            tessera.kernel(first_row_of_block, mode=mode, config=tessera.Config(block_sizes=[2]))(
                x, torch.zeros(4, device=device))
        _assert_located(caught.value)


# -- eager mode cut a value of 8 loaded lanes to a row of 7 at the store (a padded row is Helion's
# -- hl.zeros([tile, next_power_of_2(n)]), never data read from memory): silently dropped a column --
def store_row(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :].to(torch.float32) * 2
    return out


def add_row(x: T, y: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] + y[tile, :]
    return out


def padded_accumulator(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        acc = hl.zeros([tile, 8], dtype=torch.float32)
        acc = acc + x[tile, :]
        out[tile, :] = acc
    return out


def test_a_store_of_more_loaded_lanes_than_the_row_is_refused_in_every_mode(device: torch.device) -> None:
    x = torch.randn(4, 8, device=device)
    for mode in _modes(device):
        with pytest.raises(exc.ShapeMismatchError) as caught:
            tessera.kernel(store_row, mode=mode)(x, torch.zeros(4, 7, device=device))
        assert caught.value.location is not None, mode
        with pytest.raises(exc.ShapeMismatchError):
            tessera.kernel(add_row, mode=mode)(x, x[:, :7], torch.zeros(4, 7, device=device))


def test_a_row_padded_to_a_power_of_two_still_combines_with_the_row(device: torch.device) -> None:
    x = torch.randn(4, 7, device=device)
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(padded_accumulator, mode=mode)(x, torch.zeros(4, 7, device=device)),
                                   x, msg=lambda text: f"{mode}: {text}")


# -- sizes decided in Python: `torch.roll(v, half(v.size(1)), 1)` was a raw TypeError ('floor' object
# -- is not iterable), `v * v.size(1)` and counts from size expressions were refused --------------
def _half(n: Any) -> Any:
    return n // 2 if n > 1 else 1


def _rolled_by_half(v: Any) -> Any:
    return torch.roll(v, _half(v.size(1)), 1)


def _scaled_by_size(v: Any) -> Any:
    return v * v.size(1) + v.size(-1) * v


def _repeated_by_half(v: Any) -> Any:
    return v.repeat(1, _half(v.size(1)))[:, :4]


def _split_by_half(v: Any) -> Any:
    return torch.tensor_split(v, _half(v.size(1)), 1)[0][:, :1] + torch.tensor_split(v, [_half(v.size(1))], 1)[1][:, :1]


def sized_body(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        out[tile, :] = torch.roll(v, _half(v.size(1)), 1)[:, :4] * v.size(1)
    return out


@pytest.mark.parametrize("rearrange", [_rolled_by_half, _scaled_by_size, _repeated_by_half, _split_by_half])
def test_sizes_decided_in_python_match_torch_and_retrace_for_other_sizes(rearrange: Callable[[Any], Any],
                                                                         device: torch.device) -> None:
    for mode in _modes(device):
        kernel = tessera.kernel(rearranged, mode=mode, config=tessera.Config(block_sizes=[4]))
        for columns in (5, 8, 5, 4):  # another size must not reuse the variant the first one pinned
            x = torch.randn(7, columns, generator=torch.Generator().manual_seed(columns)).to(device)
            expected = rearrange(x)
            result = kernel(x, torch.zeros(expected.shape, device=device), rearrange)
            torch.testing.assert_close(result, expected, msg=lambda text: f"{mode}, {columns} columns: {text}")


def test_sizes_decided_in_the_kernel_body_retrace_for_other_sizes(device: torch.device) -> None:
    for mode in _modes(device):
        kernel = tessera.kernel(sized_body, mode=mode, config=tessera.Config(block_sizes=[4]))
        for columns in (5, 8, 5, 6):
            x = torch.randn(7, columns, generator=torch.Generator().manual_seed(columns)).to(device)
            expected = torch.roll(x, _half(columns), 1)[:, :4] * columns
            torch.testing.assert_close(kernel(x, torch.zeros(7, 4, device=device)), expected,
                                       msg=lambda text: f"{mode}, {columns} columns: {text}")


# -- the truth of a size expression in a helper (`2.0 if n % 2 else 3.0`) was always True in compiled
# -- modes (a sympy object), so a call with an even size silently took the odd branch ---------------
def _by_parity(n: Any) -> float:
    return 2.0 if n % 2 else 3.0


def scaled_by_parity(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * _by_parity(x.size(1)) + _by_parity(x[tile, :].size(1) // 2)
    return out


def test_the_truth_of_a_size_expression_in_a_helper_is_decided_per_call(device: torch.device) -> None:
    for mode in _modes(device):
        kernel = tessera.kernel(scaled_by_parity, mode=mode)
        for columns in (5, 6, 4, 7):
            x = torch.ones(3, columns, device=device)
            expected = x * _by_parity(columns) + _by_parity(columns // 2)
            torch.testing.assert_close(kernel(x, torch.zeros(3, columns, device=device)), expected,
                                       msg=lambda text: f"{mode}, {columns} columns: {text}")
