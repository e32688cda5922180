"""Soundness fuzz of what careful users write: op spellings, feature combinations, repeat calls, bad input.

tests/test_op_fuzz.py crosses each op-table row with dtypes and edge values; this file covers what
it does not reach. Each test runs a small kernel in eager mode and in the device's compiled mode
(interpret on CPU) against PyTorch on seeded inputs, or checks that a form Tessera cannot compile
is a located `TesseraError` (never a raw Python, torch or Triton exception, never a dropped
argument). Bugs this campaign found each have a test here, named after the behaviour.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

CONFIG = tessera.Config(block_sizes=[4, 16])
INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
T = torch.Tensor


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


def binary(out: T, x: T, y: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = op(x[tile_m, tile_n], y[tile_m, tile_n])
    return out


def _run_binary(op: Callable[..., Any], x: T, y: T, mode: str) -> T:
    expected = op(x.cpu(), y.cpu())
    out = torch.zeros(expected.shape, dtype=expected.dtype, device=x.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tessera.kernel(binary, mode=mode, config=CONFIG)(out, x, y, op)


def _assert_binary_matches_torch(op: Callable[..., Any], x: T, y: T, device: torch.device) -> None:
    expected = op(x, y)
    for mode in _modes(device):
        result = _run_binary(op, x.to(device), y.to(device), mode)
        torch.testing.assert_close(result.cpu(), expected, equal_nan=True, msg=lambda text: f"{mode}: {text}")


def _assert_located(error: BaseException, kind: type[exc.TesseraError] = exc.TesseraError) -> None:
    assert isinstance(error, kind), f"raw {type(error).__name__}: {error}"
    assert "internal error" not in str(error), str(error)
    assert error.location is not None and os.path.basename(error.location.filename) == os.path.basename(__file__), \
        f"located at {error.location}"
    assert error.hint, str(error)


def _integer_operands(dtype: torch.dtype) -> tuple[T, T]:
    """Dividends over the dtype's range with its extremes; nonzero divisors of both signs, never
    -1 beside the minimum (the one quotient that overflows)."""
    generator = torch.Generator().manual_seed(7)
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (5, 37), generator=generator, dtype=torch.int64)
    low = 1 if dtype == torch.uint8 else -9
    y = torch.randint(low, 10, (5, 37), generator=generator, dtype=torch.int64)
    y[y == 0] = 3
    x[0, :4] = torch.tensor([info.min, info.max, 7, 6])
    if dtype != torch.uint8:
        x[1, :4] = torch.tensor([-7, 7, -7, -6])
        y[1, :4] = torch.tensor([2, -2, -2, 3])
        y[(x == info.min) & (y == -1)] = 2
    return x.to(dtype), y.to(dtype)


# -- torch.div's rounding_mode: floor and trunc were true divisions (floats: silently) --------------
@pytest.mark.parametrize("rounding_mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_div_rounding_mode_of_integers_matches_torch(dtype: torch.dtype, rounding_mode: str,
                                                     device: torch.device) -> None:
    x, y = _integer_operands(dtype)
    _assert_binary_matches_torch(lambda a, b: torch.div(a, b, rounding_mode=rounding_mode), x, y, device)
    # a negative scalar divisor wraps into unsigned dtypes first (uint8 // -3 divides by 253)
    _assert_binary_matches_torch(lambda a, b: a.div(-3, rounding_mode=rounding_mode), x, y, device)


def test_div_rounding_mode_floor_of_floats_is_floor_division(device: torch.device) -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(5, 37, generator=generator) * 8
    y = torch.randn(5, 37, generator=generator) + 0.05
    _assert_binary_matches_torch(lambda a, b: torch.div(a, b, rounding_mode="floor"), x, y, device)
    _assert_binary_matches_torch(lambda a, b: torch.div(a, b, rounding_mode=None), x, y, device)


def test_div_rounding_mode_trunc_of_floats_truncates_the_quotient(device: torch.device) -> None:
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(5, 37, generator=generator) * 8
    y = torch.randn(5, 37, generator=generator) + 0.05
    _assert_binary_matches_torch(lambda a, b: torch.div(a, b, rounding_mode="trunc"), x, y, device)


# -- operands given by keyword reached the code generator as missing operands (raw IndexError) ------
@pytest.mark.parametrize("spelling", ["add_other", "maximum_other", "pow_exponent", "where_input_other",
                                      "floor_divide_other"])
def test_operands_given_by_keyword_match_torch(spelling: str, device: torch.device) -> None:
    ops = {"add_other": lambda a, b: torch.add(a, other=b), "maximum_other": lambda a, b: torch.maximum(a, other=b),
           "pow_exponent": lambda a, b: torch.pow(a, exponent=2),
           "where_input_other": lambda a, b: torch.where(a > b, input=a, other=b),
           "floor_divide_other": lambda a, b: torch.floor_divide(a, other=b)}
    generator = torch.Generator().manual_seed(5)
    x, y = torch.randn(5, 37, generator=generator), torch.randn(5, 37, generator=generator) + 0.1
    _assert_binary_matches_torch(ops[spelling], x, y, device)


@pytest.mark.parametrize("spelling", ["where_one_argument"])
def test_forms_without_a_lowering_are_located_refusals(spelling: str, device: torch.device) -> None:
    ops = {"where_one_argument": lambda a, b: torch.where(a > b)}
    x = torch.randn(5, 37, device=device)
    with pytest.raises(exc.TesseraError) as caught:
        out = torch.zeros(5, 37, device=device)
        tessera.kernel(binary, mode=_modes(device)[1], config=CONFIG)(out, x, x, ops[spelling])
    _assert_located(caught.value, exc.UnsupportedOperationError)


# -- autograd and in-place writes: compiled writes were invisible to autograd (silent wrong gradients) --
def copy_into(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile]
    return out


def add_into(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [tile], x[tile])
    return out


@pytest.mark.parametrize("writer", [copy_into, add_into])
def test_overwriting_a_tensor_saved_for_backward_makes_backward_raise_as_in_eager(writer: Callable[..., T],
                                                                                  device: torch.device) -> None:
    for mode in _modes(device):
        kernel = tessera.kernel(writer, mode=mode)
        for call in range(2):  # the second call takes the exact-facts memo's path
            weight = torch.randn(4, device=device, requires_grad=True)
            saved = torch.randn(4, device=device)
            loss = (weight * saved).sum()  # saves `saved` for weight's gradient
            kernel(torch.ones(4, device=device), saved)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                loss.backward()


def test_a_compiled_write_into_a_tensor_requiring_grad_is_refused_outside_no_grad(device: torch.device) -> None:
    kernel = tessera.kernel(copy_into, mode=_modes(device)[1])
    target = torch.randn(4, device=device, requires_grad=True) * 1  # a non-leaf: eager records the copy
    with pytest.raises(exc.KernelArgumentError) as caught:
        kernel(torch.ones(4, device=device), target)
    _assert_located(caught.value)
    with torch.no_grad():
        kernel(torch.ones(4, device=device), target)
    torch.testing.assert_close(target.detach(), torch.ones(4, device=device))


# -- gathers: negative index values were masked to 0 in compiled modes where torch (and eager's scalar
# -- indices) count from the end; bool/uint8 index tensors (masks in torch) were gathered as 0/1 ------
def gather_rows(x: T, rows: T) -> T:
    out = torch.empty(rows.size(0), x.size(1), device=x.device)
    for tile in hl.tile(rows.size(0)):
        out[tile, :] = x[rows[tile], :] * 2
    return out


def gather_scalar(x: T, rows: T) -> T:
    out = torch.empty(rows.size(0), x.size(1), device=x.device)
    for i in hl.grid(rows.size(0)):
        out[i, :] = x[rows[i], :] * 2
    return out


def scatter(values: T, positions: T, out: T) -> T:
    for tile in hl.tile(positions.size(0)):
        out[positions[tile]] = values[tile]
    return out


@pytest.mark.parametrize("kernel", [gather_rows, gather_scalar])
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("static_shapes", [False, True])
def test_negative_gather_indices_count_from_the_end_in_every_mode(kernel: Callable[..., T], dtype: torch.dtype,
                                                                  static_shapes: bool, device: torch.device) -> None:
    x = torch.arange(200 * 3, dtype=torch.float32, device=device).reshape(200, 3)  # rows past int8's range
    rows = torch.tensor([-1, -100, 5, -128, 127, 0, -200], device=device).to(dtype)
    expected = x[rows.long()] * 2
    for mode in _modes(device):
        result = tessera.kernel(kernel, mode=mode, static_shapes=static_shapes)(x, rows)
        torch.testing.assert_close(result, expected, msg=lambda text: f"{mode}: {text}")


def test_negative_scatter_indices_count_from_the_end_in_every_mode(device: torch.device) -> None:
    positions = torch.tensor([-1, -6, 2], device=device)
    values = torch.tensor([1.0, 2.0, 3.0], device=device)
    expected = torch.zeros(6, device=device).index_put_((positions,), values)
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(scatter, mode=mode)(values, positions, torch.zeros(6, device=device)),
                                   expected, msg=lambda text: f"{mode}: {text}")


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8])
def test_mask_dtyped_index_tensors_are_located_refusals(dtype: torch.dtype, device: torch.device) -> None:
    x = torch.arange(5.0 * 3, device=device).reshape(5, 3)
    rows = torch.tensor([1, 0, 1, 1, 0], device=device).to(dtype)
    with pytest.raises(exc.IndexingError) as caught:
        tessera.kernel(gather_rows, mode=_modes(device)[1])(x, rows)
    _assert_located(caught.value)


# -- loop-carried dtypes: a result the body promoted was cast back to the carried dtype in every
# -- iteration (fp16 rounding, int truncation) where eager carries the promoted value on -----------
def carried_sum(x: T, start: torch.dtype) -> T:
    out = torch.empty(x.size(0), dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        acc = hl.zeros([tile_m], dtype=start)
        for tile_n in hl.tile(x.size(1)):
            acc = acc + x[tile_m, tile_n].sum(1)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("start", [torch.float16, torch.int32, torch.bool])
def test_a_carried_value_promoted_by_the_loop_is_a_located_refusal(start: torch.dtype, device: torch.device) -> None:
    x = torch.rand(5, 40, device=device) * 100
    with pytest.raises(exc.DtypeError) as caught:
        tessera.kernel(carried_sum, mode=_modes(device)[1], config=CONFIG)(x, start)
    _assert_located(caught.value)


@pytest.mark.parametrize("start, dtype", [(torch.float32, torch.float16), (torch.int32, torch.int8),
                                          (torch.int32, torch.int32)])
def test_carried_values_whose_dtype_holds_the_result_match_eager(start: torch.dtype, dtype: torch.dtype,
                                                                 device: torch.device) -> None:
    x = (torch.rand(5, 40, device=device) * 20).to(dtype)
    results = [tessera.kernel(carried_sum, mode=mode, config=CONFIG)(x, start) for mode in _modes(device)]
    torch.testing.assert_close(results[1], results[0], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(results[0], x.double().sum(1).float(), rtol=1e-3, atol=1e-2)


# -- bf16 subnormals: Triton 3.6's interpreter widened them to 0 or to wrong normals ------------------
def widen_and_test(x: T, out: T, flags: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile].to(torch.float32) * 1.0
        flags[tile] = x[tile].to(torch.bool)
    return out


def test_bf16_subnormals_widen_exactly_in_every_mode(device: torch.device) -> None:
    x = torch.tensor([1e-40, 1e-39, -1e-40, 3e-39, 0.0, -0.0, 1.0, float("inf")], dtype=torch.bfloat16, device=device)
    for mode in _modes(device):
        out = torch.zeros(8, device=device)
        flags = torch.zeros(8, dtype=torch.bool, device=device)
        tessera.kernel(widen_and_test, mode=mode)(x, out, flags)
        torch.testing.assert_close(out, x.float(), rtol=0, atol=0, msg=lambda text: f"{mode}: {text}")
        assert torch.equal(flags, x.bool()), mode
