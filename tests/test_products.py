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

import re
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close
from tessera import exc, settings

# (atol, rtol) for fp32-accumulated products of O(1) values, by output dtype.
_TOL: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (3e-2, 3e-2),
}
_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_DTYPE_IDS = ["fp32", "fp16", "bf16"]
# Block sizes [m, n, k]: tl.dot blocks (>= 16) and multiply-and-sum blocks (< 16).
_DOT_BLOCKS = [16, 16, 16]
_SMALL_BLOCKS = [8, 4, 4]


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _run(fn: Callable[..., Any], args: tuple, expected: Any, tolerance: tuple[float, float],
         device: torch.device, block_sizes: list[int] | None = None, name: str = "") -> Any:
    """Run `fn` generated (exact fp32 dots) and eager; check both against `expected` and each other."""
    config = tessera.Config(block_sizes=block_sizes) if block_sizes is not None else None
    name = name or fn.__name__
    generated = tessera.kernel(fn, config=config, mode=_mode(device), dot_precision="ieee")(*args)
    eager = tessera.kernel(fn, config=config, mode="eager")(*args)
    assert_close(eager, expected, tolerance, f"{name} (eager vs PyTorch)")
    assert_close(generated, expected, tolerance, f"{name} ({_mode(device)} vs PyTorch)")
    assert_close(generated, eager, tolerance, f"{name} ({_mode(device)} vs eager)")
    return generated


def _randn(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(dtype).to(device)


def _operands(m: int, k: int, n: int, dtype: torch.dtype, device: torch.device,
              y_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` `[m, k]` and `y` `[k, n]` scaled so products are O(1)."""
    x = _randn(m, k, dtype=dtype, device=device)
    y = _randn(k, n, dtype=y_dtype or dtype, device=device, scale=max(k, 1) ** -0.5)
    return x, y


def _reference_mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.float() @ y.float()).to(torch.promote_types(x.dtype, y.dtype))


# --------------------------------------------------------------------------------------------
# 2-D products in a K loop: one kernel, the product form passed in as a compile-time callable.

def mm_k_loop(x: torch.Tensor, y: torch.Tensor,
              product: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = product(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def _mm(acc, a, b):
    return acc + torch.mm(a, b)


def _matmul(acc, a, b):
    return acc + torch.matmul(a, b)


def _at(acc, a, b):
    return acc + a @ b


def _tensor_mm(acc, a, b):
    return acc + a.mm(b)


def _tensor_matmul(acc, a, b):
    return acc + a.matmul(b)


def _addmm(acc, a, b):
    return torch.addmm(acc, a, b)


def _tensor_addmm(acc, a, b):
    return acc.addmm(a, b)


def _dot_default(acc, a, b):
    return acc + hl.dot(a, b)


def _dot(acc, a, b):
    return acc + hl.dot(a, b, out_dtype=torch.float32)


def _dot_acc(acc, a, b):
    return hl.dot(a, b, acc=acc)


def _dot_acc_out(acc, a, b):
    return hl.dot(a, b, acc=acc, out_dtype=torch.float32)


_FORMS_2D = [_mm, _matmul, _at, _tensor_mm, _tensor_matmul, _addmm, _tensor_addmm, _dot_default, _dot,
             _dot_acc, _dot_acc_out]


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
# Batched 3-D products.

def bmm_k_loop(a: torch.Tensor, b: torch.Tensor,
               product: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.empty([batch, m, n], dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = product(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc.to(out.dtype)
    return out


def _bmm(acc, a, b):
    return acc + torch.bmm(a, b)


def _tensor_bmm(acc, a, b):
    return acc + a.bmm(b)


def _baddbmm(acc, a, b):
    return torch.baddbmm(acc, a, b)


def _tensor_baddbmm(acc, a, b):
    return acc.baddbmm(a, b)


_FORMS_3D = [_bmm, _tensor_bmm, _matmul, _at, _baddbmm, _tensor_baddbmm, _dot, _dot_acc]


def _reference_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(torch.promote_types(a.dtype, b.dtype))


@pytest.mark.parametrize("blocks", [[1, 16, 16, 16], [2, 16, 16, 16], [2, 8, 4, 4]],
                         ids=["b1-dot-blocks", "b2-dot-blocks", "b2-small-blocks"])
@pytest.mark.parametrize("product", _FORMS_3D, ids=lambda f: f.__name__.lstrip("_"))
def test_3d_product_forms_in_a_k_loop(product: Callable, blocks: list[int], device: torch.device) -> None:
    a = _randn(3, 21, 19, dtype=torch.float32, device=device)
    b = _randn(3, 19, 13, dtype=torch.float32, device=device, scale=19 ** -0.5)
    _run(bmm_k_loop, (a, b, product), _reference_bmm(a, b), _TOL[torch.float32], device, blocks,
         product.__name__)


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize(("batch", "m", "k", "n"), [(1, 1, 1, 1), (3, 1, 20, 17), (2, 17, 1, 1)],
                         ids=lambda v: str(v))
def test_3d_products_in_each_dtype_and_size_one_dims(batch: int, m: int, k: int, n: int, dtype: torch.dtype,
                                                     device: torch.device) -> None:
    a = _randn(batch, m, k, dtype=dtype, device=device)
    b = _randn(batch, k, n, dtype=dtype, device=device, scale=max(k, 1) ** -0.5)
    _run(bmm_k_loop, (a, b, _baddbmm), _reference_bmm(a, b), _TOL[dtype], device, [1, 16, 16, 16])


def test_3d_mixed_input_dtypes(device: torch.device) -> None:
    a = _randn(2, 21, 19, dtype=torch.float16, device=device)
    b = _randn(2, 19, 13, dtype=torch.float32, device=device, scale=19 ** -0.5)
    for product in (_bmm, _baddbmm, _dot_acc):
        result = _run(bmm_k_loop, (a, b, product), _reference_bmm(a, b), _TOL[torch.float32], device,
                      [1, 16, 16, 16], product.__name__)
        assert result.dtype == torch.float32


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """`q @ k.transpose(1, 2)` per batch, the key tile transposed in the kernel."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        out[tile_b, tile_m, tile_n] = torch.bmm(q[tile_b, tile_m, :], k[tile_b, tile_n, :].transpose(1, 2)).float()
    return out


def scores_dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same with `hl.dot`, a K loop over the head dimension and `permute` for the transpose."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_d in hl.tile(d):
            acc = hl.dot(q[tile_b, tile_m, tile_d], k[tile_b, tile_n, tile_d].permute(0, 2, 1), acc=acc)
        out[tile_b, tile_m, tile_n] = acc
    return out


def scores_matmul_operator(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same with `@` and `.mT` on whole-head tiles."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        out[tile_b, tile_m, tile_n] = (q[tile_b, tile_m, :] @ k[tile_b, tile_n, :].mT).float()
    return out


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("blocks", [[16, 16, 16], [8, 4, 4]], ids=["dot-blocks", "small-blocks"])
def test_3d_transposed_key_tiles(dtype: torch.dtype, blocks: list[int], device: torch.device) -> None:
    q = _randn(2, 21, 16, dtype=dtype, device=device)
    k = _randn(2, 13, 16, dtype=dtype, device=device, scale=0.25)
    expected = (q.float() @ k.float().transpose(1, 2)).to(dtype).float()
    _run(scores, (q, k), expected, _TOL[dtype], device, blocks[:2])
    _run(scores_matmul_operator, (q, k), expected, _TOL[dtype], device, blocks[:2])
    _run(scores_dot, (q, k), (q.float() @ k.float().transpose(1, 2)), _TOL[dtype], device, blocks)


# --------------------------------------------------------------------------------------------
# Attention against scaled_dot_product_attention.

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_attention_matches_sdpa(head_dim: int, causal: bool, device: torch.device) -> None:
    from examples.attention import attention

    q, k, v = (_randn(1, 2, 37, head_dim, dtype=torch.float32, device=device) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    _run(attention.fn, (q, k, v, causal), expected, (2e-4, 2e-4), device, [16, 16],
         f"attention d={head_dim} causal={causal}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_attention_low_precision_with_more_keys_than_queries(dtype: torch.dtype, device: torch.device) -> None:
    from examples.attention import attention

    q = _randn(1, 2, 21, 64, dtype=dtype, device=device)
    k, v = (_randn(1, 2, 37, 64, dtype=dtype, device=device) for _ in range(2))
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(dtype)
    _run(attention.fn, (q, k, v, False), expected, _TOL[dtype], device, [16, 16], "attention")


def test_default_precision_is_within_tf32_tolerance(device: torch.device) -> None:
    # no dot_precision: tf32 on the GPU, exact in the interpreter
    x, y = _operands(37, 64, 29, torch.float32, device)
    kernel = tessera.kernel(mm_k_loop, config=tessera.Config(block_sizes=_DOT_BLOCKS), mode=_mode(device))
    assert_close(kernel(x, y, _addmm), x @ y, (5e-3, 5e-3), "matmul at default precision")


# --------------------------------------------------------------------------------------------
# Split-K matmul (examples/split_k_matmul.py): the atomics add every split's partial product.



def _check_split_k(m: int, k: int, n: int, splits: int, dtype: torch.dtype, device: torch.device,
                   monkeypatch: pytest.MonkeyPatch, block_sizes: list[int] | None) -> None:
    from examples import split_k_matmul as module

    if block_sizes is not None:  # the host wrapper looks the kernel up in its module
        configured = tessera.kernel(module.split_k_matmul_kernel.fn, config=tessera.Config(block_sizes=block_sizes),
                                    dot_precision="ieee")
        monkeypatch.setattr(module, "split_k_matmul_kernel", configured)
    x, y, splits = module.EXAMPLE.inputs(str(device), dtype, m=m, k=k, n=n, splits=splits)
    expected = module.reference(x, y, splits)
    with settings.override(mode="eager"):
        eager = module.split_k_matmul(x, y, splits)
    with settings.override(mode=_mode(device)):
        generated = module.split_k_matmul(x, y, splits)
    tolerance = module.EXAMPLE.tolerances[dtype] if block_sizes is None else _TOL[dtype]
    assert_close(eager, expected, tolerance, "split_k_matmul (eager vs PyTorch)")
    assert_close(generated, expected, tolerance, f"split_k_matmul ({_mode(device)} vs PyTorch)")
    assert_close(generated, eager, tolerance, f"split_k_matmul ({_mode(device)} vs eager)")


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("blocks", [[16, 16, 16], [8, 4, 4]], ids=["dot-blocks", "small-blocks"])
@pytest.mark.parametrize(("m", "k", "n", "splits"), [(1, 1, 1, 1), (21, 70, 13, 3), (5, 100, 9, 8)],
                         ids=lambda v: str(v))
def test_split_k_matmul(m: int, k: int, n: int, splits: int, blocks: list[int], dtype: torch.dtype,
                        device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_split_k(m, k, n, splits, dtype, device, monkeypatch, blocks)


def test_split_k_splits_the_k_loop_across_programs(device: torch.device) -> None:
    from examples.split_k_matmul import split_k_matmul_kernel, split_length

    assert [split_length(k, splits) for k, splits in [(1, 1), (70, 3), (100, 8), (1024, 4)]] == [16, 32, 16, 256]
    x, y = torch.randn(8, 64, device=device), torch.randn(64, 8, device=device)
    config = tessera.Config(block_sizes=[16, 16, 16])
    bound = tessera.kernel(split_k_matmul_kernel.fn, config=config, mode=_mode(device)).bind(
        x, y, torch.zeros(8, 8, device=device), 16)
    code = bound.to_triton_code(config)
    assert "tl.atomic_add(out" in code and "offset_2 + 16" in code


def test_split_k_matmul_with_its_heuristic_config(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_split_k(21, 70, 13, 3, torch.float32, device, monkeypatch, None)


@pytest.mark.parametrize("static_shapes", [True, False], ids=["static", "specialized"])
def test_a_square_weight_read_whole_keeps_its_two_dims_apart(device: torch.device, static_shapes: bool) -> None:
    # two whole dims of equal size are two axes: sharing one (keyed by size) read w's diagonal
    # pattern under static shapes (Helion's se_block: most of the output wrong, silently)
    def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        n = hl.specialize(w.size(1))
        hl.specialize(w.size(0))
        out = torch.empty([x.size(0), n], dtype=torch.float32, device=x.device)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = x[tile, :] @ w[:, :]
        return out
    x, w = torch.randn(37, 32, device=device), torch.randn(32, 32, device=device)
    for mode in ("eager", None):
        kernel = tessera.kernel(project, static_shapes=static_shapes, mode=mode)
        torch.testing.assert_close(kernel(x, w), x @ w, rtol=1e-2, atol=1e-2)


@tessera.kernel(static_shapes=True, dot_precision="ieee")  # tf32 on the GPU would need a loose tolerance
def gated_by_own_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Helion's se_block: the row is a product's operand and then multiplies its result, so the
    product's reduced dim and output dim (both `:` of equal size) are combined elementwise."""
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        row = x[tile_m, :]
        out[tile_m, :] = (2.0 * row * torch.sigmoid(row @ w[:, :])).to(x.dtype)
    return out


@pytest.mark.parametrize("m, n", [(1, 16), (13, 16), (40, 20)])
def test_a_product_whose_row_also_multiplies_its_result_keeps_its_dims_apart(m: int, n: int,
                                                                              device: torch.device) -> None:
    x, w = torch.randn(m, n, device=device), torch.randn(n, n, device=device)
    expected = 2.0 * x * torch.sigmoid(x @ w)
    modes = ["eager", "compiled" if device.type == "cuda" else "interpret"]
    for mode in modes:
        gated_by_own_product.reset()
        with settings.override(mode=mode):
            torch.testing.assert_close(gated_by_own_product(x, w), expected, rtol=1e-3, atol=1e-3, msg=mode)


# -- a causal block product whose inner loop ends at the row tile's end (mamba2_chunk_scan's shape) --
def causal_block_product(scores: T, values: T, scale: T, start: T, state: T) -> T:
    m, n = scores.size(0), values.size(1)
    out = torch.empty(m, n, dtype=values.dtype, device=values.device)
    block_m = hl.register_block_size(m)
    block_k = hl.register_block_size(16, 16)
    for tile_m, tile_n in hl.tile([m, n], block_size=[block_m, None]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc = hl.dot(start[tile_m, :], state[tile_n, :].T, acc=acc)  # the carried-in state, whole dims
        for tile_k in hl.tile(min((tile_m.id + 1) * block_m, m), block_size=block_k):
            weights = scores[tile_m, tile_k] * torch.exp(scale[tile_m][:, None] - scale[tile_k][None, :])
            keep = tile_m.index[:, None] >= tile_k.index[None, :]
            weights = torch.where(keep, weights, torch.zeros_like(weights))
            acc = hl.dot(weights.to(values.dtype), values[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("m, n, blocks", [(40, 24, [32, 16, 16]), (37, 5, [16, 16, 8]), (1, 1, [16, 16, 1]),
                                          (64, 33, [64, 16, 32]), (50, 16, [8, 16, 16])], ids=str)
def test_a_causal_inner_loop_to_the_row_tiles_end(m: int, n: int, blocks: list[int], mode: str) -> None:
    scores, values, scale = torch.randn(m, m), torch.randn(m, n), torch.rand(m)
    start, state = torch.randn(m, 16), torch.randn(n, 16)
    out = tessera.kernel(causal_block_product, mode=mode, config=tessera.Config(block_sizes=blocks))(
        scores, values, scale, start, state)
    weights = torch.tril(scores * torch.exp(scale[:, None] - scale[None, :]))
    torch.testing.assert_close(out, start @ state.T + weights @ values, rtol=1e-4, atol=1e-4)


def gemv_gathered(w: torch.Tensor, rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Helion's gather_gemv shape: a product whose N (and the accumulator's) is a whole dim of 1."""
    out = torch.empty([rows.size(0), 1], dtype=torch.float32, device=w.device)
    for tile in hl.tile(rows.size(0)):
        acc = hl.zeros([tile, 1], dtype=torch.float32)
        picked = rows[tile]
        for tile_k in hl.tile(w.size(1)):
            acc += hl.dot(w[picked, tile_k], x[tile_k, :])
        out[tile, :] = acc
    return out


def batched_narrow(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty([a.size(0), a.size(1), b.size(2)], dtype=torch.float32, device=a.device)
    for tile_b in hl.tile(a.size(0)):
        out[tile_b, :, :] = torch.bmm(a[tile_b, :, :], b[tile_b, :, :]).to(torch.float32)
    return out


def test_a_gathered_gemv_with_a_whole_dim_of_one(device: torch.device) -> None:
    """N = 1 (and the accumulator's literal 1) padded to tl.dot's 16 and cut off again."""
    w = _randn(37, 50, dtype=torch.float16, device=device)
    rows = torch.tensor([3, 0, 36, 5, 5], device=device)
    x = _randn(50, 1, dtype=torch.float16, device=device, scale=0.2)
    _run(gemv_gathered, (w, rows, x), w[rows].float() @ x.float(), _TOL[torch.float16], device, [16, 16])


@pytest.mark.parametrize(("m", "k", "n"), [(1, 7, 3), (3, 1, 8), (8, 3, 1), (5, 16, 2)])
def test_narrow_whole_dims_are_padded_to_the_products_minimum(m: int, k: int, n: int, device: torch.device) -> None:
    """Whole dims below tl.dot's 16 (M, N or K of a batched product) are padded with zeros to 16
    and the padding cut off the result, in every mode (compiled mode refused them before)."""
    a = _randn(5, m, k, dtype=torch.float32, device=device)
    b = _randn(5, k, n, dtype=torch.float32, device=device, scale=0.5)
    _run(batched_narrow, (a, b), torch.bmm(a, b), _TOL[torch.float32], device, [1])
    _run(batched_narrow, (a, b), torch.bmm(a, b), _TOL[torch.float32], device, [2])


# --------------------------------------------------------------------------------------------
# Issue 15: every call form torch's products accept (positional out_dtype, keyword operands,
# beta/alpha), in eager and generated code alike.

def product_call_forms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, m, d = q.shape
    d = hl.specialize(d)
    out = torch.empty([b, m, d], dtype=torch.float32, device=q.device)
    for tile_b, tile_m in hl.tile([b, m]):
        acc = hl.zeros([tile_b, tile_m, d], dtype=torch.float32)
        for tile_n in hl.tile(k.size(1)):
            scores = torch.bmm(q[tile_b, tile_m, :], k[tile_b, tile_n, :].transpose(1, 2), torch.float32)
            again = torch.bmm(input=q[tile_b, tile_m, :], mat2=k[tile_b, tile_n, :].transpose(1, 2),
                              out_dtype=torch.float32)
            probabilities = ((scores + again) * 0.25).to(v.dtype)
            acc = torch.baddbmm(acc, probabilities, v[tile_b, tile_n, :], torch.float32, beta=0.5, alpha=2.0)
        out[tile_b, tile_m, :] = acc
    return out


def _reference_call_forms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_n: int) -> torch.Tensor:
    acc = torch.zeros(q.shape[0], q.shape[1], v.shape[2])
    for begin in range(0, k.shape[1], block_n):
        scores = q.float() @ k[:, begin:begin + block_n].float().transpose(1, 2)
        probabilities = (scores * 0.5).to(v.dtype).float()
        acc = 0.5 * acc + 2.0 * (probabilities @ v[:, begin:begin + block_n].float())
    return acc


@pytest.mark.parametrize(("batch", "m", "n", "blocks"), [(1, 1, 1, [1, 16, 16]), (2, 5, 7, [1, 4, 4]),
                                                        (3, 17, 20, [2, 16, 16])])
def test_positional_out_dtype_keyword_operands_and_scaled_baddbmm(batch: int, m: int, n: int, blocks: list[int],
                                                                  device: torch.device) -> None:
    q = _randn(batch, m, 16, dtype=torch.float16, device=device, scale=0.5)
    k = _randn(batch, n, 16, dtype=torch.float16, device=device, scale=0.5)
    v = _randn(batch, n, 16, dtype=torch.float16, device=device)
    expected = _reference_call_forms(q.cpu(), k.cpu(), v.cpu(), blocks[2]).to(device)
    _run(product_call_forms, (q, k, v), expected, (1e-2, 1e-2), device, blocks)


def addmm_keywords(x: torch.Tensor, y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    m, n = c.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        product = torch.addmm(c[tile_m, tile_n], mat1=x[tile_m, :], mat2=y[:, tile_n], beta=0, alpha=3)
        out[tile_m, tile_n] = product + torch.addmm(input=c[tile_m, tile_n], mat1=x[tile_m, :], mat2=y[:, tile_n])
    return out


@pytest.mark.parametrize(("m", "n"), [(1, 1), (13, 9)])
def test_addmm_by_keyword_with_beta_zero_ignores_the_input(m: int, n: int, device: torch.device) -> None:
    x, y = _operands(m, 16, n, torch.float32, device)
    c = torch.randn(m, n, device=device)
    expected = 3 * (x @ y) + (c + x @ y)
    _run(addmm_keywords, (x, y, c), expected, _TOL[torch.float32], device, [16, 16])


def mm_into_out(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m in hl.tile(x.size(0)):
        torch.mm(x[tile_m, :], y, out=out[tile_m, :])  # line: mm-out
    return out


def test_a_product_into_out_inside_a_tile_loop_is_refused_with_its_line(device: torch.device) -> None:
    from marked_lines import marked_line
    x, y = _operands(4, 8, 4, torch.float32, device)
    for mode in ("eager", _mode(device)):
        with pytest.raises(tessera.exc.UnsupportedOperationError, match="out=") as caught:
            tessera.kernel(mm_into_out, mode=mode)(x, y)
        assert caught.value.location.lineno == marked_line(__file__, "mm-out")[0]


def diagonal_block_product(s: T, v: T) -> T:
    out = torch.empty_like(v)
    for tile_m, tile_n in hl.tile(v.size()):
        out[tile_m, tile_n] = hl.dot(s[tile_m, tile_m], v[tile_m, tile_n])
    return out


def test_a_product_over_one_tile_used_twice_is_a_located_refusal() -> None:
    s, v = torch.randn(32, 32), torch.randn(32, 16)
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="same tile") as info:
        tessera.kernel(diagonal_block_product, mode="interpret", config=tessera.Config(block_sizes=[16, 16]))(s, v)
    assert "hl.dot(s[tile_m, tile_m], v[tile_m, tile_n])" in str(info.value)


@pytest.mark.parametrize("m, n, k, blocks, operands", [
    (1, 4096, 4096, [16, 64, 128], "bf16"),        # fewer 128 x 128 tiles than SMs: narrow, deep K
    (128, 4096, 14336, [64, 64, 128], "bf16"),
    (4096, 4096, 4096, [128, 256, 64], "bf16"),    # a wave of 128 x 256 tiles: wide N
    (1024, 4096, 4096, [128, 256, 64], "bf16"),    # 128 x 256 tiles: 128 programs, 97% of a wave
    (512, 4096, 4096, [128, 128, 64], "bf16"),     # 128 x 256 tiles would be half a wave; 4 rows of M blocks
    (128, 14336, 4096, [128, 64, 64], "bf16"),     # one row of M blocks over half a wave: 64-wide N
    (1, 28672, 4096, [16, 128, 64], "bf16"),
    # 8-bit operands take 128-deep K steps whatever the tiles (fp8 M128 N11008 K4096 with 64-deep
    # steps: 0.56x torch._scaled_mm)
    (128, 11008, 4096, [128, 64, 128], "fp8"),
    (4096, 4096, 4096, [128, 256, 128], "fp8"),
    (16, 4096, 4096, [16, 64, 128], "fp8"),
    (128, 4096, 11008, [64, 64, 256], "fp8"),     # 64 x 64 tiles: 256-deep
])
def test_heuristic_gemm_blocks_follow_the_grid(m: int, n: int, k: int, blocks: list[int], operands: str) -> None:
    # Planned on the CPU for the H100 (132 SMs); measured effect in benchmarks/results/issue17/gemm_sweep*.
    from benchmarks.gemm_sweep import fp8_kernel
    from examples.matmul import matmul
    from tessera.runtime.tuning import heuristic_for

    dtype = torch.float8_e4m3fn if operands == "fp8" else torch.bfloat16
    x, y = torch.empty(m, k, dtype=dtype), torch.empty(k, n, dtype=dtype)
    kernel, args = (fp8_kernel(), (x, y, torch.ones(m, 1), torch.ones(1, n))) if operands == "fp8" else (matmul, (x, y))
    config = heuristic_for(tessera.kernel(kernel.fn, mode="interpret").bind(*args))
    assert config["block_sizes"] == blocks


def test_heuristic_runs_batch_dims_slowest() -> None:
    # bmm's batch dim (block 1) varies slowest, so programs running together share one matrix's
    # operands in L2 (H100: B32 1024^3 0.64x -> 0.84x torch.bmm).
    from examples.bmm import bmm
    from tessera.runtime.tuning import heuristic_for

    a = torch.empty(32, 1024, 1024, dtype=torch.bfloat16)
    config = heuristic_for(tessera.kernel(bmm.fn, mode="interpret").bind(a, a))
    assert config["loop_orders"] == [[1, 2, 0]]


@pytest.mark.parametrize("batch, m, n, k", [(1, 1, 1, 1), (3, 17, 33, 20), (2, 64, 48, 96)])
def test_bmm_with_batch_slowest_matches_torch(device: torch.device, batch: int, m: int, n: int, k: int) -> None:
    from examples.bmm import bmm

    a = torch.randn(batch, m, k, device=device)
    b = torch.randn(batch, k, n, device=device)
    kernel = tessera.kernel(bmm.fn, dot_precision="ieee")  # the GPU's default tf32 rounds apart from torch's fp32
    torch.testing.assert_close(kernel(a, b), torch.bmm(a, b), rtol=1e-4, atol=1e-4)


@tessera.kernel
def _bmm_acc_read_in_loop(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bmm whose K loop also reads the carried accumulator (a running max): it stays 3-D."""
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    peak = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        top = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            top = torch.maximum(top, acc)
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc
        peak[tile_b, tile_m, tile_n] = top
    return out, peak


@tessera.kernel
def _bmm_of_batch_window(a: torch.Tensor, b: torch.Tensor, first: int) -> torch.Tensor:
    """bmm of matrices first.. of a and b (batch tiles of one matrix from an offset): the batch
    index is a scalar of the 2-D operand loads."""
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.zeros([batch, m, n], dtype=a.dtype, device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([first, 0, 0], [batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = (acc * 2.0).to(out.dtype)
    return out


@pytest.mark.parametrize("batch, m, n, k", [(1, 1, 1, 1), (3, 17, 33, 40), (2, 32, 16, 48)])
def test_bmm_whose_loop_reads_its_accumulator(device: torch.device, batch: int, m: int, n: int, k: int) -> None:
    a = _randn(batch, m, k, dtype=torch.float32, device=device)
    b = _randn(batch, k, n, dtype=torch.float32, device=device, scale=k ** -0.5)
    out, peak = tessera.kernel(_bmm_acc_read_in_loop.fn, config=tessera.Config(block_sizes=[16, 16, 16]),
                               mode=_mode(device), dot_precision="ieee")(a, b)
    torch.testing.assert_close(out, torch.bmm(a, b), rtol=1e-4, atol=1e-4)
    partial = [torch.bmm(a[:, :, :start], b[:, :start, :]) for start in range(0, k, 16)]
    expected_peak = torch.stack([torch.zeros_like(out)] + partial).amax(0)
    torch.testing.assert_close(peak, expected_peak, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("blocks", [[16, 16, 16], [32, 16, 32]])
def test_bmm_of_a_batch_window(device: torch.device, dtype: torch.dtype, blocks: list[int]) -> None:
    a = _randn(5, 19, 37, dtype=dtype, device=device)
    b = _randn(5, 37, 21, dtype=dtype, device=device, scale=37 ** -0.5)
    expected = torch.zeros(5, 19, 21, dtype=torch.float32, device=device)
    expected[2:] = torch.bmm(a[2:].float(), b[2:].float()) * 2.0
    _run(_bmm_of_batch_window.fn, (a, b, 2), expected.to(dtype), _TOL[dtype], device, block_sizes=blocks)


def test_bmm_loads_and_accumulates_in_2d() -> None:
    # One matrix per program: the operand tiles load as 2-D blocks and the K loop carries a 2-D
    # accumulator, so the product is the loads' own (no reshape between them for Triton to fold).
    from examples.bmm import bmm

    a, b = torch.empty(4, 256, 128, dtype=torch.bfloat16), torch.empty(4, 128, 96, dtype=torch.bfloat16)
    source = tessera.kernel(bmm.fn, mode="interpret").bind(a, b).to_triton_code(
        tessera.Config(block_sizes=[64, 64, 32]))
    loop = source[source.index("for k1_0"):source.index("tl.store")]
    carried = re.search(r"(\w+_2d) = tl\.dot\(.*acc=(\w+_2d)", loop)
    assert carried is not None and f"{carried.group(2)} = {carried.group(1)}" in loop
    assert "[:, None, None]" not in loop  # both operand loads are 2-D pointer blocks


def test_bmm_compiles_to_one_warpgroup_product_per_k_step() -> None:
    # H100 (sm_90), compiled on the CPU: with 3-D operand loads Triton 3.6 copied bmm's first
    # operand from shared memory into registers and split each K step into four wgmma of K=16
    # (bmm B32 1024^3 at 0.86x torch.bmm, matmul 4096^3 at 0.97x); with TMA descriptors its
    # pipeliner failed ("operand #0 does not dominate this use").
    from examples.bmm import bmm
    from sm90_compile import sm90_ttgir

    a = torch.empty(8, 2048, 2048, dtype=torch.bfloat16)
    config = tessera.Config(block_sizes=[128, 256, 64], num_warps=8, num_stages=3, l2_grouping=8,
                            loop_orders=[[1, 2, 0]])
    for indexing in ("pointer", "tensor_descriptor"):
        (ttgir,) = sm90_ttgir(tessera.kernel(bmm.fn, mode="interpret"), (a, a), config.merged(indexing=indexing))
        assert ttgir.count("ttng.warp_group_dot ") == 1, indexing
        assert "tt.split" not in ttgir and "ttg.local_load" not in ttgir, indexing


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_addmm_of_float8_operands_into_a_float32_accumulator_is_a_located_refusal(mode: str) -> None:
    # torch.promote_types(float32, float8) raises: it surfaced as a raw RuntimeError from inside the trace
    from examples.matmul import matmul

    x = torch.randn(32, 32).to(torch.float8_e4m3fn)
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="no common dtype") as info:
        tessera.kernel(matmul.fn, mode=mode)(x, x)
    assert "matmul.py" in str(info.value) and "hl.dot" in str(info.value)


def int8_product(x, y, acc_dtype):
    out = torch.empty([x.size(0), y.size(1)], dtype=acc_dtype, device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n], dtype=acc_dtype)
        for tile_k in hl.tile(x.size(1)):
            acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("acc_dtype", [torch.float16, torch.float32])
def test_int8_dot_into_a_float_accumulator_is_refused(mode, acc_dtype):
    x = torch.randint(-10, 10, (20, 33), dtype=torch.int8)
    kernel = tessera.kernel(int8_product, mode=mode)
    with pytest.raises(exc.AccumulatorDtypeError, match="int8 operands into a torch.float") as info:
        kernel(x, x.t().contiguous(), acc_dtype)
    assert isinstance(info.value, TypeError) and "hl.dot(" in info.value.location.render()


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (20, 33, 17)])
def test_int8_dot_into_an_int32_accumulator(mode, shape):
    m, k, n = shape
    x, y = torch.randint(-10, 10, (m, k), dtype=torch.int8), torch.randint(-10, 10, (k, n), dtype=torch.int8)
    result = tessera.kernel(int8_product, mode=mode)(x, y, torch.int32)
    torch.testing.assert_close(result, (x.int() @ y.int()), atol=0, rtol=0)
