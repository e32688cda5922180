"""torch's other spellings of ops Tessera has (`torch.multiply`, `torch.arccos`, `torch.special.erfc`,
`Tensor.true_divide`, `torch.ravel`, ...) and torch.dot / vdot / inner mean inside a tile loop what
they mean in torch, in eager and interpret modes, at size 1, non-powers of two and tail tiles."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
MODES = ("eager", "interpret")

ALIASES: dict[str, Callable[[T, T], T]] = {
    "multiply subtract divide": lambda x, y: torch.multiply(x, y) - torch.subtract(x, y, alpha=2) + x.divide(y),
    "true_divide and divide by mode": lambda x, y: x.true_divide(y) + torch.divide(x, y, rounding_mode="floor"),
    "absolute negative": lambda x, y: torch.absolute(x) + x.negative() + y.absolute(),
    "arc functions": lambda x, y: torch.arctan(x) + torch.arcsin(x.clamp(-1, 1)) + x.clamp(-1, 1).arccos()
    + torch.arcsinh(y) + torch.arccosh(x.abs() + 1) + torch.arctanh(x.clamp(-0.5, 0.5)) + x.arctan2(y),
    "torch.special": lambda x, y: torch.special.erf(x) + torch.special.erfc(x) + torch.special.expm1(x)
    + torch.special.exp2(x) + torch.special.log1p(x.abs()) + torch.special.xlogy(x.abs(), y.abs())
    + torch.special.round(x * 4),
    "torch.special reductions": lambda x, y: torch.special.logsumexp(x, 1, keepdim=True)
    + torch.special.softmax(x, 1) + torch.special.log_softmax(y, -1, dtype=torch.float32),
    "selu celu": lambda x, y: torch.selu(x) + torch.celu(y, 0.5),
    "ravel": lambda x, y: torch.ravel(x[:, :1])[:, None] + y[:, :1].ravel()[:, None] * y,
}


def rows(out: T, x: T, y: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :], y[tile, :])
    return out


def _run(kernel: Callable[..., T], expected: T, *args: Any) -> list[T]:
    return [tessera.kernel(kernel, mode=mode, config=tessera.Config(block_sizes=[4]))(torch.empty_like(expected), *args)
            for mode in MODES]


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (6, 16)])
@pytest.mark.parametrize("name", sorted(ALIASES))
def test_alias_means_what_torch_means(name: str, shape: tuple[int, int]) -> None:
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(shape, generator=generator)
    y = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0) * (torch.rand(shape, generator=generator) + 0.5)
    op = ALIASES[name]
    expected = op(x, y)
    for got in _run(rows, expected, x, y, op):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def products(out: T, x: T, w: T) -> T:
    for tile in hl.tile(x.size(0)):
        row = x[tile, :]
        out[tile, :] = torch.inner(row, w[:, :]) + torch.dot(w[0, :], w[-1, :]) + row.sum(1, keepdim=True) \
            * w[0, :].vdot(w[0, :])
    return out


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("rows_, inner, outer", [(1, 1, 1), (5, 7, 3), (6, 16, 16)])
def test_dot_vdot_and_inner(rows_: int, inner: int, outer: int, dtype: torch.dtype, tolerance: float) -> None:
    generator = torch.Generator().manual_seed(9)
    x, w = torch.randn(rows_, inner, generator=generator).to(dtype), torch.randn(outer, inner, generator=generator).to(dtype)
    wide_x, wide_w = x.double(), w.double()
    expected = (torch.inner(wide_x, wide_w) + torch.dot(wide_w[0], wide_w[-1])
                + wide_x.sum(1, keepdim=True) * wide_w[0].vdot(wide_w[0])).to(dtype)
    for got in _run(products, expected, x, w):
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


def dot_of_matrices(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.dot(x[tile, :], x[tile, :])
    return out


def test_dot_of_matrices_is_refused_as_torch_refuses_it() -> None:
    with pytest.raises(RuntimeError):
        torch.dot(torch.ones(2, 3), torch.ones(2, 3))
    for mode in MODES:
        with pytest.raises(exc.TesseraError, match="1D|1-D"):
            tessera.kernel(dot_of_matrices, mode=mode)(torch.empty(4), torch.randn(4, 3))


def aten_random(out: T, x: T) -> T:
    torch.manual_seed(3)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = torch.ops.aten.rand.default([tile_m, tile_n], dtype=torch.float32) \
            + torch.rand([tile_m, tile_n]) * 0
    return out


def torch_random(out: T, x: T) -> T:
    torch.manual_seed(3)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = torch.rand([tile_m, tile_n]) + torch.rand([tile_m, tile_n]) * 0
    return out


def test_aten_rand_overload_draws_what_torch_rand_draws_in_every_mode() -> None:
    x = torch.empty(5, 37)
    results = [tessera.kernel(kernel, mode=mode, config=tessera.Config(block_sizes=[4, 16]))(torch.empty_like(x), x)
               for kernel in (aten_random, torch_random) for mode in MODES]
    for other in results[1:]:
        assert torch.equal(other, results[0])


def aten_products(out: T, x: T, y: T) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        product = torch.ops.aten.mm.dtype(x[tile_m, :], y[:, tile_n], torch.float32)
        out[tile_m, tile_n] = torch.ops.aten.addmm.default(product, x[tile_m, :].float(), y[:, tile_n].float(),
                                                            beta=0.5) + torch.ops.aten.mm.default(x[tile_m, :], y[:, tile_n])
    return out


def test_aten_product_overloads_are_torchs_products() -> None:
    generator = torch.Generator().manual_seed(12)
    x, y = torch.randn(5, 16, generator=generator).half(), torch.randn(16, 7, generator=generator).half()
    wide = x.double() @ y.double()
    expected = (wide * 1.5 + wide.half().double()).float()
    for mode in MODES:
        got = tessera.kernel(aten_products, mode=mode, config=tessera.Config(block_sizes=[4, 16]))(
            torch.empty_like(expected), x, y)
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3, msg=mode)
