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


def operator_product(x: T, y: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n])
        for tile_k in hl.tile(x.size(1)):
            acc += x[tile_m, tile_k] @ y[tile_k, tile_n]
        out[tile_m, tile_n] = acc
    return out


def mm_product(x: T, y: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n])
        for tile_k in hl.tile(x.size(1)):
            acc += torch.mm(x[tile_m, tile_k], y[tile_k, tile_n]) * 1.0
        out[tile_m, tile_n] = acc
    return out


def dot_product(x: T, y: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n])
        for tile_k in hl.tile(x.size(1)):
            acc += hl.dot(x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
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
@pytest.mark.parametrize("body", [operator_product, mm_product, dot_product])
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 50, 19)])
def test_augmented_product_in_a_k_loop_warns_and_computes(mode, body, shape):
    m, k, n = shape
    x, y = torch.randn(m, k), torch.randn(k, n)
    kernel = tessera.kernel(body, mode=mode, config=tessera.Config(block_sizes=[16, 16, 16]))
    with pytest.warns(exc.TiledKMatmulAccumulationWarning, match=r"WARNING\[TiledKMatmulAccumulationWarning\]"):
        result = kernel(x, y)
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
    kernel = tessera.kernel(operator_product, mode="interpret", ignore_warnings=[exc.TiledKMatmulAccumulationWarning])
    with warnings.catch_warnings():
        warnings.simplefilter("error", exc.TiledKMatmulAccumulationWarning)
        torch.testing.assert_close(kernel(x, y), x @ y, atol=1e-4, rtol=1e-4)
