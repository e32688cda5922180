"""Edge values (NaN, inf, -0.0, zero divisors, wrapping integers) give PyTorch's answers in every mode.

Each test is one instance of a class the op fuzzer (tests/test_op_fuzz.py) also covers, kept here
as a readable specification. `test_gpu_reduction_forms_*` run the code the GPU gets (tl.reduce with
NaN-aware combine functions) through Triton's interpreter, so the CPU suite checks it too.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.backends.triton import numerics
from tessera.backends.triton.codegen import _HELPERS
from tessera.backends.triton.modules import import_generated, write_generated

NAN, INF = float("nan"), float("inf")


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


def _binary(out: torch.Tensor, x: torch.Tensor, y: torch.Tensor, op: Callable[..., Any]) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = op(x[tile], y[tile])
    return out


def _rows(out: torch.Tensor, index: torch.Tensor, x: torch.Tensor, op: Callable[..., Any]) -> tuple[torch.Tensor, torch.Tensor]:
    for tile in hl.tile(x.size(0)):
        values, indices = op(x[tile, :])
        out[tile] = values
        index[tile] = indices
    return out, index


def _check_binary(op: Callable[..., Any], x: torch.Tensor, y: torch.Tensor, device: torch.device) -> None:
    expected = op(x, y)
    for mode in _modes(device):
        kernel = tessera.kernel(_binary, mode=mode, config=tessera.Config(block_sizes=[4]))
        result = kernel(torch.zeros_like(expected, device=device), x.to(device), y.to(device), op).cpu()
        torch.testing.assert_close(result, expected, equal_nan=True, rtol=0, atol=0, msg=lambda text: f"{mode}: {text}")
        numbers = ~expected.isnan()  # a NaN's sign bit means nothing
        assert torch.equal(torch.signbit(result[numbers]), torch.signbit(expected[numbers])), f"{mode}: signs of zeros differ"


_DIVIDENDS = torch.tensor([1.0, 7.0, -7.0, 5.0, -0.0, NAN, INF, 3.0, 0.5, -1.0, 6.0, -INF])
_DIVISORS = torch.tensor([0.1, INF, INF, -0.0, 3.0, 1.0, 2.0, -INF, -2.0, 0.0, -3.0, 4.0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_float_floor_division_matches_torch_on_edge_values(dtype: torch.dtype, device: torch.device) -> None:
    _check_binary(lambda a, b: a // b, _DIVIDENDS.to(dtype), _DIVISORS.to(dtype), device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_float_remainder_matches_torch_on_edge_values(dtype: torch.dtype, device: torch.device) -> None:
    _check_binary(lambda a, b: a % b, _DIVIDENDS.to(dtype), _DIVISORS.to(dtype), device)


def _nan_rows(dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    x[0, 5] = NAN
    x[1, 3] = x[1, 30] = NAN
    x[2, :] = NAN
    x[3, 7] = INF
    x[4, 2] = -INF
    return x.to(dtype)


_ROW_REDUCTIONS = {
    "max": lambda v: v.max(-1), "min": lambda v: v.min(-1),
    "amax_argmax": lambda v: (v.amax(-1), v.argmax(-1)), "amin_argmin": lambda v: (v.amin(-1), v.argmin(-1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(_ROW_REDUCTIONS))
def test_max_min_and_arg_reductions_propagate_nan_like_torch(name: str, dtype: torch.dtype, device: torch.device) -> None:
    op = _ROW_REDUCTIONS[name]
    x = _nan_rows(dtype)
    values, indices = op(x)
    for mode in _modes(device):
        kernel = tessera.kernel(_rows, mode=mode, config=tessera.Config(block_sizes=[2]))
        got_values, got_indices = kernel(torch.zeros(6, dtype=dtype, device=device),
                                         torch.zeros(6, dtype=torch.int64, device=device), x.to(device), op)
        torch.testing.assert_close(got_values.cpu(), values, equal_nan=True, msg=lambda text: f"{mode}: {text}")
        assert got_indices.cpu().tolist() == indices.tolist(), mode


def _chunked_amax(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile, 0] = x[tile, :].amax(-1)
        out[tile, 1] = x[tile, :].amin(-1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_amax_and_amin_propagate_nan(dtype: torch.dtype, device: torch.device) -> None:
    x = _nan_rows(dtype)
    expected = torch.stack([x.amax(-1), x.amin(-1)], 1)
    mode = _modes(device)[1]
    kernel = tessera.kernel(_chunked_amax, mode=mode, config=tessera.Config(block_sizes=[2], reduction_loops=[16]))
    result = kernel(torch.zeros(6, 2, dtype=dtype, device=device), x.to(device)).cpu()
    torch.testing.assert_close(result, expected, equal_nan=True)


def _reduction_kernel_source(fn: str) -> str:
    text, helpers = numerics.reduction_expression(fn, "x", torch.float32, 1, False, "[8, 64]",
                                                  "tl.arange(0, 64)[None, :]", interpret=False)
    lines = ["import triton", "import triton.language as tl"]
    for helper in helpers:
        lines += _HELPERS[helper]
    rows, columns = "tl.arange(0, 8)[:, None]", "tl.arange(0, 64)[None, :]"
    lines += ["", "@triton.jit", "def reduce_rows(source, target):",
              f"    x = tl.load(source + {rows} * 64 + {columns})",
              f"    tl.store(target + tl.arange(0, 8), {text})", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("fn", ["amax", "amin", "argmax", "argmin"])
def test_gpu_reduction_forms_propagate_nan(fn: str, device: torch.device) -> None:
    if device.type == "cuda":
        pytest.skip("runs the GPU form in Triton's interpreter; a GPU run executes it compiled in the tests above")
    source = _reduction_kernel_source(fn)
    kernel = import_generated(write_generated(f"reduce_{fn}", source, True), "reduce_rows", source, True)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    x[0, 5] = x[1, 3] = x[1, 60] = NAN
    x[2, :] = NAN
    x[3, 7] = INF
    x[4, 9] = -INF
    x[5, 10] = x[5, 20] = 5.0  # a tie: the first index wins
    x[6, 11] = x[6, 21] = -5.0
    expected = getattr(torch, fn)(x, 1)
    target = torch.zeros(8, dtype=expected.dtype)
    kernel[(1,)](x, target)
    torch.testing.assert_close(target, expected, equal_nan=True)


def _row_mean(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].mean(-1)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mean_of_16_bit_values_divides_before_rounding(dtype: torch.dtype, device: torch.device) -> None:
    x = torch.tensor([[65504.0, 21840.0, 1.0], [-65504.0, -65504.0, 3.0]]).to(dtype)
    expected = x.mean(-1)
    assert expected.isfinite().all()
    for mode in _modes(device):
        result = tessera.kernel(_row_mean, mode=mode)(torch.zeros(2, dtype=dtype, device=device), x.to(device))
        torch.testing.assert_close(result.cpu(), expected, msg=lambda text: f"{mode}: {text}")
