"""`acc += x @ y` in a loop over K tiles warns TiledKMatmulAccumulationWarning (Helion's class and
text), and still computes the product; the accumulating forms do not warn."""
from __future__ import annotations

import warnings

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
MODES = ("eager", "interpret")


def three_products(x: T, y: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        by_operator = hl.zeros([tile_m, tile_n])
        by_mm = hl.zeros([tile_m, tile_n])
        by_dot = hl.zeros([tile_m, tile_n])
        for tile_k in hl.tile(x.size(1)):
            by_operator += x[tile_m, tile_k] @ y[tile_k, tile_n]
            by_mm += torch.mm(x[tile_m, tile_k], y[tile_k, tile_n]) * 1.0
            by_dot += hl.dot(x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = (by_operator + by_mm + by_dot) / 3
    return out


def addmm_product(x: T, y: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n])
        for tile_k in hl.tile(x.size(1)):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


def whole_k_product(x: T, y: T) -> T:
    out = torch.zeros([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = out[tile_m, tile_n]
        acc += x[tile_m, :] @ y[:, tile_n]  # no loop over K: nothing accumulates across tiles
        out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 50, 19)])
def test_augmented_products_in_a_k_loop_warn_at_their_lines_and_compute(mode, shape):
    m, k, n = shape
    x, y = torch.randn(m, k), torch.randn(k, n)
    kernel = tessera.kernel(three_products, mode=mode, config=tessera.Config(block_sizes=[16, 16, 16]))
    with pytest.warns(exc.TiledKMatmulAccumulationWarning) as caught:
        result = kernel(x, y)
    ours = [record for record in caught if record.category is exc.TiledKMatmulAccumulationWarning]
    assert len({record.lineno for record in ours}) == 3  # `@`, torch.mm and hl.dot
    assert all(str(record.message).startswith("WARNING[TiledKMatmulAccumulationWarning]") for record in ours)
    torch.testing.assert_close(result, x @ y, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("body", [addmm_product, whole_k_product])
def test_accumulating_products_do_not_warn(mode, body):
    x, y = torch.randn(20, 33), torch.randn(33, 7)
    kernel = tessera.kernel(body, mode=mode, config=tessera.Config(block_sizes=[16, 16, 16]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", exc.TiledKMatmulAccumulationWarning)
        torch.testing.assert_close(kernel(x, y), x @ y, atol=1e-4, rtol=1e-4)


def test_ignore_warnings_silences_it():
    x, y = torch.randn(20, 33), torch.randn(33, 7)
    kernel = tessera.kernel(three_products, mode="interpret", ignore_warnings=[exc.TiledKMatmulAccumulationWarning])
    with warnings.catch_warnings():
        warnings.simplefilter("error", exc.TiledKMatmulAccumulationWarning)
        torch.testing.assert_close(kernel(x, y), x @ y, atol=1e-4, rtol=1e-4)
