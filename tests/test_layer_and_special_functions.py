"""Issue 15, the torch functions Helion users write inside tile loops: `torch.sinc logit erfinv`
(language/special.py) and `F.linear pad dropout cosine_similarity` (language/layer_functions.py).
Each against torch in eager and interpret modes, at size 1, non-powers of two and tail tiles;
what torch refuses, or registers cannot hold, is refused at the user's line in every mode."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import tessera
import tessera.language as hl
from tessera import exc
from marked_lines import marked_line

T = torch.Tensor
MODES = ("eager", "interpret")
CONFIG = tessera.Config(block_sizes=[4])


def elements(out: T, x: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = op(x[tile])
    return out


def rows(out: T, x: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :])
    return out


def _each_mode(kernel: Callable[..., T], expected: T, *args: Any, config: tessera.Config = CONFIG) -> list[T]:
    return [tessera.kernel(kernel, mode=mode, config=config)(torch.empty_like(expected), *args) for mode in MODES]


# -- torch.erfinv, sinc, logit ----------------------------------------------------------------------
def _erfinv_domain(dtype: torch.dtype) -> T:
    """Every region of erfinv: a dense grid of (-1, 1), 1 - |y| down to the dtype's last step
    below 1, the exact ends, beyond them, NaN and signed zeros."""
    near_one = 1 - torch.logspace(-1, -17, 300, dtype=torch.float64)
    specials = torch.tensor([1.0, -1.0, 1.5, -1.5, 2.0, float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-30,
                             -1e-38], dtype=torch.float64)
    values = torch.cat([torch.linspace(-1, 1, 4001, dtype=torch.float64), near_one, -near_one, specials]).to(dtype)
    return torch.cat([values, torch.nextafter(torch.ones(1, dtype=dtype), torch.zeros(1, dtype=dtype))])


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.float64, 1e-11),
                                              (torch.float16, 1e-3), (torch.bfloat16, 1e-2)])
def test_erfinv_over_its_whole_domain_matches_torch(dtype: torch.dtype, tolerance: float) -> None:
    y = _erfinv_domain(dtype)
    expected = torch.erfinv(y)
    for got in _each_mode(elements, expected, y, torch.erfinv):
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True)
        assert torch.equal(got.isinf(), expected.isinf()) and torch.equal(got.isnan(), expected.isnan())
        numbers = ~expected.isnan()  # (a NaN's sign bit is unspecified)
        assert torch.equal(got[numbers].signbit(), expected[numbers].signbit())  # -0.0 -> -0.0, -1 -> -inf


def test_erfinv_of_integers_is_float32_as_torch() -> None:
    y = torch.tensor([-2, -1, 0, 1, 2, 0, 1], dtype=torch.int32)
    for got in _each_mode(elements, torch.erfinv(y), y, torch.special.erfinv):
        assert got.dtype == torch.float32 and torch.equal(got.nan_to_num(7.0), torch.erfinv(y).nan_to_num(7.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_sinc_is_one_at_zero_and_zero_at_the_integers(dtype: torch.dtype) -> None:
    x = torch.cat([torch.arange(-4, 5), torch.arange(-4, 5) * 0.37]).to(dtype) if dtype.is_floating_point \
        else torch.arange(-4, 5, dtype=dtype)
    expected = torch.sinc(x)
    for got in _each_mode(elements, expected, x, lambda v: v.sinc()):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("eps", [None, 0.0, 0.25])
def test_logit_clamps_to_eps_and_keeps_nan(eps: float | None) -> None:
    x = torch.tensor([0.0, 1.0, 0.5, 0.1, 0.99, -0.5, 1.5, float("nan"), 0.3])
    expected = torch.logit(x, eps)
    for got in _each_mode(elements, expected, x, lambda v: torch.logit(v, eps)):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6, equal_nan=True)


# -- F.linear ---------------------------------------------------------------------------------------
def linear_rows(out: T, x: T, weight: T, bias: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.linear(x[tile, :], weight[:, :], bias[:])
    return out


def linear_batches(out: T, x: T, weight: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :, :] = F.linear(x[tile, :, :], weight[:, :])
    return out


def linear_vectors(out: T, x: T, weight: T, bias: T) -> T:
    for tile in hl.grid(x.size(0)):
        out[tile, :] = F.linear(x[tile, :], weight[:, :], bias[:])
    return out


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-4), (torch.float16, 1e-2), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows_, inner, outer", [(1, 1, 1), (5, 7, 3), (9, 16, 20)])
def test_linear_of_1d_2d_and_3d_tile_values(rows_: int, inner: int, outer: int, dtype: torch.dtype,
                                             tolerance: float) -> None:
    generator = torch.Generator().manual_seed(3)
    x, weight = torch.randn(rows_, inner, generator=generator), torch.randn(outer, inner, generator=generator)
    bias = torch.randn(outer, generator=generator)
    x, weight, bias = x.to(dtype), weight.to(dtype), bias.to(dtype)
    expected = (x.double() @ weight.double().T + bias.double()).to(dtype)  # one rounding, as torch's addmm
    for kernel in (linear_rows, linear_vectors):
        for got in _each_mode(kernel, expected, x, weight, bias):
            torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)
    batched = torch.randn(rows_, 2, inner, generator=generator).to(dtype)
    expected = (batched.double() @ weight.double().T).to(dtype)
    for got in _each_mode(linear_batches, expected, batched, weight):
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


def linear_mixed_dtypes(out: T, x: T, weight: T, bias: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.linear(x[tile, :].half(), weight[:, :], bias[:])  # line: linear-mixed
    return out


def test_linear_of_mixed_dtypes_is_refused_at_its_line_as_torch_refuses_it() -> None:
    with pytest.raises(RuntimeError):
        F.linear(torch.ones(2, 3).half(), torch.ones(4, 3))
    for mode in MODES:
        with pytest.raises(exc.TesseraError) as info:
            tessera.kernel(linear_mixed_dtypes, mode=mode, config=CONFIG)(
                torch.empty(5, 4), torch.randn(5, 3), torch.randn(4, 3), torch.randn(4))
        assert info.value.location.lineno == marked_line(__file__, "linear-mixed")[0], mode


# -- F.pad ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (6, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_pad_of_whole_dims_in_every_mode_of_torch(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(4)) * 8).to(dtype)
    width = shape[1]
    cases: list[Callable[[T], T]] = [
        lambda v: F.pad(v, (1, 2)), lambda v: F.pad(v, (0, 3), value=2.5), lambda v: F.pad(v, (2, -1), value=-1),
        lambda v: F.pad(v, (4, 1), mode="replicate"), lambda v: F.pad(v, (1, 1), mode="circular"),
        lambda v: F.pad(v[:, None, :], (1, 0, 2, 1)).sum(1), lambda v: F.pad(v[:, :1], (1, -1), value=3.0)]
    if width > 3:
        cases.append(lambda v: F.pad(v, (3, 2), mode="reflect"))
    for op in cases:
        expected = op(x)
        for got in _each_mode(rows, expected, x, op):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def pad_tile_dim(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.pad(x[tile, :][None], (0, 0, 1, 0))[0]  # line: pad-on-tile
    return out


def pad_reflect_too_wide(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.pad(x[tile, :], (7, 0), mode="reflect")  # line: pad-too-wide
    return out


def pad_negative_circular(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.pad(x[tile, :], (1, -1), mode="circular")  # line: pad-negative
    return out


@pytest.mark.parametrize("kernel, line, words", [
    (pad_tile_dim, "pad-on-tile", "which is a tile"),
    (pad_reflect_too_wide, "pad-too-wide", "Padding size should be less"),
    (pad_negative_circular, "pad-negative", "negative pad")])
def test_pad_it_cannot_compute_soundly_is_refused_at_its_line(kernel: Callable[..., T], line: str, words: str) -> None:
    modes = MODES if kernel is pad_tile_dim else ("interpret",)  # eager is torch itself for the others
    for mode in modes:
        with pytest.raises(exc.TesseraError, match=words) as info:
            tessera.kernel(kernel, mode=mode, config=CONFIG)(torch.zeros(8, 7), torch.randn(8, 7))
        assert info.value.location.lineno == marked_line(__file__, line)[0], mode


# -- F.dropout --------------------------------------------------------------------------------------
def dropped(out: T, x: T, p: float) -> T:
    torch.manual_seed(7)  # the launch's seed comes from torch's generator
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = F.dropout(x[tile_m, tile_n], p)
    return out


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_1_minus_p_scaled_and_is_the_same_in_every_mode_and_block_size(p: float) -> None:
    x = torch.randn(67, 45, generator=torch.Generator().manual_seed(5))
    results = [tessera.kernel(dropped, mode=mode, config=tessera.Config(block_sizes=blocks))(torch.empty_like(x), x, p)
               for mode in MODES for blocks in ([4, 16], [32, 8])]
    for other in results[1:]:
        assert torch.equal(other, results[0])
    kept = results[0] != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.03
    torch.testing.assert_close(results[0][kept], x[kept] / (1 - p), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_dropout_edges_p0_p1_and_evaluation_are_torchs(dtype: torch.dtype) -> None:
    x = torch.tensor([[1.0, float("nan"), -0.0, 3.0, float("inf")]]) if dtype.is_floating_point \
        else torch.tensor([[1, -2, 0, 3, 9]])
    x = x.to(dtype)
    for p, training in ((0.0, True), (0.7, False), (1.0, True)):
        expected = F.dropout(x, p, training)  # p = 1: x * 0 (a NaN stays NaN; inf * 0 is NaN)
        for mode in MODES:
            got = tessera.kernel(dropped, mode=mode)(torch.empty_like(x), x, p) if training else \
                tessera.kernel(rows, mode=mode)(torch.empty_like(x), x, lambda v: F.dropout(v, p, training=False))
            torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True, msg=f"{mode} p={p}")


def dropout_integers(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = F.dropout(x[tile], 0.5)  # line: dropout-int
    return out


def dropout_too_likely(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = F.dropout(x[tile], 1.5)  # line: dropout-p
    return out


@pytest.mark.parametrize("kernel, line, dtype", [(dropout_integers, "dropout-int", torch.int32),
                                                 (dropout_too_likely, "dropout-p", torch.float32)])
def test_dropout_torch_refuses_is_refused_at_its_line(kernel: Callable[..., T], line: str, dtype: torch.dtype) -> None:
    for mode in MODES:
        with pytest.raises(exc.TesseraError) as info:
            tessera.kernel(kernel, mode=mode)(torch.zeros(6, dtype=dtype), torch.ones(6, dtype=dtype))
        assert info.value.location.lineno == marked_line(__file__, line)[0], mode


# -- F.cosine_similarity ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_cosine_similarity_of_broadcast_operands_and_zero_rows(dtype: torch.dtype, tolerance: float) -> None:
    x = torch.randn(6, 9, generator=torch.Generator().manual_seed(6)).to(dtype)
    x[2] = 0  # a zero row: the norm clamps to eps, the similarity is 0
    for op in (lambda v: F.cosine_similarity(v, v.flip([1]), dim=1)[:, None].expand_as(v),
               lambda v: F.cosine_similarity(v, v[:, :1], dim=1, eps=1e-4)[:, None].expand_as(v),
               lambda v: F.cosine_similarity(v[:, None, :], v[:, :, None], dim=1)):
        expected = op(x)
        for got in _each_mode(rows, expected, x, op):
            torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


# -- pointwise losses and F.one_hot (language/losses.py) -------------------------------------------
def tile_losses(out: T, x: T, y: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = op(x[tile, :], y[tile, :]) + x[tile, :].sum(1) * 0
    return out


LOSSES: dict[str, Callable[[T, T], T]] = {
    "mse mean": lambda a, b: F.mse_loss(a, b), "l1 sum": lambda a, b: F.l1_loss(a, b, reduction="sum"),
    "smooth l1": lambda a, b: F.smooth_l1_loss(a, b, beta=0.3), "huber": lambda a, b: F.huber_loss(a, b, delta=2.0),
    "soft margin": lambda a, b: F.soft_margin_loss(a, b.sign()),
    "kl batchless": lambda a, b: F.kl_div(a.log_softmax(1), b.softmax(1), reduction="sum"),
    "logits bce": lambda a, b: F.binary_cross_entropy_with_logits(a, b.sigmoid(), pos_weight=b.abs()),
}


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (6, 16)])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_reductions_are_over_each_tile_as_eager_computes_them(name: str, shape: tuple[int, int]) -> None:
    generator = torch.Generator().manual_seed(10)
    x, y = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
    op = LOSSES[name]
    expected = torch.cat([op(a, b).expand(a.size(0)) for a, b in zip(x.split(4), y.split(4))])  # one value per tile
    for mode in MODES:
        got = tessera.kernel(tile_losses, mode=mode, config=CONFIG)(torch.empty_like(expected), x, y, op)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=mode)


def weighted_mse(out: T, x: T, y: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = F.mse_loss(x[tile], y[tile], weight=y[tile], reduction="none")  # line: weighted-mse
    return out


def one_hot_from_data(out: T, x: T, y: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = F.one_hot(x[tile].long()).sum(1)  # line: one-hot-data
    return out


@pytest.mark.parametrize("kernel, line, words", [(weighted_mse, "weighted-mse", "weight"),
                                                 (one_hot_from_data, "one-hot-data", "num_classes")])
def test_loss_forms_torch_means_otherwise_are_refused_at_their_line(kernel: Callable[..., T], line: str,
                                                                   words: str) -> None:
    with pytest.raises(exc.TesseraError, match=words) as info:
        tessera.kernel(kernel, mode="interpret")(torch.zeros(6), torch.ones(6), torch.ones(6))
    assert info.value.location.lineno == marked_line(__file__, line)[0]


def classified(out: T, x: T, target: T, weight: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = op(x[tile, :], target[tile], weight[:]) + target[tile] * 0
    return out


CLASSIFICATIONS: dict[str, Callable[[T, T, T], T]] = {
    "mean": lambda x, t, w: F.cross_entropy(x, t), "weighted sum": lambda x, t, w: F.cross_entropy(x, t, w, reduction="sum"),
    "weighted mean": lambda x, t, w: F.cross_entropy(x, t, weight=w),
    "nll ignoring class 0": lambda x, t, w: F.nll_loss(x.log_softmax(1), t.clamp_min(0), ignore_index=0),
    "fp16 mean": lambda x, t, w: F.cross_entropy(x.half(), t).float(),
}


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (6, 16)])
@pytest.mark.parametrize("name", sorted(CLASSIFICATIONS))
def test_cross_entropy_with_ignored_targets_and_class_weights(name: str, shape: tuple[int, int]) -> None:
    """Every third target is ignore_index (-100): "mean" divides by the kept targets' weights, so a
    tile of ignored targets only gives NaN, as torch on that tile."""
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(shape, generator=generator)
    target = torch.randint(0, shape[1], (shape[0],), generator=generator)
    target[::3] = -100
    weight = torch.rand(shape[1], generator=generator) + 0.5
    op = CLASSIFICATIONS[name]
    expected = torch.cat([op(a, b, weight).float().expand(a.size(0)) for a, b in zip(x.split(4), target.split(4))])
    for mode in MODES:
        got = tessera.kernel(classified, mode=mode, config=CONFIG)(torch.empty_like(expected), x, target, weight, op)
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3, equal_nan=True, msg=mode)
    none = F.cross_entropy(x, target, reduction="none")
    for mode in MODES:
        got = tessera.kernel(classified, mode=mode, config=CONFIG)(torch.empty_like(none), x, target, weight,
                                                                   lambda a, b, w: F.cross_entropy(a, b, reduction="none"))
        torch.testing.assert_close(got, none, rtol=1e-5, atol=1e-5, msg=mode)


def padded_by_argument(out: T, x: T, value: float) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = F.pad(x[tile, :], (2, 1), value=value) + F.pad(x[tile, :1], (1, -1), value=value)
    return out


def test_pad_value_may_be_a_runtime_float_argument() -> None:
    x = torch.randn(5, 7)
    expected = F.pad(x, (2, 1), value=-0.75) + F.pad(x[:, :1], (1, -1), value=-0.75)
    for got in _each_mode(padded_by_argument, expected, x, -0.75):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
