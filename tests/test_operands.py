"""Operands and dtypes: what PyTorch computes is computed, what it (or Triton) cannot is refused at trace time.

Scalars enter an op as torch's kernels take them (wrapped into an integer dtype, rounded into
fp32), 0-d tensor arguments are read whole, and every refusal is a located `TesseraError` naming
this file's line (marked `# line: <name>`) with a hint, never a backend failure or a raw
KeyError/TypeError/AttributeError. Tensors whose memory does not hold their values (a negative-bit
view) or whose dtype has no Triton type are refused at the call.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from marked_lines import marked_line

THIS_FILE = os.path.basename(__file__)


def line_of(name: str) -> int:
    """Line number in this file of the line marked `# line: <name>`."""
    return marked_line(__file__, name)[0]


def _compiled_mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _unary(out: torch.Tensor, x: torch.Tensor, op: Callable[..., Any]) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = op(x[tile])
    return out


def _check(op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, device: torch.device) -> None:
    expected = op(x)
    for mode in ("eager", _compiled_mode(device)):
        kernel = tessera.kernel(_unary, mode=mode, config=tessera.Config(block_sizes=[4]))
        result = kernel(torch.zeros_like(expected, device=device), x.to(device), op).cpu()
        assert result.dtype == expected.dtype
        torch.testing.assert_close(result, expected, equal_nan=True, msg=lambda text: f"{mode}: {text}")


def _refused(op: Callable[[torch.Tensor], Any], x: torch.Tensor, device: torch.device, line: str | int,
             error: type[exc.TesseraError] = exc.TesseraError, out_dtype: torch.dtype | None = None) -> exc.TesseraError:
    kernel = tessera.kernel(_unary, mode=_compiled_mode(device), config=tessera.Config(block_sizes=[4]))
    out = torch.zeros(x.shape, dtype=out_dtype or x.dtype, device=device)
    with pytest.raises(error) as info:
        kernel(out, x.to(device), op)
    assert info.value.location is not None
    number = line if isinstance(line, int) else line_of(line)
    assert (os.path.basename(info.value.location.filename), info.value.location.lineno) == (THIS_FILE, number)
    assert info.value.hint
    return info.value


_INT8 = torch.tensor([1, 100, -100, 127, -128, 0, 5, 3], dtype=torch.int8)


@pytest.mark.parametrize("name, op", [
    ("add", lambda v: v + 1000), ("floordiv", lambda v: v // 1000), ("mod", lambda v: v % 1000),
    ("lt", lambda v: v < 1000), ("mul", lambda v: v * 1000), ("and", lambda v: v & 1000),
    ("uint64 scalar", lambda v: v + 2 ** 63 + 5),
], ids=lambda value: value if isinstance(value, str) else "")
def test_an_int_scalar_wraps_into_the_tensors_integer_dtype_as_in_torch(name: str, op: Any, device: torch.device) -> None:
    _check(op, _INT8, device)


def test_a_float_scalar_rounds_into_fp32_as_in_torch(device: torch.device) -> None:
    _check(lambda v: v + 1e300, torch.tensor([1.0, -2.0, 3.0], dtype=torch.float16), device)


def test_invert_of_uint8_flips_its_bits(device: torch.device) -> None:
    _check(lambda v: ~v, torch.tensor([0, 1, 255, 128, 7], dtype=torch.uint8), device)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 7])
def test_integer_pow_stays_integer_and_wraps_as_in_torch(exponent: int, device: torch.device) -> None:
    _check(lambda v: v ** exponent, _INT8, device)


@pytest.mark.parametrize("function", [torch.logical_and, torch.logical_or, torch.logical_xor])
def test_logical_ops_treat_nonzero_as_true(function: Callable[..., Any], device: torch.device) -> None:
    _check(lambda v: function(v, v - 1), _INT8, device)
    _check(lambda v: function(v, v), torch.tensor([0.0, float("nan"), -0.0, 2.0]), device)


def test_logical_not_of_floats_is_bool(device: torch.device) -> None:
    _check(lambda v: torch.logical_not(v), torch.tensor([0.0, float("nan"), -0.0, 2.0]), device)


def _times_scalar_tensor(out: torch.Tensor, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = x[tile] * scale + scale
    return out


def test_a_0d_tensor_argument_is_an_operand_that_promotes_like_a_scalar(device: torch.device) -> None:
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float16)
    scale = torch.tensor(3.0)
    expected = x * scale + scale
    assert expected.dtype == torch.float16
    for mode in ("eager", _compiled_mode(device)):
        result = tessera.kernel(_times_scalar_tensor, mode=mode)(torch.zeros_like(x, device=device), x.to(device),
                                                                  scale.to(device))
        torch.testing.assert_close(result.cpu(), expected)


def test_a_python_int_past_64_bits_is_refused(device: torch.device) -> None:
    error = _refused(lambda v: v + 2 ** 64, torch.ones(4), device, "int-too-big", exc.DtypeError)  # line: int-too-big
    assert "64 bits" in str(error)


@pytest.mark.parametrize("scalar", [None, "text", 1j], ids=["None", "str", "complex"])
def test_a_scalar_operand_torch_cannot_add_is_refused(scalar: Any, device: torch.device) -> None:
    error = _refused(lambda v: v + scalar, torch.ones(4), device, "odd-scalar", exc.DtypeError)  # line: odd-scalar
    assert "torch.add" in str(error)


def test_item_of_a_tile_value_is_refused_with_a_hint(device: torch.device) -> None:
    error = _refused(lambda v: v * v.item(), torch.ones(4), device, "item", exc.UnsupportedOperationError)  # line: item
    assert ".item()" in str(error)


@pytest.mark.parametrize("name, op, dtype", [
    ("neg of bool", lambda v: -(v > 0), torch.float32),
    ("argmax of bool", lambda v: (v > 0)[:, None].argmax(1), torch.float32),
    ("mean of int", lambda v: v[:, None].mean(1), torch.int32),
    ("negative integer power", lambda v: v ** -1, torch.int32),
    ("int8 clamp past its range", lambda v: v.clamp(max=1000), torch.int8),
    ("gelu of int", lambda v: torch.nn.functional.gelu(v), torch.int32),
    ("softmax of int", lambda v: torch.softmax(v[:, None], 1)[:, 0], torch.int32),
], ids=lambda value: value if isinstance(value, str) else "")
def test_what_torch_refuses_is_refused_at_trace_time(name: str, op: Any, dtype: torch.dtype, device: torch.device) -> None:
    x = torch.ones(4, dtype=dtype)
    with pytest.raises(Exception):
        op(x)  # torch itself refuses, so eager mode does too
    error = _refused(op, x, device, op.__code__.co_firstlineno, exc.DtypeError, out_dtype=torch.int64)
    assert "PyTorch refuses" in str(error)


def test_a_cast_to_amd_fp8_is_refused(device: torch.device) -> None:
    # NVIDIA's fp8 (e4m3fn, e5m2) casts work (tests/test_tile_ops.py); AMD's fnuz formats are refused
    error = _refused(lambda v: v.to(torch.float8_e5m2fnuz).float(), torch.ones(4), device, "fp8", exc.DtypeError)  # line: fp8
    assert "float8_e5m2fnuz" in str(error)


def _copy(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = x[tile] + 1
    return out


@pytest.mark.parametrize("dtype", [torch.complex64, torch.float8_e4m3fn, torch.uint16])
def test_a_tensor_argument_of_an_unsupported_dtype_is_refused_at_the_call(dtype: torch.dtype, device: torch.device) -> None:
    x = torch.ones(4).to(dtype).to(device)
    kernel = tessera.kernel(_copy, mode=_compiled_mode(device))
    with pytest.raises(exc.DtypeError, match=str(dtype).replace("torch.", "")):
        kernel(torch.zeros(4, device=device), x)


def test_negative_bit_views_are_refused_as_inputs_and_outputs_even_after_a_cached_call(device: torch.device) -> None:
    kernel = tessera.kernel(_copy, mode=_compiled_mode(device))
    x = torch.arange(4.0, device=device)
    kernel(torch.zeros(4, device=device), x)  # a variant and memo entry for this layout
    negated = torch.view_as_complex(torch.stack([x, x], 1)).conj().imag
    assert negated.is_neg()
    with pytest.raises(exc.UnsupportedOperationError, match="resolve_neg"):
        kernel(torch.zeros(4, device=device), negated)
    target = torch.view_as_complex(torch.zeros(4, 2, device=device)).conj().imag
    with pytest.raises(exc.UnsupportedOperationError, match="resolve_neg"):
        kernel(target, x)
    eager = tessera.kernel(_copy, mode="eager")(torch.zeros(4, device=device), negated)
    torch.testing.assert_close(eager, -x + 1)


def _runtime_divisor(out: torch.Tensor, x: torch.Tensor, n: int) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        out[tile] = x[tile] // n + (x[tile] < n).to(torch.int8)
    return out


def test_a_runtime_int_wraps_into_the_tensors_integer_dtype_as_in_torch(device: torch.device) -> None:
    expected = _INT8 // 1000 + (_INT8 < 1000).to(torch.int8)
    for mode in ("eager", _compiled_mode(device)):
        result = tessera.kernel(_runtime_divisor, mode=mode)(torch.zeros(8, dtype=torch.int8, device=device),
                                                              _INT8.to(device), 1000)
        assert result.cpu().tolist() == expected.tolist(), mode


def test_add_with_alpha_on_bools_stays_bool(device: torch.device) -> None:
    _check(lambda v: torch.add(v, v, alpha=2), torch.tensor([True, False, True]), device)
