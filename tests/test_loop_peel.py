"""Two passes for reductions in device loops: the masked last tile peeled off (ir/loop_peel.py), and
a row max taken before a scalar scale (ir/scale_fold.py).

Each kernel runs in eager and interpret modes against PyTorch at sizes that divide the block, do
not, are smaller than one block, and are 1; the generated code is checked for what the passes are for.
"""
from __future__ import annotations

import math

import pytest
import torch

import tessera
import tessera.language as hl
from examples import attention as attention_example
from tessera.ir.graph import Op

MODES = ("eager", "interpret")


def _row_logsumexp(block: int, mode: str) -> tessera.Kernel:
    """A row's log-sum-exp of `x * scale` over key tiles: an online max and sum carried by the loop."""
    @tessera.kernel(config=tessera.Config(block_sizes=[4, block]), mode=mode)
    def row_logsumexp(x: torch.Tensor, scale: float) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty([m], dtype=torch.float32, device=x.device)
        for tile_m in hl.tile(m):
            top = hl.full([tile_m], float("-inf"), dtype=torch.float32)
            total = hl.zeros([tile_m], dtype=torch.float32)
            for tile_n in hl.tile(n):
                scaled = x[tile_m, tile_n] * scale
                new_top = torch.maximum(top, torch.amax(scaled, dim=-1))
                total = total * torch.exp(top - new_top) + torch.exp(scaled - new_top[:, None]).sum(-1)
                top = new_top
            out[tile_m] = top + torch.log(total)
        return out
    return row_logsumexp


def _reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.logsumexp(x * scale, dim=-1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [1, 7, 16, 37, 64, 100])
@pytest.mark.parametrize("scale", [0.7, -1.3])
def test_a_row_reduction_over_key_tiles_matches_torch(mode: str, n: int, scale: float) -> None:
    x = torch.randn(6, n)
    torch.testing.assert_close(_row_logsumexp(16, mode)(x, scale), _reference(x, scale))


def test_the_whole_tiles_loop_has_no_mask_and_the_tail_loop_has_one() -> None:
    code = _row_logsumexp(16, "interpret").bind(torch.randn(6, 100), 0.5).to_triton_code()
    whole, tail = code.split("_tail = ", 1)
    assert "16*((tl.maximum(0, n)) // (16)), 16):" in whole            # whole tiles only
    assert "mask_t1" not in whole                                      # no mask of the key tile there
    assert "num_stages=1" in tail and "tl.where(mask_t1_tail" in tail  # the last tile is masked


def test_a_loop_over_a_multiple_of_its_block_is_not_peeled() -> None:
    code = _row_logsumexp(16, "interpret").bind(torch.randn(6, 64), 0.5).to_triton_code()
    assert "_tail" in code  # n is a dynamic size: whole tiles plus a (here empty) last tile
    static = tessera.kernel(_row_logsumexp(16, "interpret").fn, config=tessera.Config(block_sizes=[4, 16]),
                            mode="interpret", static_shapes=True)
    assert "_tail" not in static.bind(torch.randn(6, 64), 0.5).to_triton_code()  # 64 is known to divide


def test_a_loop_without_a_reduction_over_its_tile_is_not_peeled() -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16, 16, 16]), mode="interpret")
    def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), y.size(1)], dtype=torch.float32, device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(x.size(1)):
                acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    x, y = torch.randn(20, 37), torch.randn(37, 18)
    assert "_tail" not in matmul.bind(x, y).to_triton_code()
    torch.testing.assert_close(matmul(x, y), x @ y)


def test_the_max_is_taken_before_a_positive_scale_and_the_sign_is_guarded() -> None:
    kernel = _row_logsumexp(16, "interpret")
    ir = kernel.bind(torch.randn(6, 100), 0.5).to_ir()
    reductions = [node for node in ir.nodes() if node.op is Op.REDUCE and node.params["fn"] in ("amax", "amin")]
    assert reductions and all(node.inputs[0].op is Op.LOAD for node in reductions)  # x, not x * scale
    assert any("scale > 0" in reason for _, reason in ir.guards)
    negative = kernel.bind(torch.randn(6, 100), -0.5).to_ir()
    assert {node.params["fn"] for node in negative.nodes() if node.op is Op.REDUCE} >= {"amin"}
    assert any("scale < 0" in reason for _, reason in negative.guards)


@pytest.mark.parametrize("first, second", [(0.5, -2.0), (-2.0, 0.5), (0.5, 0.0), (0.0, 0.5), (0.5, math.inf)])
def test_a_call_with_a_scale_of_another_sign_gets_its_own_variant(first: float, second: float) -> None:
    kernel, eager = _row_logsumexp(16, "interpret"), _row_logsumexp(16, "eager")
    x = torch.randn(6, 40)
    for scale in (first, second, first):  # eager mode is the specification (inf scales give NaN rows there too)
        torch.testing.assert_close(kernel(x, scale), eager(x, scale), equal_nan=True)


def test_the_max_of_infinite_and_nan_scores_matches_eager_mode() -> None:
    x = torch.randn(6, 40)
    x[0, 3], x[1, 30], x[2, :] = float("inf"), float("nan"), float("-inf")
    torch.testing.assert_close(_row_logsumexp(16, "interpret")(x, 0.5), _row_logsumexp(16, "eager")(x, 0.5),
                               equal_nan=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("m, n", [(100, 77), (77, 100), (64, 64), (1, 5)])
def test_attention_with_peeled_key_loops_matches_sdpa(m: int, n: int, causal: bool) -> None:
    if causal and m > n:
        pytest.skip("SDPA's causal mask is aligned top-left; the example's differs for m > n")
    kernel = tessera.kernel(attention_example.attention.fn, config=tessera.Config(block_sizes=[16, 32]),
                            mode="interpret")
    q = torch.randn(1, 2, m, 32)
    k, v = torch.randn(1, 2, n, 32), torch.randn(1, 2, n, 32)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(kernel(q, k, v, causal), expected, atol=2e-5, rtol=2e-5)


def test_the_attention_backward_loops_are_peeled_and_match_torch() -> None:
    # its dk/dv and dq loops recompute the scores over each tile and sum products over it
    q, k, v = (torch.randn(1, 2, 37, 16) for _ in range(3))
    grad_out = torch.randn_like(q)
    out, lse = attention_example.attention(q, k, v, False, True)
    code = attention_example.attention_bwd.bind(grad_out, q, k, v, out, lse, False).to_triton_code(
        tessera.Config(block_sizes=[16, 16, 16, 16, 16]))
    launches = code.split("# ---- launch ")
    assert len(launches) == 4 and all("_tail = " in launch for launch in launches[2:])
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(*leaves), leaves, grad_out)
    backward = tessera.kernel(attention_example.attention_bwd.fn, config=tessera.Config(block_sizes=[16] * 5),
                              mode="interpret")
    for got, want in zip(backward(grad_out, q, k, v, out, lse, False), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
