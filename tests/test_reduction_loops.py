"""Whole rows processed in chunks (`Config(reduction_loops=[chunk])`), against PyTorch.

The same kernels hold a row in one block by default; with a chunk, the body runs as passes over
the row (ir/rolling.py). Row lengths include 1, primes, exact multiples of the chunk and tails;
layouts include transposed and sliced inputs. A body that cannot be split into passes is a
ConfigError naming the line, never a wrong answer.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from examples.cross_entropy import cross_entropy_losses
from examples.layer_norm import layer_norm_fwd
from examples.rms_norm import rms_norm
from examples.softmax import softmax
from tessera import settings
from tessera.config import ONE_BLOCK_ROW_LIMIT
from tessera.exc import ConfigError


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _run(kernel, args, config: tessera.Config, device: torch.device):
    with settings.override(mode=_mode(device)):
        return kernel.bind(*args).run(config)


def _close(actual, expected, dtype: torch.dtype) -> None:
    tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=tolerance, rtol=tolerance)


_WIDTHS = [1, 13, 64, 301]  # size 1, a prime below the chunk, exactly one chunk, a prime with a tail
_LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t().contiguous().t(),
    "sliced": lambda t: torch.cat([t, t], dim=1)[:, ::2],
}


@pytest.mark.parametrize("width", _WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_softmax_in_chunks(width: int, dtype: torch.dtype, device: torch.device) -> None:
    x = torch.randn(5, width, device=device).to(dtype)
    out = _run(softmax, (x,), tessera.Config(block_sizes=[2], reduction_loops=[64]), device)
    _close(out, torch.softmax(x.float(), dim=-1).to(dtype), dtype)


@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_row_kernels_in_chunks_on_every_layout(layout: str, device: torch.device) -> None:
    change = _LAYOUTS[layout]
    x = change(torch.randn(7, 131, device=device))
    weight, bias = torch.randn(131, device=device), torch.randn(131, device=device)
    config = tessera.Config(block_sizes=[4], reduction_loops=[32])
    _close(_run(rms_norm, (x, weight), config, device),
           x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-5) * weight, torch.float32)
    out, mean, rstd = _run(layer_norm_fwd, (x, weight, bias), config, device)
    _close(out, torch.nn.functional.layer_norm(x, [131], weight, bias), torch.float32)
    _close(mean, x.mean(dim=1), torch.float32)
    labels = torch.randint(0, 131, (7,), device=device)
    losses = _run(cross_entropy_losses, (x.contiguous(), labels), config, device)  # it views logits flat
    _close(losses, torch.nn.functional.cross_entropy(x, labels, reduction="none"), torch.float32)


def test_chunk_passes_in_the_generated_code(device: torch.device) -> None:
    x = torch.randn(3, 100, device=device)
    code = softmax.bind(x).to_triton_code(tessera.Config(block_sizes=[2], reduction_loops=[32]))
    # max and sum of exponentials together (an online sum), then the normalized store: two passes
    assert code.count("for chunk_r0 in tl.range(0, x_size1, 32") == 2
    assert "online sum of exp" in str(softmax.bind(x).to_ir(tessera.Config(block_sizes=[2], reduction_loops=[32])))
    # tl.reduce in the interpreter (Triton's own combine functions); on the GPU tl.sum, and
    # tl.reduce with a NaN-propagating combine for the max
    assert "acc_" in code and "tl.reduce(acc_" in code
    one_block = softmax.bind(x).to_triton_code(tessera.Config(block_sizes=[2], reduction_loops=[None]))
    assert "chunk_" not in one_block and "tl.arange(0, 128)" in one_block


def test_no_row_mask_when_the_chunk_divides_a_static_row(device: torch.device) -> None:
    @tessera.kernel(static_shapes=True)
    def row_sums(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile, :].sum(dim=1)
        return out

    config = tessera.Config(block_sizes=[4], reduction_loops=[32])
    assert "mask_r0" not in row_sums.bind(torch.randn(4, 128, device=device)).to_triton_code(config)
    assert "mask_r0" in row_sums.bind(torch.randn(4, 130, device=device)).to_triton_code(config)
    x = torch.randn(6, 130, device=device)
    with settings.override(mode=_mode(device)):
        torch.testing.assert_close(row_sums.bind(x).run(config), x.sum(dim=1), atol=1e-4, rtol=1e-5)


def test_one_chunked_variant_serves_every_row_length(device: torch.device) -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[2], reduction_loops=[16]))
    def row_max(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile, :].amax(dim=1)
        return out

    for width in (1, 5, 16, 17, 100, 260):
        x = torch.randn(3, width, device=device) - 10  # all negative: padding lanes must not leak a 0
        torch.testing.assert_close(row_max(x), x.amax(dim=1))
    # no bucket per power of two: the loop bound is the length (size 1 is its own key, as everywhere)
    assert row_max.cache_info().variants == 2


def test_integer_rows_use_the_dtype_identity_and_int64_sums(device: torch.device) -> None:
    @tessera.kernel
    def stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = x.size(0)
        high = torch.empty([m], dtype=x.dtype, device=x.device)
        low = torch.empty([m], dtype=x.dtype, device=x.device)
        total = torch.empty([m], dtype=torch.int64, device=x.device)
        for tile in hl.tile(m):
            row = x[tile, :]
            high[tile] = row.amax(dim=1)
            low[tile] = row.amin(dim=1)
            total[tile] = row.sum(dim=1)
        return high, low, total

    x = torch.randint(-2**30, -2**29, (4, 37), dtype=torch.int32, device=device)  # all negative, big
    x[1] = torch.randint(2**29, 2**30, (37,), dtype=torch.int32)  # all positive
    for loops in ([None], [16]):
        high, low, total = _run(stats, (x,), tessera.Config(block_sizes=[2], reduction_loops=loops), device)
        assert torch.equal(high, x.amax(dim=1)) and torch.equal(low, x.amin(dim=1))
        assert torch.equal(total, x.sum(dim=1, dtype=torch.int64))


def test_a_row_too_long_for_one_block_is_looped_without_a_config(device: torch.device) -> None:
    x = torch.randn(1, ONE_BLOCK_ROW_LIMIT + 3, device=device)
    code = softmax.bind(x).to_triton_code(tessera.Config(block_sizes=[1]))
    assert "for chunk_r0 in tl.range" in code
    with settings.override(mode=_mode(device)):
        out = softmax.bind(x).run(tessera.Config(block_sizes=[1]))
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


def test_in_place_update_in_the_last_pass_is_allowed(device: torch.device) -> None:
    @tessera.kernel
    def normalize_in_place(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            row = x[tile, :]
            x[tile, :] = row / row.sum(dim=1, keepdim=True)
        return x

    x = torch.rand(3, 50, device=device) + 0.5
    expected = x / x.sum(dim=1, keepdim=True)
    _close(_run(normalize_in_place, (x.clone(),), tessera.Config(block_sizes=[1], reduction_loops=[16]), device),
           expected, torch.float32)


def test_a_load_after_an_earlier_pass_stored_is_refused(device: torch.device) -> None:
    @tessera.kernel
    def store_then_reduce(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            row = x[tile, :]
            out[tile, :] = row - row.amax(dim=1, keepdim=True)  # pass 1 writes out
            x[tile, :] = out[tile, :] * 2  # ...which a one-block body reads back at once
        return x

    with pytest.raises(ConfigError, match=r"reduction_loops\[0\].*line \d+"):
        store_then_reduce.bind(torch.randn(2, 40, device=device), torch.empty(2, 40, device=device)).to_triton_code(
            tessera.Config(block_sizes=[1], reduction_loops=[16]))


@tessera.kernel
def row_argmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].argmax(dim=1)
    return out


def test_a_row_argmax_cannot_be_chunked_and_the_error_names_the_line(device: torch.device) -> None:
    x = torch.randn(3, 40, device=device)
    with pytest.raises(ConfigError, match=r"argmax reduction of the row cannot be computed in chunks") as info:
        row_argmax.bind(x).to_triton_code(tessera.Config(block_sizes=[1], reduction_loops=[16]))
    assert "x[tile, :].argmax(dim=1)" in str(info.value)
    assert row_argmax.bind(x).plan(tessera.Config(block_sizes=[1])).reduction_extents == (0,)


def test_plans_report_the_loopable_row_and_the_space_offers_chunks(device: torch.device) -> None:
    from tessera.runtime.tuning import config_space_for
    plan = softmax.bind(torch.randn(4, 1000, device=device)).plan(tessera.Config(block_sizes=[2]))
    assert plan.reduction_extents == (1000,)
    axis = config_space_for(plan).axis("reduction_loops[0]")
    assert axis.choices[-1] is None and axis.choices[-2] == 512 and 1024 not in axis.choices


def test_a_long_row_that_cannot_be_chunked_stays_one_block_without_a_config(device: torch.device) -> None:
    x = torch.randn(1, ONE_BLOCK_ROW_LIMIT + 5, device=device)
    assert "chunk_" not in row_argmax.bind(x).to_triton_code(tessera.Config(block_sizes=[1]))
    with settings.override(mode=_mode(device)):
        assert torch.equal(row_argmax.bind(x).run(tessera.Config(block_sizes=[1])), x.argmax(dim=1))


@tessera.kernel
def _log_sum_exp(x: torch.Tensor) -> torch.Tensor:
    compute = torch.promote_types(x.dtype, torch.float32)
    out = torch.empty([x.size(0)], dtype=compute, device=x.device)
    for tile in hl.tile(x.size(0)):
        rows = x[tile, :].to(compute)
        row_max = torch.amax(rows, dim=1)
        out[tile] = row_max + torch.log(torch.sum(torch.exp(rows - row_max[:, None]), dim=1))
    return out


@pytest.mark.parametrize("chunk", [16, 64, None])
def test_online_sum_of_exp_matches_torch_on_inf_and_nan_rows(device: torch.device, chunk: int | None) -> None:
    inf, nan = float("inf"), float("nan")
    x = torch.randn(8, 150, device=device) * 5
    x[1, :] = -inf              # every lane -inf: torch's exp(-inf - -inf) is NaN
    x[2, 7] = inf               # one +inf: exp(inf - inf) is NaN
    x[3, 100] = nan
    x[4, :140] = -inf           # lanes that see -inf before any finite value
    x[5, 0], x[5, 149] = inf, inf
    x[6, 149] = 50.0            # the max in the tail chunk: earlier sums rescaled
    expected = x.amax(dim=1) + torch.log(torch.exp(x - x.amax(dim=1, keepdim=True)).sum(dim=1))
    actual = _run(_log_sum_exp, (x,), tessera.Config(block_sizes=[2], reduction_loops=[chunk]), device)
    torch.testing.assert_close(actual, expected, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_online_sum_rescales_as_the_row_max_grows_and_shrinks(device: torch.device, dtype: torch.dtype) -> None:
    """Each chunk's max over the row rescales the sums of the chunks before it: rows whose max
    grows in every chunk (earlier terms underflow to zero), whose max is in the first chunk,
    whose tail chunk holds one lane, and of width 1."""
    ramp = torch.arange(301, device=device, dtype=dtype)
    x = torch.stack([ramp * 0.5, -ramp * 0.5, ramp * 40.0, torch.sin(ramp) * 3, ramp * 0 + 7.0])
    for rows in (x, x[:, :1], x[:, :257]):
        expected = torch.logsumexp(rows, dim=1)
        for chunk in (16, 64):
            actual = _run(_log_sum_exp, (rows,), tessera.Config(block_sizes=[2], reduction_loops=[chunk]), device)
            torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
        with settings.override(mode="eager"):
            torch.testing.assert_close(_log_sum_exp(rows), expected, atol=1e-5, rtol=1e-5)


def test_compiled_online_sums_take_one_chunk_max_and_one_flushing_exp_per_element() -> None:
    """Compiled (GPU) code of a float32 online sum: per chunk one max over the row and, per
    element, one exp (libdevice's fast_expf, flushing results below 2**-126 that cannot change a
    sum holding a term of 1); float64 keeps tl.exp. The per-lane running max it replaces cost 22
    instructions an element on the H100 and left cross-entropy issue-bound (results/issue17)."""
    from tessera.backends.base import LoweringOptions
    from tessera.backends.triton.backend import TritonBackend

    def loop_body(x: torch.Tensor) -> str:
        config = tessera.Config(block_sizes=[2], reduction_loops=[64])
        ir = _log_sum_exp.bind(x).to_ir(config)
        source = TritonBackend().lower(ir, config, LoweringOptions(interpret=False)).source
        body = source.split("for chunk_r0 in tl.range(")[1]
        return body[:body.index("\n    v")]  # up to the first statement after the loop

    body = loop_body(torch.randn(3, 100))
    assert body.count("fast_expf(") == 1 and "tl.exp(" in body  # the per-row rescale keeps tl.exp
    assert body.count("tl.reduce(") == 1 and "tl.minimum" not in body
    body64 = loop_body(torch.randn(3, 100, dtype=torch.float64))
    assert "fast_expf" not in body64 and body64.count("tl.exp(") == 2


def test_compiled_cross_entropy_compiles_for_the_h100() -> None:
    """The compiled-mode online pass (libdevice's fast_expf, a per-chunk max) is valid Triton:
    compiled for sm_90 with Triton's own ptxas, on the CPU."""
    from sm90_compile import H100_SHARED_MEMORY, sm90_shared_memory
    logits, labels = torch.randn(8, 5000), torch.randint(0, 5000, (8,))
    config = tessera.Config(block_sizes=[1], reduction_loops=[4096], num_warps=8, num_stages=3)
    (shared,) = sm90_shared_memory(cross_entropy_losses, (logits, labels), config)
    assert 0 < shared <= H100_SHARED_MEMORY


def test_online_sum_needs_exactly_exp_of_the_difference_to_the_max(device: torch.device) -> None:
    @tessera.kernel
    def scaled(x: torch.Tensor) -> torch.Tensor:  # exp(2 * (x - m)): not the folded form
        out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
        for tile in hl.tile(x.size(0)):
            rows = x[tile, :]
            row_max = torch.amax(rows, dim=1)
            out[tile] = torch.sum(torch.exp(2 * (rows - row_max[:, None])), dim=1)
        return out

    x = torch.randn(3, 100, device=device)
    config = tessera.Config(block_sizes=[2], reduction_loops=[32])
    assert "online" not in str(scaled.bind(x).to_ir(config))
    _close(_run(scaled, (x,), config, device), torch.exp(2 * (x - x.amax(1, keepdim=True))).sum(1), torch.float32)
