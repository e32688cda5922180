"""`hl.dot_scaled` (issue 15): block-scaled products in the microscaling formats, each operand
dequantized by a power-of-two scale per 32 elements of K, in every mode against torch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "bf16": torch.bfloat16, "fp16": torch.float16}


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def scaled_product(x: T, x_scale: T, y: T, y_scale: T, x_format: str, y_format: str) -> T:
    m, _ = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.full([tile_m, tile_n], 1.0, dtype=torch.float32)
        acc = hl.dot_scaled(x[tile_m, :], x_scale[tile_m, :], x_format, y[:, tile_n], y_scale[tile_n, :], y_format,
                            acc=acc)
        out[tile_m, tile_n] = acc
    return out


def half_result(x: T, x_scale: T, y: T, y_scale: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], dtype=torch.float16, device=x.device)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = hl.dot_scaled(x[tile_m, :], x_scale[tile_m, :], "bf16", y[:, tile_n], y_scale[tile_n, :],
                                            "bf16", out_dtype=torch.float16)
    return out


def _values(fmt: str, shape: tuple[int, int], device: torch.device) -> T:
    return (torch.randn(shape, device=device) * 2).to(FORMATS[fmt])


def _dequantized(data: T, scale: T, rows: bool) -> T:
    factor = torch.pow(2.0, scale.float() - 127).repeat_interleave(32, 1)
    factor = factor[:, :data.size(1 if rows else 0)]
    return data.float() * (factor if rows else factor.T)


@pytest.mark.parametrize("sizes", [(37, 96, 19), (1, 32, 1), (16, 64, 32)], ids=str)
@pytest.mark.parametrize("formats", [("e4m3", "e4m3"), ("e5m2", "e4m3"), ("bf16", "fp16")], ids="-".join)
def test_dot_scaled_matches_the_dequantized_product(sizes: tuple[int, int, int], formats: tuple[str, str],
                                                    device: torch.device) -> None:
    m, k, n = sizes
    x, y = _values(formats[0], (m, k), device), _values(formats[1], (k, n), device)
    x_scale = torch.randint(120, 134, (m, k // 32), dtype=torch.uint8, device=device)
    y_scale = torch.randint(120, 134, (n, k // 32), dtype=torch.uint8, device=device)
    reference = 1 + _dequantized(x, x_scale, True).cpu() @ _dequantized(y, y_scale, False).cpu()
    for mode in _modes(device):
        kernel = tessera.kernel(scaled_product, mode=mode, config=tessera.Config(block_sizes=[16, 16]),
                                dot_precision="ieee")
        torch.testing.assert_close(kernel(x, x_scale, y, y_scale, *formats).cpu(), reference, rtol=1e-5, atol=1e-4)


def test_fp8_operands_may_be_passed_as_their_uint8_bits(device: torch.device) -> None:
    x, y = _values("e4m3", (8, 64), device), _values("e5m2", (64, 8), device)
    scales = torch.full((8, 2), 127, dtype=torch.uint8, device=device)
    for mode in _modes(device):
        kernel = tessera.kernel(scaled_product, mode=mode)
        assert torch.equal(kernel(x.view(torch.uint8), scales, y.view(torch.uint8), scales, "e4m3", "e5m2"),
                           kernel(x, scales, y, scales, "e4m3", "e5m2"))


def test_out_dtype_without_an_accumulator(device: torch.device) -> None:
    x, y = _values("bf16", (5, 64), device), _values("bf16", (64, 3), device)
    x_scale = torch.full((5, 2), 126, dtype=torch.uint8, device=device)
    y_scale = torch.full((3, 2), 129, dtype=torch.uint8, device=device)
    reference = (x.float() @ y.float() * 2).half().cpu()  # 2**-1 * 2**2
    for mode in _modes(device):
        result = tessera.kernel(half_result, mode=mode, dot_precision="ieee")(x, x_scale, y, y_scale)
        assert result.dtype == torch.float16
        torch.testing.assert_close(result.cpu(), reference, rtol=2e-3, atol=2e-3)


def _e2m1_pack(values: T, dim: int) -> T:
    """fp4 codes (0..15) packed two per byte along `dim`, low nibble first."""
    codes = values.to(torch.uint8)
    low = codes.index_select(dim, torch.arange(0, codes.size(dim), 2))
    high = codes.index_select(dim, torch.arange(1, codes.size(dim), 2))
    return low | (high << 4)


_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def test_e2m1_operands_unpack_along_k_in_eager_mode() -> None:
    codes_x, codes_y = torch.randint(0, 16, (6, 64)), torch.randint(0, 16, (64, 5))
    x_scale = torch.randint(125, 130, (6, 2), dtype=torch.uint8)
    y_scale = torch.randint(125, 130, (5, 2), dtype=torch.uint8)
    reference = 1 + _dequantized(_E2M1[codes_x], x_scale, True) @ _dequantized(_E2M1[codes_y], y_scale, False)
    result = tessera.kernel(scaled_product, mode="eager")(_e2m1_pack(codes_x, 1), x_scale, _e2m1_pack(codes_y, 0),
                                                           y_scale, "e2m1", "e2m1")
    torch.testing.assert_close(result, reference)


def test_e2m1_in_a_compiled_tile_loop_is_refused_at_its_line() -> None:
    packed = torch.zeros(4, 32, dtype=torch.uint8)
    scales = torch.full((4, 2), 127, dtype=torch.uint8)
    with pytest.raises(exc.UnsupportedOperationError, match="e2m1") as error:
        tessera.kernel(scaled_product, mode="interpret")(packed, scales, packed.T.contiguous(), scales, "e2m1", "e2m1")
    assert "test_dot_scaled.py" in str(error.value)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_an_unknown_format_is_refused(mode: str) -> None:
    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    scales = torch.full((4, 2), 127, dtype=torch.uint8)
    with pytest.raises(exc.TesseraError, match="'e3m4' is not a format"):
        tessera.kernel(scaled_product, mode=mode)(x, scales, x.T.contiguous(), scales, "e3m4", "bf16")


def k_tiled(x: T, x_scale: T, y: T, y_scale: T) -> T:
    out = torch.zeros([x.size(0), y.size(1)], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile(out.size()):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(x.size(1)):
            acc = hl.dot_scaled(x[tile_m, tile_k], x_scale[tile_m, :], "bf16", y[tile_k, tile_n], y_scale[tile_n, :],
                                "bf16", acc=acc)
        out[tile_m, tile_n] = acc
    return out


def test_scales_that_do_not_line_up_with_the_k_block_are_refused() -> None:
    x = torch.zeros(4, 128, dtype=torch.bfloat16)
    with pytest.raises(exc.ShapeMismatchError, match="scale block"):
        tessera.kernel(k_tiled, mode="interpret", config=tessera.Config(block_sizes=[4, 4, 32]))(
            x, torch.zeros(4, 4, dtype=torch.uint8), x.T.contiguous(), torch.zeros(4, 4, dtype=torch.uint8))
