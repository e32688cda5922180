"""Eager, interpret and compiled modes compute the same thing (or refuse it the same way) for the
awkward cases found by the session-13 sweep: each test one behaviour, against PyTorch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor
CONFIG = tessera.Config(block_sizes=[4])


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def first_column(x: T) -> T:
    out = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :][:, 0]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (4, 8)], ids=str)
def test_a_picked_negative_zero_keeps_its_sign(dtype: torch.dtype, shape: tuple[int, int], device: torch.device) -> None:
    # the lane was picked by a float sum, which starts at +0.0 in Triton's interpreter (numpy) as in torch
    x = torch.full(shape, -0.0, dtype=dtype)
    for mode in _modes(device):
        result = tessera.kernel(first_column, mode=mode, config=CONFIG)(x.to(device)).cpu()
        assert torch.equal(result.signbit(), torch.ones(shape[0], dtype=torch.bool)), mode



SHAPES = [(1, 1), (5, 7), (6, 16), (3, 2)]


def _agree(kernel: object, *args: T, device: torch.device, expected: T) -> None:
    for mode in _modes(device):
        result = tessera.kernel(kernel, mode=mode, config=CONFIG)(*(a.to(device) for a in args)).cpu()
        assert result.dtype == expected.dtype, mode
        torch.testing.assert_close(result, expected, rtol=1e-3, atol=1e-3, msg=mode)


def middle_column(x: T) -> T:
    out = torch.empty(x.size(0), 2, dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        out[tile, 0] = v[:, v.size(1) // 2]
        out[tile, 1] = v[:, v.size(1) - 1 : v.size(1)].sum(1)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_tile_value_index_computed_from_its_size(shape: tuple[int, int], device: torch.device) -> None:
    # `v.size(1) // 2` was a symbol when traced: "indexing a tile value with floor(x_size1/2)"
    x = torch.randn(shape)
    expected = torch.stack([x[:, shape[1] // 2], x[:, -1]], 1)
    _agree(middle_column, x, device=device, expected=expected)


def strided_aranges(x: T) -> T:
    n = x.size(1)
    out = torch.empty(x.size(0), 3, dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        every_third = torch.arange(0, n, 3, device=x.device)
        out[tile, 0] = (v[:, ::3] * every_third[None, :]).sum(1)
        out[tile, 1] = (v[:, 1::2] * torch.arange(1, v.size(1), 2, device=x.device)[None, :]).sum(1)
        out[tile, 2] = (v * torch.arange(0, n, device=x.device)[None, :]).sum(1) + every_third.sum()
    return out


@pytest.mark.parametrize("shape", [*SHAPES, (2, 20)], ids=str)
def test_arange_with_a_step_up_to_a_host_size(shape: tuple[int, int], device: torch.device) -> None:
    # the length ceil(n / step) of a host size n was refused as "not a compile-time int"; it is a
    # whole dim of that runtime length now (one kernel per power-of-two bucket)
    x = torch.randint(-5, 5, shape)
    n = shape[1]
    expected = torch.stack([(x[:, ::3] * torch.arange(0, n, 3)).sum(1), (x[:, 1::2] * torch.arange(1, n, 2)).sum(1),
                            (x * torch.arange(n)).sum(1) + torch.arange(0, n, 3).sum()], 1)
    _agree(strided_aranges, x, device=device, expected=expected)


def extreme_of_an_empty_piece(x: T) -> T:
    out = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.tensor_split(x[tile, :], 4, 1)[3].amax(1)
    return out


def extreme_of_a_row(x: T) -> T:
    out = torch.empty(x.size(0), dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].argmax(1)
    return out


def test_an_extreme_of_no_elements_is_refused_in_every_mode(device: torch.device) -> None:
    # the masked reduction answered -inf where torch (and eager mode) refuse
    for mode in _modes(device):
        with pytest.raises(tessera.exc.TorchOperationError, match="amax"):
            tessera.kernel(extreme_of_an_empty_piece, mode=mode, config=CONFIG)(torch.randn(5, 3, device=device))
        kernel = tessera.kernel(extreme_of_a_row, mode=mode, config=CONFIG)
        assert kernel(torch.ones(5, 1, device=device)).tolist() == [0] * 5  # sizes 0 and 1 share a block
        with pytest.raises(tessera.exc.TorchOperationError, match="argmax"):
            kernel(torch.ones(5, 0, device=device))


def einsum_rows(x: T, w: T) -> T:
    out = torch.empty(x.size(0), w.size(1), dtype=torch.promote_types(x.dtype, w.dtype), device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.einsum("ik,kj->ij", x[tile, :], w[:, :])
    return out


@pytest.mark.parametrize("dtypes", [(torch.float16, torch.float32), (torch.int64, torch.float32),
                                    (torch.bfloat16, torch.float16), (torch.float32, torch.float32)], ids=str)
@pytest.mark.parametrize("rows", [1, 5, 8])
def test_einsum_over_a_one_element_dim_promotes_mixed_dtypes(dtypes: tuple[torch.dtype, torch.dtype], rows: int,
                                                             device: torch.device) -> None:
    # torch multiplies across a one-element contracted dim (and promotes); the trace asked torch
    # with two elements there, where torch refuses mixed dtypes
    x, w = (torch.randint(-3, 4, shape).to(dtype) for shape, dtype in zip([(rows, 1), (1, 6)], dtypes))
    _agree(einsum_rows, x, w, device=device, expected=torch.einsum("ik,kj->ij", x, w))


def test_einsum_contracting_mixed_dtypes_is_refused_in_every_mode(device: torch.device) -> None:
    x, w = torch.randn(5, 3), torch.randn(3, 4).half()
    for mode in _modes(device):
        with pytest.raises(tessera.exc.DtypeError):
            tessera.kernel(einsum_rows, mode=mode, config=CONFIG)(x.to(device), w.to(device))


def rms_rows(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.nn.functional.rms_norm(x[tile, :], [x.size(1)])
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(5, 1), (3, 2), (6, 16)], ids=str)
def test_rms_norm_default_eps_is_that_of_the_compute_dtype(dtype: torch.dtype, shape: tuple[int, int],
                                                           device: torch.device) -> None:
    # torch's default eps is fp32's for 16-bit inputs; bf16's own (0.0078) moved one-element rows by 4%
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 0.3).to(dtype)
    expected = torch.nn.functional.rms_norm(x, [shape[1]])
    for mode in _modes(device):
        result = tessera.kernel(rms_rows, mode=mode, config=CONFIG)(x.to(device)).cpu()
        torch.testing.assert_close(result, expected, rtol=1e-2, atol=1e-2, msg=mode)


def truncated_quotients(x: T, y: T) -> T:
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.div(x[tile, :], y[tile, :], rounding_mode="trunc")
    return out


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float16, torch.float16),
                                    (torch.bfloat16, torch.int32), (torch.int64, torch.float64)], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7)], ids=str)
def test_truncated_division_of_floats(dtypes: tuple[torch.dtype, torch.dtype], shape: tuple[int, int],
                                      device: torch.device) -> None:
    # refused when traced ("not supported inside a compiled tile loop") while eager computed it
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(shape, generator=generator) * 20).to(dtypes[0])
    y = (torch.randn(shape, generator=generator) * 4).to(dtypes[1])
    y.view(-1)[::3] = 0  # x / 0: inf, and 0 / 0: NaN, truncate to themselves
    expected = torch.div(x, y, rounding_mode="trunc")
    for mode in _modes(device):
        result = tessera.kernel(truncated_quotients, mode=mode, config=CONFIG)(x.to(device), y.to(device)).cpu()
        torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True, msg=mode)


def with_scalar_tensor(x: T, s: T, op: object) -> T:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :], s)  # type: ignore[operator]
    return out


SCALAR_TENSOR_OPS = {
    "pow": lambda v, s: torch.pow(v.abs(), s),
    "atan2": lambda v, s: torch.atan2(v, s.float()),
    "hypot": lambda v, s: torch.hypot(v, s.float()),
    "masked_fill": lambda v, s: v.masked_fill(v > 0, s),
    "method": lambda v, s: v * s.float() + s.to(torch.float16),
    "operators": lambda v, s: torch.where(s > 0, v, -v) * (s + 1) - (2.0 ** s) + (-s),
    "clamp": lambda v, s: v.clamp(-s, s + 1),
}


@pytest.mark.parametrize("name", SCALAR_TENSOR_OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7)], ids=str)
def test_a_zero_dim_tensor_argument_as_a_scalar(name: str, dtype: torch.dtype, shape: tuple[int, int],
                                                device: torch.device) -> None:
    # each was an internal error (a comparison of the 0-d value broke Triton's interpreter), a raw
    # AttributeError (s.float()), a Python TypeError (s + 1) or a refusal (masked_fill), while eager computed it
    op = SCALAR_TENSOR_OPS[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2)) * 3
    s = torch.tensor(2, dtype=dtype)
    expected = op(x, s).float()
    for mode in _modes(device):
        result = tessera.kernel(with_scalar_tensor, mode=mode, config=CONFIG)(x.to(device), s.to(device), op).cpu()
        torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4, msg=mode)


def bump_argument(x: T, s: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        t = s
        t += 1  # line: in-place-argument
        out[tile] = x[tile] + t
    return out


def test_an_in_place_update_of_a_tensor_argument_is_located() -> None:
    # with s + 1 defined for 0-d arguments, `s += 1` would have rebound the name silently
    from marked_lines import marked_line
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="in place") as caught:
        tessera.kernel(bump_argument, mode="interpret", config=CONFIG)(torch.zeros(5), torch.tensor(1.0))
    assert caught.value.location.lineno == marked_line(__file__, "in-place-argument")[0]


def inner_rows(x: T, y: T) -> T:
    out = torch.empty(x.size(0), dtype=torch.float32, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.inner(x[tile, :], y[tile, :])[:, 0].float()
    return out


@pytest.mark.parametrize("dtypes", [(torch.bool, torch.bool), (torch.float32, torch.float16)], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (5, 3)], ids=str)
def test_inner_refuses_what_torch_refuses_at_every_size(dtypes: tuple[torch.dtype, torch.dtype],
                                                        shape: tuple[int, int], device: torch.device) -> None:
    # one-element dims let the einsum it is built on accept bools and mixed dtypes; torch.inner does not
    x, y = torch.ones(shape, dtype=dtypes[0]), torch.ones(shape, dtype=dtypes[1])
    for mode in _modes(device):
        with pytest.raises(tessera.exc.TesseraError):
            tessera.kernel(inner_rows, mode=mode, config=CONFIG)(x.to(device), y.to(device))
