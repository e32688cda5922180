"""Every matrix-product form on tiles, run as generated Triton, agrees with PyTorch and eager.

Forms: `torch.mm`, `torch.matmul`, `@`, the `Tensor` methods, `torch.addmm`, `torch.bmm`,
`torch.baddbmm` and `hl.dot(a, b, acc=, out_dtype=)`, on 2-D and batched 3-D tiles, with
transposed operands (in the kernel and on the host), mixed input dtypes, tails of every block,
size-1 dimensions, K loops carrying one or several accumulators, epilogues, and blocks below 16
(multiply-and-sum) as well as >= 16 (`tl.dot`). Attention is checked against
`scaled_dot_product_attention`. On CPU kernels run in Triton's interpreter, on CUDA compiled with
`dot_precision="ieee"` where results are compared tightly. Sizes stay small for the interpreter.
"""
from __future__ import annotations

from typing import Callable

import pytest
import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close
from product_checks import (_DOT_BLOCKS, _DTYPE_IDS, _DTYPES, _FORMS_2D, _SMALL_BLOCKS, _TOL, _addmm, _at, _dot_acc,
                            _mm, _mode, _operands, _randn, _reference_mm, _run, mm_k_loop)



@pytest.mark.parametrize("blocks", [_DOT_BLOCKS, _SMALL_BLOCKS], ids=["dot-blocks", "small-blocks"])
@pytest.mark.parametrize("product", _FORMS_2D, ids=lambda f: f.__name__.lstrip("_"))
def test_2d_product_forms_in_a_k_loop(product: Callable, blocks: list[int], device: torch.device) -> None:
    # tails in m, n and k for both block choices
    x, y = _operands(21, 19, 13, torch.float32, device)
    _run(mm_k_loop, (x, y, product), _reference_mm(x, y), _TOL[torch.float32], device, blocks,
         product.__name__)


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("product", [_mm, _addmm, _dot_acc], ids=lambda f: f.__name__.lstrip("_"))
def test_2d_products_in_each_dtype(product: Callable, dtype: torch.dtype, device: torch.device) -> None:
    x, y = _operands(37, 45, 29, dtype, device)
    _run(mm_k_loop, (x, y, product), _reference_mm(x, y), _TOL[dtype], device, _DOT_BLOCKS,
         product.__name__)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (1, 20, 17), (17, 20, 1), (13, 1, 11), (16, 32, 16)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("blocks", [_DOT_BLOCKS, _SMALL_BLOCKS], ids=["dot-blocks", "small-blocks"])
def test_size_one_and_exact_multiple_dims(m: int, k: int, n: int, blocks: list[int], device: torch.device) -> None:
    x, y = _operands(m, k, n, torch.float32, device)
    _run(mm_k_loop, (x, y, _addmm), _reference_mm(x, y), _TOL[torch.float32], device, blocks)


@pytest.mark.parametrize(("x_dtype", "y_dtype"), [(torch.float16, torch.float32), (torch.float32, torch.bfloat16),
                                                  (torch.bfloat16, torch.float16)],
                         ids=["fp16xfp32", "fp32xbf16", "bf16xfp16"])
@pytest.mark.parametrize("product", [_mm, _at, _addmm, _dot_acc], ids=lambda f: f.__name__.lstrip("_"))
def test_mixed_input_dtypes_are_promoted_like_pytorch(product: Callable, x_dtype: torch.dtype,
                                                      y_dtype: torch.dtype, device: torch.device) -> None:
    x, y = _operands(21, 37, 19, x_dtype, device, y_dtype)
    out_dtype = torch.promote_types(x_dtype, y_dtype)
    result = _run(mm_k_loop, (x, y, product), _reference_mm(x, y), _TOL[out_dtype], device, _DOT_BLOCKS)
    assert result.dtype == out_dtype


def product_dtypes(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The dtype each form gives, read back as values that overflow fp16 (300 * 300 * k)."""
    m, n = x.size(0), y.size(1)
    out = torch.empty([4, m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        a, b = x[tile_m, :], y[:, tile_n]
        out[0, tile_m, tile_n] = torch.mm(a, b).to(torch.float32)                       # fp16: inf
        out[1, tile_m, tile_n] = hl.dot(a, b, out_dtype=torch.float32)                    # fp32
        zero = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        out[2, tile_m, tile_n] = torch.addmm(zero, a, b)                                  # fp32
        out[3, tile_m, tile_n] = hl.dot(a, b, acc=zero.to(torch.float16)).to(torch.float32)  # fp16: inf
    return out


def dot_without_acc(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size(0), y.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = hl.dot(x[tile_m, :], y[:, tile_n]).to(torch.float32)
    return out


def test_dot_without_acc_has_the_same_dtype_in_eager_and_generated_code(device: torch.device) -> None:
    x = torch.full((16, 2), 300.0, dtype=torch.float16, device=device)
    y = torch.full((2, 16), 300.0, dtype=torch.float16, device=device)
    generated = tessera.kernel(dot_without_acc, mode=_mode(device))(x, y)
    eager = tessera.kernel(dot_without_acc, mode="eager")(x, y)
    assert_close(generated, eager, (0.0, 0.0), "hl.dot without acc")


def test_result_dtype_of_each_form(device: torch.device) -> None:
    x = torch.full((16, 2), 300.0, dtype=torch.float16, device=device)
    y = torch.full((2, 16), 300.0, dtype=torch.float16, device=device)
    inf, exact = float("inf"), 180000.0
    expected = torch.tensor([inf, exact, exact, inf], device=device)[:, None, None].expand(4, 16, 16)
    _run(product_dtypes, (x, y), expected, (0.0, 0.0), device)


# --------------------------------------------------------------------------------------------
# Transposed operands: in the kernel (`.T`, `.t()`, `.transpose`) and on the host (strided views).

def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`x @ w.T` for `w` `[n, k]`, transposing the loaded `[tile_n, tile_k]` tile."""
    m, k = x.size()
    n = w.size(0)
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], w[tile_n, tile_k].T)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def transposed_both(xt: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`xt.T @ w.T` for `xt` `[k, m]`, `w` `[n, k]`: `.t()` on the left, `.transpose(0, 1)` on the right."""
    k, m = xt.size()
    n = w.size(0)
    out = torch.empty([m, n], dtype=xt.dtype, device=xt.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = hl.dot(xt[tile_k, tile_m].t(), w[tile_n, tile_k].transpose(0, 1), acc=acc)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("blocks", [_DOT_BLOCKS, _SMALL_BLOCKS], ids=["dot-blocks", "small-blocks"])
def test_transposed_tile_operands(dtype: torch.dtype, blocks: list[int], device: torch.device) -> None:
    x = _randn(21, 19, dtype=dtype, device=device)
    w = _randn(13, 19, dtype=dtype, device=device, scale=19 ** -0.5)
    expected = (x.float() @ w.float().T).to(dtype)
    _run(linear, (x, w), expected, _TOL[dtype], device, blocks)
    _run(transposed_both, (x.T.contiguous(), w), expected, _TOL[dtype], device, blocks)


def test_host_transposed_views(device: torch.device) -> None:
    # column-major operands: the kernel sees strided tensors, no transpose in its body
    x, y = _operands(21, 37, 19, torch.float32, device)
    xc, yc = x.T.contiguous().T, y.T.contiguous().T
    assert not xc.is_contiguous() and not yc.is_contiguous()
    _run(mm_k_loop, (xc, yc, _dot_acc), _reference_mm(x, y), _TOL[torch.float32], device, _DOT_BLOCKS)
    w = _randn(19, 37, dtype=torch.float32, device=device, scale=37 ** -0.5)
    _run(mm_k_loop, (x, w.T, _mm), x @ w.T, _TOL[torch.float32], device, _DOT_BLOCKS)


# --------------------------------------------------------------------------------------------
# Products without a K loop: whole-row / whole-column operands.

def mm_whole_k(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.size(0), y.size(1)
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = (x[tile_m, :] @ y[:, tile_n]).to(out.dtype)
    return out


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("k", [1, 3, 16, 24])
def test_product_over_the_whole_k_dimension(k: int, dtype: torch.dtype, device: torch.device) -> None:
    x, y = _operands(21, k, 13, dtype, device)
    _run(mm_whole_k, (x, y), _reference_mm(x, y), _TOL[dtype], device, [16, 16])


# --------------------------------------------------------------------------------------------
# Epilogues and several accumulators carried through one K loop.

def mm_epilogue(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """`relu(x @ y * scale + bias)` in fp32, cast to the inputs' dtype."""
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        acc = acc * scale + bias[tile_n].to(torch.float32)[None, :]
        out[tile_m, tile_n] = torch.relu(acc).to(out.dtype)
    return out


def swiglu_two_accumulators(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`silu(x @ gate) * (x @ up)`: two accumulators, one with `addmm`, one with `hl.dot`."""
    m, k = x.size()
    n = gate.size(1)
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc_gate = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_up = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            x_tile = x[tile_m, tile_k]
            acc_gate = torch.addmm(acc_gate, x_tile, gate[tile_k, tile_n])
            acc_up = hl.dot(x_tile, up[tile_k, tile_n], acc=acc_up)
        out[tile_m, tile_n] = (torch.nn.functional.silu(acc_gate) * acc_up).to(out.dtype)
    return out


def three_accumulators(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`x @ y`, `x @ (2 * y)` in an fp16 output and the row sums of `x @ y`: three carried values."""
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    doubled = torch.empty([m, n], dtype=torch.float16, device=x.device)
    row_sums = torch.zeros([m], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc2 = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_k in hl.tile(k):
            a, b = x[tile_m, tile_k], y[tile_k, tile_n]
            partial = a @ b
            acc = acc + partial
            acc2 = hl.dot(a, b * 2, acc=acc2)
            total = total + partial.sum(dim=1)
        out[tile_m, tile_n] = acc
        doubled[tile_m, tile_n] = acc2.to(torch.float16)
        hl.atomic_add(row_sums, [tile_m], total)
    return out, doubled, row_sums


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
def test_k_loop_with_bias_activation_scale_and_cast(dtype: torch.dtype, device: torch.device) -> None:
    x, y = _operands(37, 45, 29, dtype, device)
    bias = _randn(29, dtype=dtype, device=device)
    expected = torch.relu((x.float() @ y.float()) * 0.5 + bias.float()).to(dtype)
    _run(mm_epilogue, (x, y, bias, 0.5), expected, _TOL[dtype], device, _DOT_BLOCKS)


@pytest.mark.parametrize("blocks", [_DOT_BLOCKS, _SMALL_BLOCKS], ids=["dot-blocks", "small-blocks"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_two_accumulators_in_one_k_loop(dtype: torch.dtype, blocks: list[int], device: torch.device) -> None:
    x = _randn(21, 19, dtype=dtype, device=device)
    gate = _randn(19, 13, dtype=dtype, device=device, scale=19 ** -0.5)
    up = _randn(19, 13, dtype=dtype, device=device, scale=19 ** -0.5)
    expected = (torch.nn.functional.silu(x.float() @ gate.float()) * (x.float() @ up.float())).to(dtype)
    _run(swiglu_two_accumulators, (x, gate, up), expected, _TOL[dtype], device, blocks)


def test_three_carried_values_in_one_k_loop(device: torch.device) -> None:
    x, y = _operands(37, 45, 29, torch.float32, device)
    product = x @ y
    expected = (product, (2 * product).half(), product.sum(dim=1))
    _run(three_accumulators, (x, y), expected, (1e-3, 1e-3), device, _DOT_BLOCKS)


# --------------------------------------------------------------------------------------------
def test_default_precision_is_within_tf32_tolerance(device: torch.device) -> None:
    # no dot_precision: tf32 on the GPU, exact in the interpreter
    x, y = _operands(37, 64, 29, torch.float32, device)
    kernel = tessera.kernel(mm_k_loop, config=tessera.Config(block_sizes=_DOT_BLOCKS), mode=_mode(device))
    assert_close(kernel(x, y, _addmm), x @ y, (5e-3, 5e-3), "matmul at default precision")


# --------------------------------------------------------------------------------------------
