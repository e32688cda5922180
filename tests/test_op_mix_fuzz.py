"""A fixed slice of benchmarks/op_mix_fuzz.py, and the minimised programs its campaign found.

The fuzz composes session 12's ops (special functions, layer functions, losses, dot/vdot/inner,
sort/topk) and stores (write-back, window, scatter, atomic totals) over odd shapes, dtypes and
layouts, and compares eager and interpret mode with PyTorch. Each regression below is one
finding, minimised, named after the behaviour it broke; it runs in eager mode and in the
device's compiled mode (interpret on CPU).
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import tessera
import tessera.language as hl
from benchmark_modules import load_benchmark
from tessera import exc

op_mix_fuzz = load_benchmark("op_mix_fuzz")

SEEDS = range(10)
T = torch.Tensor


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


def _run(function, mode: str, block: int, *args: T) -> T:
    # products in ieee float32 (the GPU's default is tf32): the tests check the ops, not tf32's rounding
    kernel = tessera.kernel(function, mode=mode, config=tessera.Config(block_sizes=[block]), dot_precision="ieee")
    return kernel(*args)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_of_session_12_ops_agrees_with_torch_in_every_mode(seed: int) -> None:
    findings, _refusal = op_mix_fuzz.run_seed(seed)
    assert not findings, "\n".join(f"[{f.kind}] {f.detail}\n{f.program}" for f in findings)


# -- a product over a whole dim whose padding lanes hold inf or NaN (1 / x of the padding's 0, a
# -- sort's padding key): 0 * inf poisoned every sum of the product with NaN (silently wrong) --
def reciprocal_product(x: T, w: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = (1.0 / x[tile, :]) @ w[:, :].T
    return out


def sorted_inner(x: T, w: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.inner(torch.sort(x[tile, :], dim=1).values, w[:, :])
    return out


def log_linear(x: T, w: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.linear(torch.log(x[tile, :]), w[:, :])
    return out


@pytest.mark.parametrize("n", [1, 3, 5, 13, 17])
@pytest.mark.parametrize("function, reference", [
    (reciprocal_product, lambda x, w: (1.0 / x) @ w.T),
    (sorted_inner, lambda x, w: torch.inner(torch.sort(x, dim=1).values, w)),
    (log_linear, lambda x, w: F.linear(torch.log(x), w))], ids=["reciprocal", "sorted", "linear"])
def test_a_product_over_a_padded_whole_dim_ignores_the_padding(function, reference, n: int,
                                                               device: torch.device) -> None:
    x = torch.rand(7, n, device=device) + 0.5
    w = torch.randn(3, n, device=device)
    for mode in _modes(device):
        result = _run(function, mode, 4, x, w, torch.zeros(7, 3, device=device))
        torch.testing.assert_close(result, reference(x, w), rtol=1e-4, atol=1e-4)


# -- F.cosine_similarity normalises each float operand in its own dtype: a zero fp16 row beside
# -- an fp32 operand is NaN in torch (eps rounds to 0 in fp16), Tessera gave 0 (widened first) --
def cosine(x: T, y: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = F.cosine_similarity(x[tile, :], y[tile, :], dim=1)
    return out


@pytest.mark.parametrize("dtypes", [(torch.float16, torch.float32), (torch.float32, torch.float16),
                                    (torch.float16, torch.float16), (torch.bfloat16, torch.float32)], ids=str)
def test_cosine_similarity_of_mixed_dtypes_rounds_each_norm_as_torch(dtypes, device: torch.device) -> None:
    x = torch.randn(5, 9, device=device).to(dtypes[0])
    y = torch.randn(5, 9, device=device).to(dtypes[1])
    x[1], y[3] = 0, 0
    x[2] = 1e-4
    expected = F.cosine_similarity(x, y, dim=1)
    for mode in _modes(device):
        result = _run(cosine, mode, 2, x, y, torch.zeros(5, dtype=expected.dtype, device=device))
        torch.testing.assert_close(result, expected, rtol=2e-3, atol=2e-3, equal_nan=True)


# -- F.soft_margin_loss works in the input's dtype: an fp16 input's exp overflows to inf beside an
# -- fp32 target in torch (Tessera computed the product in fp32 and gave the finite loss) --
def soft_margin(x: T, t: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.soft_margin_loss(x[tile, :], t[tile, :], reduction="none")
    return out


def test_soft_margin_loss_of_fp16_overflows_as_torch(device: torch.device) -> None:
    x = torch.tensor([[-65.5, 3.0, 12.0], [61.5, -0.5, -12.0]], dtype=torch.float16, device=device)
    t = torch.tensor([[1.0, -1.0, -1.0], [-1.0, 1.0, 1.0]], device=device)
    expected = F.soft_margin_loss(x, t, reduction="none")
    assert expected.isinf().any()
    for mode in _modes(device):
        torch.testing.assert_close(_run(soft_margin, mode, 1, x, t, torch.zeros_like(x)), expected,
                                   rtol=2e-3, atol=2e-3)


# -- F.nll_loss / cross_entropy counted each row as scores * 0 + 1: an infinite score at the
# -- target made the count NaN and the loss NaN where torch gives -inf --
def nll(x: T, labels: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = F.nll_loss(x[tile, :], labels[tile], reduction="none")
    return out


def nll_mean(x: T, labels: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [0], F.nll_loss(x[tile, :], labels[tile], ignore_index=1))
    return out


def test_nll_loss_of_an_infinite_score_at_the_target_is_infinite(device: torch.device) -> None:
    x = torch.tensor([[0.5, float("inf"), 2.0], [float("-inf"), 1.0, float("nan")], [1.0, 2.0, 3.0]],
                     device=device)
    labels = torch.tensor([1, 0, 2], device=device)
    for mode in _modes(device):
        torch.testing.assert_close(_run(nll, mode, 2, x, labels, torch.zeros(3, device=device)),
                                   F.nll_loss(x, labels, reduction="none"), equal_nan=True)
        finite = torch.tensor([[0.5, 1.0, 2.0], [3.0, 1.0, -1.0], [1.0, 2.0, 3.0]], device=device)
        torch.testing.assert_close(_run(nll_mean, mode, 4, finite, labels, torch.zeros(1, device=device)),
                                   F.nll_loss(finite, labels, ignore_index=1).reshape(1))


# -- torch.topk with a k that is not a power of two was refused in interpret mode (eager computed) --
def top(x: T, out_values: T, out_indices: T, k: int) -> tuple[T, T]:
    for tile in hl.tile(x.size(0)):
        values, indices = torch.topk(x[tile, :], k, dim=1)
        out_values[tile, :] = values
        out_indices[tile, :] = indices
        smallest = torch.topk(x[tile, :], k, dim=-1, largest=False).values
        out_values[tile, :] = out_values[tile, :] + smallest * 0
    return out_values, out_indices


# -- (and k = 1 of a block of one row: Triton's topk reduced the row to a scalar it could not reshape,
# -- an internal error in interpret mode) --
@pytest.mark.parametrize("block", [1, 4])
@pytest.mark.parametrize("n, k", [(5, 3), (5, 5), (13, 7), (16, 15), (17, 12), (3, 3), (1, 1), (2, 1), (9, 1)])
def test_topk_takes_any_k_up_to_the_dimension(n: int, k: int, block: int, device: torch.device) -> None:
    x = torch.randperm(7 * n, device=device).reshape(7, n).float()
    expected = torch.topk(x, k, dim=1)
    for mode in _modes(device):
        values, indices = _run(top, mode, block, x, torch.zeros(7, k, device=device),
                               torch.zeros(7, k, dtype=torch.int64, device=device), k)
        torch.testing.assert_close(values, expected.values)
        torch.testing.assert_close(indices, expected.indices)


# -- hl.atomic_add of a bf16 scalar into one element: the interpreter's bf16 atomic flattened a
# -- 0-d pointer (an internal error); eager's atomic of a [tile] value into one element was a raw
# -- RuntimeError from expand (the trace's located shape error now) --
def total(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [0], x[tile, :].sum())
    return out


def column_into_one_element(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [0], x[tile, 0])  # line: column_into_one_element
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_atomic_add_of_a_scalar_into_one_element(dtype: torch.dtype, device: torch.device) -> None:
    x = torch.randn(5, 7, device=device).to(dtype)
    for mode in _modes(device):
        result = _run(total, mode, 2, x, torch.zeros(1, dtype=dtype, device=device))
        torch.testing.assert_close(result.float(), x.float().sum().reshape(1), rtol=3e-2, atol=6e-2)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_atomic_add_of_a_tile_into_one_element_is_a_located_shape_error(mode: str) -> None:
    with pytest.raises(exc.ShapeMismatchError) as caught:
        _run(column_into_one_element, mode, 2, torch.randn(5, 3), torch.zeros(1))
    assert caught.value.location is not None
    assert os.path.basename(caught.value.location.filename) == os.path.basename(__file__)
    assert caught.value.hint


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_topk_of_an_int_argument_k_follows_each_call(mode: str) -> None:
    kernel = tessera.kernel(top, mode=mode, config=tessera.Config(block_sizes=[4]))
    x = torch.randperm(6 * 13).reshape(6, 13).float()
    for k in (3, 8, 5, 3):
        values, indices = kernel(x, torch.zeros(6, k), torch.zeros(6, k, dtype=torch.int64), k)
        torch.testing.assert_close(values, torch.topk(x, k, dim=1).values)
        torch.testing.assert_close(indices, torch.topk(x, k, dim=1).indices)


# -- Helion's broadcast by tile (a [tile] value against a [tile, n] one stands along the tile) in
# -- two-operand formulas (xlog1py, atan2, ldexp, hypot...): interpret computed it, eager refused --
def by_tile(x: T, y: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        rows = x[tile, :].sum(1)
        out[tile, :] = torch.special.xlog1py(rows, y[tile, :]) + torch.atan2(rows, y[tile, :]) \
            + torch.hypot(y[tile, :], rows) + torch.ldexp(rows, torch.ones_like(y[tile, :], dtype=torch.int32))
    return out


def test_two_operand_formulas_broadcast_by_tile_in_every_mode(device: torch.device) -> None:
    x, y = torch.rand(7, 7, device=device), torch.rand(7, 7, device=device)
    rows = x.sum(1)[:, None]
    expected = torch.special.xlog1py(rows, y) + torch.atan2(rows, y) + torch.hypot(y, rows) + rows * 2
    for mode in _modes(device):
        torch.testing.assert_close(_run(by_tile, mode, 2, x, y, torch.zeros(7, 7, device=device)), expected,
                                   rtol=1e-5, atol=1e-5)


# -- F.smooth_l1_loss of integers with beta=0 (torch: the l1 loss, which takes them) was refused in
# -- interpret mode: torch's dtype rule was asked without the call's beta --
def smooth_l1_of_integers(x: T, y: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.smooth_l1_loss(x[tile, :], y[tile, :], reduction="none", beta=0.0)
    return out


def test_smooth_l1_loss_of_integers_with_beta_zero(device: torch.device) -> None:
    x = torch.randint(-50, 50, (5, 6), device=device)
    y = torch.randint(-50, 50, (5, 6), device=device)
    expected = F.smooth_l1_loss(x, y, reduction="none", beta=0.0)
    for mode in _modes(device):
        torch.testing.assert_close(_run(smooth_l1_of_integers, mode, 2, x, y, torch.zeros_like(expected)), expected)


# -- F.dropout / torch.rand_like after F.pad, F.linear, torch.inner, cosine_similarity, one_hot or
# -- cross_entropy: eager mode lost which dims were tiles and refused what interpret computed --
LAYERS = {
    "pad": lambda v, w, a, labels: F.pad(v, (1, 2), mode="reflect"),
    "linear": lambda v, w, a, labels: F.linear(v, a[:, :]),
    "inner": lambda v, w, a, labels: torch.inner(v, a[:, :]),
    "cosine": lambda v, w, a, labels: F.cosine_similarity(v, w, dim=1),
    "one_hot": lambda v, w, a, labels: F.one_hot(labels, 6).float(),
    "cross_entropy": lambda v, w, a, labels: F.cross_entropy(v, labels, reduction="none"),
}


def dropout_after(x: T, y: T, a: T, labels: T, out: T, layer) -> T:
    for tile in hl.tile(x.size(0)):
        v = layer(x[tile, :], y[tile, :], a, labels[tile])
        dropped = F.dropout(v, 0.5)
        out[tile, :] = dropped if dropped.dim() == 2 else dropped[:, None]
    return out


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_dropout_after_a_layer_function_draws_alike_in_every_mode(name: str, device: torch.device) -> None:
    x, y, a = (torch.randn(shape, device=device) for shape in ((9, 5), (9, 5), (3, 5)))
    labels = torch.randint(0, 5, (9,), device=device)
    layer = LAYERS[name]
    kept = layer(x, y, a, labels)
    kept = kept if kept.dim() == 2 else kept[:, None]
    results = []
    for mode in _modes(device):
        torch.manual_seed(7)
        results.append(_run(dropout_after, mode, 4, x, y, a, labels, torch.zeros_like(kept), layer))
    torch.testing.assert_close(results[0], results[1])
    dropped = results[0] == 0
    torch.testing.assert_close(results[0][~dropped], (kept * 2)[~dropped])  # kept lanes scaled by 1 / (1 - p)


# -- scalar arguments in the special functions: xlog1py(s, v) / xlog1py(v_int, s) / ldexp(v, i)
# -- with s, i kernel arguments dispatched back into the trace (located refusals where eager
# -- computed); a Python-level refusal by torch's argument parser (atan2(0.5, v)) was a raw TypeError --
def scalar_special(x: T, out: T, s: float, i: int) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        out[tile, :] = torch.special.xlog1py(s, v) + torch.special.xlog1py(v.to(torch.int32), s) \
            + torch.ldexp(v, torch.tensor(i)) + torch.special.xlog1py(v, s)
    return out


def scalar_first_atan2(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.atan2(0.5, x[tile, :])  # line: scalar_first_atan2
    return out


@pytest.mark.parametrize("s, i", [(0.5, 2), (0.0, 0), (-0.25, -3)])
def test_special_functions_of_scalar_arguments(s: float, i: int, device: torch.device) -> None:
    x = torch.tensor([[-1.0, 0.0, 2.5], [3.0, float("nan"), -0.5]], device=device)
    expected = torch.special.xlog1py(s, x) + torch.special.xlog1py(x.to(torch.int32), s) + torch.ldexp(x, torch.tensor(i, device=device)) \
        + torch.special.xlog1py(x, s)
    for mode in _modes(device):
        result = tessera.kernel(scalar_special, mode=mode, config=tessera.Config(block_sizes=[2]))(
            x, torch.zeros_like(x), s, i)
        torch.testing.assert_close(result, expected, equal_nan=True)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_a_call_torch_refuses_by_its_argument_types_is_located(mode: str) -> None:
    with pytest.raises(exc.TesseraError) as caught:
        _run(scalar_first_atan2, mode, 2, torch.rand(4, 3), torch.zeros(4, 3))
    assert caught.value.location is not None
    assert os.path.basename(caught.value.location.filename) == os.path.basename(__file__)


# -- min(i, v.size(1)) of an int argument and a whole dim's size in a tile loop: a raw TypeError
# -- ("cannot determine truth value of Relational") in compiled modes --
def top_at_most(x: T, out: T, i: int) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        out[tile, :] = torch.topk(v, min(i, v.size(1)), 1).values.sum(1, keepdim=True) + max(i, v.size(-1))
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_min_of_a_scalar_argument_and_a_whole_size(mode: str) -> None:
    kernel = tessera.kernel(top_at_most, mode=mode, config=tessera.Config(block_sizes=[4]))
    x = torch.randperm(5 * 6).reshape(5, 6).float()
    for i in (2, 9, 1, 6):
        expected = torch.topk(x, min(i, 6), 1).values.sum(1, keepdim=True) + max(i, 6)
        torch.testing.assert_close(kernel(x, torch.zeros(5, 1), i), expected)


# -- torch.logit(v, eps) with eps from a scalar argument: a raw TypeError ("Cannot convert expression
# -- to float") in compiled modes; the clamp rounds eps and 1 - eps to v's dtype as torch --
def logit_of_argument(x: T, out: T, eps: float) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.logit(x[tile, :], eps * 0.5)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_logit_with_eps_of_a_scalar_argument(dtype: torch.dtype, device: torch.device) -> None:
    x = torch.tensor([[0.0, 1e-4, 0.5, 1.0], [float("nan"), 0.9999, -1.0, 2.0]], device=device).to(dtype)
    for mode in _modes(device):
        kernel = tessera.kernel(logit_of_argument, mode=mode, config=tessera.Config(block_sizes=[2]))
        for eps in (0.002, 0.2):
            result = kernel(x, torch.zeros_like(x), eps).cpu()
            # torch's CUDA logit clamps in float32 (1 - eps stays below 1 in bf16/fp16 inputs), its CPU
            # one in the input's dtype (where 1 - 0.001 rounds to 1: inf): either is torch's answer
            answers = [torch.logit(x.cpu(), eps * 0.5), torch.logit(x, eps * 0.5).cpu()]
            close = [torch.isclose(result.double(), a.double(), rtol=2e-3, atol=2e-3, equal_nan=True) for a in answers]
            assert (close[0] | close[1]).all(), (result, answers)


# -- an fp16 atomic_add whose sum overflows to inf: Triton's interpreter raised OverflowError (an
# -- internal error in interpret mode); fp16 adds now take the 16-bit compare-and-swap helper --
def scatter_add(values: T, index: T, out: T) -> T:
    for tile in hl.tile(values.size(0)):
        hl.atomic_add(out, [index[tile]], values[tile])
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_fp16_atomic_add_overflows_to_inf_and_counts_every_lane(mode: str) -> None:
    x = torch.full((4, 3), 2000.0, dtype=torch.float16)
    result = _run(total, mode, 2, x, torch.full((1,), 60000.0, dtype=torch.float16))
    assert result.isinf().all()
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 65000.0, 65000.0], dtype=torch.float16)
    index = torch.tensor([0, 0, 1, 0, 1, 2, 2])
    expected = torch.tensor([7.0, 8.0, float("inf")], dtype=torch.float16)
    torch.testing.assert_close(_run(scatter_add, mode, 4, values, index, torch.zeros(3, dtype=torch.float16)), expected)


# -- register shapes from int arguments: F.pad amounts, F.one_hot's num_classes (also through the
# -- F alias, which the rewrite now routes like torch.*) and topk's k take this call's value,
# -- guarded (were located refusals or raw argument-parser errors where eager computed) --
def shaped_by_argument(x: T, labels: T, out: T, i: int) -> T:
    for tile in hl.tile(x.size(0)):
        v = F.pad(x[tile, :], (i, 1)) + F.pad(x[tile, :], (1, i), mode="replicate")
        classes = F.one_hot(labels[tile], v.size(1) + i - x.size(1) + 2).sum(1, keepdim=True)
        out[tile, :] = v[:, :1] + classes + torch.topk(v, i, 1).values.sum(1, keepdim=True)
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_pad_one_hot_and_topk_sized_by_an_int_argument(mode: str) -> None:
    x, labels = torch.randn(5, 4), torch.tensor([0, 2, 1, 3, 0])
    kernel = tessera.kernel(shaped_by_argument, mode=mode, config=tessera.Config(block_sizes=[2]))
    for i in (1, 3, 2, 1):
        v = F.pad(x, (i, 1)) + F.pad(x, (1, i), mode="replicate")
        expected = v[:, :1] + F.one_hot(labels, v.size(1) + i - 4 + 2).sum(1, keepdim=True) \
            + torch.topk(v, i, 1).values.sum(1, keepdim=True)
        torch.testing.assert_close(kernel(x, labels, torch.zeros(5, 1), i), expected)


# -- a float scalar argument as a bf16 operand (F.pad(v, pad, value=s), torch.where(c, v, s)) in
# -- interpret mode: Triton's interpreter has no bf16 scalar casts (an internal error) --
def pad_and_where_with_argument(x: T, out: T, s: float) -> T:
    for tile in hl.tile(x.size(0)):
        v = F.pad(x[tile, :], (1, 2), value=s)
        out[tile, :] = torch.where(v > 0, v, s) + torch.clamp(v, max=s)
    return out


def test_a_float_argument_joins_bf16_values(device: torch.device) -> None:
    x = torch.randn(7, 5, device=device).bfloat16()
    v = F.pad(x, (1, 2), value=0.3)
    expected = torch.where(v > 0, v, 0.3) + torch.clamp(v, max=0.3)
    for mode in _modes(device):
        result = _run(pad_and_where_with_argument, mode, 4, x, torch.zeros_like(expected), 0.3)
        # compiled code adds in float32 and rounds once, torch rounds each op to bf16: a bf16 ulp apart
        torch.testing.assert_close(result, expected, rtol=1.6e-2, atol=8e-3)


def test_an_atomic_into_one_element_of_a_size_1_tensor_compiles_for_the_gpu() -> None:
    # Triton specializes a size of 1 to a constant, so the index check `(0) < out_size0` folded to a
    # Python bool, which tl.atomic_add refused ('bool' object has no attribute 'handle'; H100)
    from sm90_compile import sm90_ttgir

    for size in (1, 3):
        (ttgir,) = sm90_ttgir(tessera.kernel(total, mode="interpret"), (torch.randn(5, 7), torch.zeros(size)),
                              tessera.Config(block_sizes=[2]))
        assert "tt.atomic_rmw" in ttgir
