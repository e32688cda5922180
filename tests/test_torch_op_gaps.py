"""torch calls a kernel author writes on tile values that Tessera refused or crashed on before
session 13 (found by sweeping torch's pointwise, reduction, view and cast functions): each means
inside a tile loop what it means in torch, in eager and interpret modes, at size 1, non-powers of
two and tail tiles."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
MODES = ("eager", "interpret")

# op(x, y, i, j) -> a value with x's rows first; x, y floats (y away from 0), i, j int32 (j in [1, 6])
OPS: dict[str, Callable[..., T]] = {
    "0-d tensors made in the loop": lambda x, y, i, j: x * torch.tensor(2.0) + torch.scalar_tensor(1.5)
    + torch.minimum(i, torch.tensor(3, dtype=torch.int32)),
    "0-d fp64 tensor promotes an int tile to fp64": lambda x, y, i, j: i * torch.tensor(0.5, dtype=torch.float64),
    "masked_fill with a 0-d tensor": lambda x, y, i, j: x.masked_fill(x > 0, torch.tensor(-2.0)),
    "comparison aliases": lambda x, y, i, j: torch.greater(x, y).int() + torch.less(x, y).int() * 2
    + x.greater_equal(0).int() * 4 + torch.less_equal(i, j).int() * 8 + i.not_equal(j).int() * 16,
    "remainder floor_divide bitwise methods": lambda x, y, i, j: i.remainder(j) + i.floor_divide(j)
    + i.bitwise_and(j) + i.bitwise_or(3) + i.bitwise_xor(j) + i.bitwise_not() + (x * 3).remainder(y).int(),
    "a number floor-divided by a tile value": lambda x, y, i, j: 7 // j + (-7) // j + 7 % j,
    "div with rounding_mode='trunc' of floats": lambda x, y, i, j: torch.div(x * 3, y, rounding_mode="trunc")
    + (x * 3).div(-0.7, rounding_mode="trunc") + torch.div(i, y, rounding_mode="trunc"),
    "div trunc of fp16 truncs the rounded quotient": lambda x, y, i, j: torch.div(
        x.half() * 300, y.half(), rounding_mode="trunc").float(),
    "copy_ converts and broadcasts": lambda x, y, i, j: x.clone().copy_(i) + x.clone().copy_(y[:, :1]),
    "view_as and reshape_as of equal dims": lambda x, y, i, j: x.view_as(y) + y.reshape_as(x),
    "integer powers with a tile value exponent": lambda x, y, i, j: torch.pow(i, j) + 3 ** j + i ** (j - 4)
    + torch.pow(torch.where(i > 0, 1, -1), i),
    "int8 powers wrap, a uint8 exponent uses its top bit": lambda x, y, i, j: (
        i.to(torch.int8) ** j.to(torch.int8)).int() + (j.to(torch.uint8) ** (j * 40).to(torch.uint8)).int(),
    "int64 powers over every exponent bit": lambda x, y, i, j: (i.long() ** (j.long() * 9)) + 2 ** (i.long() + 20),
    "take_along_dim broadcasts the other dims": lambda x, y, i, j: torch.take_along_dim(
        x, (j[:, :1] % x.size(1)).long(), dim=1) + torch.take_along_dim(x, (j % x.size(1)).long(), dim=-1),
    "operands and dims given by torch's keywords": lambda x, y, i, j: torch.sum(input=x, dim=1, keepdim=True)
    + torch.softmax(input=x, dim=-1) + x.masked_fill(mask=x > 0, value=0.5) + torch.addcmul(x, tensor1=x, tensor2=y, value=2)
    + torch.special.erfc(input=x) + torch.nn.functional.softplus(input=y) + torch.max(x, other=y)
    + x[:, None, :].permute(dims=(0, 2, 1))[:, :, 0] + x.reshape(shape=(x.size(0), -1)),
    "NumPy's axis and keepdims": lambda x, y, i, j: x.sum(axis=1, keepdims=True) + x.mean(axis=-1, keepdims=True)
    + torch.amax(x, axis=1)[:, None] + torch.concat([x, y], axis=1).chunk(2, dim=1)[0],
    "numel of whole dims": lambda x, y, i, j: x / x.sum(0).numel() + x.sum(0, keepdim=True).nelement(),
}


def rows(out: T, x: T, y: T, i: T, j: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :], y[tile, :], i[tile, :], j[tile, :])
    return out


def _inputs(shape: tuple[int, int]) -> tuple[T, T, T, T]:
    generator = torch.Generator().manual_seed(13)
    x = torch.randn(shape, generator=generator)
    y = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0) * (torch.rand(shape, generator=generator) + 0.5)
    i = torch.randint(-20, 20, shape, generator=generator, dtype=torch.int32)
    j = torch.randint(1, 7, shape, generator=generator, dtype=torch.int32)
    return x, y, i, j


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (6, 16)])
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_means_what_torch_means(name: str, shape: tuple[int, int]) -> None:
    args = _inputs(shape)
    op = OPS[name]
    expected = op(*args)
    for mode in MODES:
        kernel = tessera.kernel(rows, mode=mode, config=tessera.Config(block_sizes=[4]))
        got = kernel(torch.empty_like(expected), *args, op)
        assert got.dtype == expected.dtype, mode
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True, msg=lambda m: f"{mode}: {m}")


def product_with_made_tensor(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.addmm(x[tile, :], x[tile, :], torch.eye(7))
    return out


def _located_error(kernel: Callable[..., T], error: type[exc.TesseraError], match: str, out: T) -> exc.TesseraError:
    """The error compiling `kernel` raises, checked to point at this file."""
    with pytest.raises(error, match=match) as info:
        tessera.kernel(kernel, mode="interpret")(out, torch.randn(5, 7))
    assert info.value.location is not None and info.value.location.filename == __file__
    return info.value


def test_matrix_product_with_a_tensor_made_in_the_loop_is_a_located_error() -> None:
    error = _located_error(product_with_made_tensor, exc.UnsupportedOperationError,
                           "created or captured inside the tile loop", torch.empty(5, 7))
    assert "torch.eye" in error.location.source_line()


def rebound_by_copy(out: T, x: T, y: T) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        v.copy_(y[tile, :])
        out[tile, :] = v
    return out


def test_copy_into_a_tile_value_rebinds_the_name_and_leaves_the_input_alone() -> None:
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    before = x.clone()
    for mode in MODES:
        got = tessera.kernel(rebound_by_copy, mode=mode, config=tessera.Config(block_sizes=[4]))(torch.empty_like(x), x, y)
        torch.testing.assert_close(got, y, msg=lambda m: f"{mode}: {m}")
        assert torch.equal(x, before), mode


def viewed_as_uint32(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :].view(torch.uint32).to(torch.int64)
    return out


def test_a_view_as_a_dtype_compiled_code_cannot_hold_is_a_located_error() -> None:
    _located_error(viewed_as_uint32, exc.DtypeError, "uint32", torch.empty(5, 7, dtype=torch.int64))


def numel_of_a_tile_dim(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] / x[tile, :].numel()
    return out


def test_numel_over_a_tile_dim_is_a_located_error_when_traced() -> None:
    _located_error(numel_of_a_tile_dim, exc.UnsupportedOperationError, "numel", torch.empty(5, 7))


GAMMA_POINTS = torch.tensor([0.0, -0.0, -1.0, -2.5, 1.0, 2.0, float("inf"), float("-inf"), float("nan"), 1e-30, 1e30,
                             -1e-8, 0.5, 3.7, -3.3, 100.0, 7.99, 8.0, 1e-3, -0.999, 171.3])


def elementwise(out: T, x: T, op: Callable[..., T]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["lgamma", "digamma"])
def test_lgamma_and_digamma_match_torch_at_poles_infinities_and_both_sides_of_zero(name: str, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(5)
    points = torch.cat([GAMMA_POINTS, torch.randn(42, generator=generator) * 20, torch.rand(7, generator=generator) * 3])
    x = points.reshape(10, 7).to(dtype)
    op = getattr(torch, name)
    tolerance = {torch.float64: 1e-11, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    for mode in MODES:
        got = tessera.kernel(elementwise, mode=mode, config=tessera.Config(block_sizes=[4]))(torch.empty_like(x), x, op)
        torch.testing.assert_close(got, op(x), rtol=tolerance, atol=tolerance, equal_nan=True, msg=lambda m: f"{mode}: {m}")


def keyword_typo(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.sum(x[tile, :], dimension=1)
    return out


def test_a_keyword_torch_does_not_take_is_a_located_error_not_a_raw_type_error() -> None:
    _located_error(keyword_typo, exc.UnsupportedOperationError, "does not take these arguments", torch.empty(5))


def sum_with_a_misspelt_keyword(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].sum(dimm=1)
    return out


def test_a_misspelt_keyword_of_a_method_is_a_located_error() -> None:
    _located_error(sum_with_a_misspelt_keyword, exc.UnsupportedOperationError, "dimm", torch.empty(5))
