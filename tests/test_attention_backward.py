"""examples/attention.py's backward: `attention_bwd` (dq, dk, dv) behind `@attention.backward`.

Gradients are checked against PyTorch's autograd through float64 `scaled_dot_product_attention`,
in eager and interpret modes, at sizes of one, tails, more keys than queries and the reverse,
causal and not; explicit small blocks put several blocks on and off the causal diagonal.
"""
from __future__ import annotations

import math

import pytest
import torch

import tessera
from examples import attention as attention_example
from tessera import settings

SHAPES = [  # (batch, heads, m, n, head_dim)
    (1, 1, 1, 1, 8),
    (2, 3, 7, 13, 16),
    (1, 2, 37, 37, 32),
    (1, 2, 13, 40, 16),
    (1, 1, 40, 13, 16),
]


def _inputs(batch: int, heads: int, m: int, n: int, head_dim: int,
            dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(m * 100 + n)
    shapes = ((batch, heads, m, head_dim), (batch, heads, n, head_dim), (batch, heads, n, head_dim),
              (batch, heads, m, head_dim))
    return tuple(torch.randn(*shape, generator=generator).to(dtype) for shape in shapes)


def _torch_gradients(q, k, v, grad_out, causal):
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    return (out, *torch.autograd.grad(out, leaves, grad_out.double()))


def _tessera_gradients(q, k, v, grad_out, causal, function=attention_example.attention_trainable):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = function(*leaves, causal)
    return (out, *torch.autograd.grad(out, leaves, grad_out))


def _assert_close(actual, expected, atol=2e-5, rtol=2e-5):
    for name, got, want in zip(("out", "dq", "dk", "dv"), actual, expected):
        torch.testing.assert_close(got.double(), want, atol=atol, rtol=rtol, msg=lambda text, n=name: f"{n}: {text}")


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_gradients_match_torch(mode, causal, shape):
    q, k, v, grad_out = _inputs(*shape)
    with settings.override(mode=mode):
        actual = _tessera_gradients(q, k, v, grad_out, causal)
    _assert_close(actual, _torch_gradients(q, k, v, grad_out, causal))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("blocks", [[16, 8, 16, 8, 16], [8, 16, 8, 16, 8]], ids=["bm8-bn8", "bm16-bn16"])
def test_gradients_with_several_blocks_on_and_off_the_diagonal(causal, blocks):
    q, k, v, grad_out = _inputs(1, 2, 37, 37, 16)
    backward = tessera.kernel(attention_example.attention_bwd.fn, config=tessera.Config(block_sizes=blocks),
                              mode="interpret")
    forward_out, lse = attention_example.attention(q, k, v, causal, True)
    dq, dk, dv = backward(grad_out, q, k, v, forward_out, lse, causal)
    _assert_close((forward_out, dq, dk, dv), _torch_gradients(q, k, v, grad_out, causal))


def test_bfloat16_gradients_match_torch():
    q, k, v, grad_out = _inputs(1, 2, 33, 33, 32, torch.bfloat16)
    with settings.override(mode="interpret"):
        actual = _tessera_gradients(q, k, v, grad_out, True)
    assert all(t.dtype == torch.bfloat16 for t in actual)
    _assert_close(actual, _torch_gradients(q, k, v, grad_out, True), atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_plain_attention_call_gets_gradients_by_recomputing_the_log_sum_exp(mode):
    q, k, v, grad_out = _inputs(1, 1, 9, 11, 8)
    with settings.override(mode=mode):
        actual = _tessera_gradients(q, k, v, grad_out, False, attention_example.attention)
    _assert_close(actual, _torch_gradients(q, k, v, grad_out, False))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_log_sum_exp_is_base_two(causal):
    q, k, v, _ = _inputs(2, 1, 13, 13, 16)
    out, lse = attention_example.attention(q, k, v, causal, True)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(16)
    if causal:
        scores = scores.masked_fill(torch.ones(13, 13, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.logsumexp(scores, dim=-1).reshape(2, 13) / math.log(2)
    torch.testing.assert_close(lse, expected, atol=1e-5, rtol=1e-5)
    assert out.shape == q.shape


def _backward_bound():
    q, k, v, grad_out = _inputs(1, 2, 256, 256, 64, torch.bfloat16)
    out, lse = attention_example.attention(q, k, v, False, True)
    return attention_example.attention_bwd.bind(grad_out, q, k, v, out, lse, False)


def test_each_launch_of_the_backward_gets_its_own_heuristic_blocks():
    from tessera.runtime.tuning import heuristic_for
    config = heuristic_for(_backward_bound())
    # [delta's rows, dk/dv's query block, its key tile, dq's key block, its query tile]: the dot
    # launches get dot tiles (head dim 64: 32 queries a step, see below), the row reduction
    # whole rows (not the dot kernels' block of 1)
    assert config["block_sizes"][1:] == [32, 128, 64, 128]
    assert config["block_sizes"][0] >= 16


def test_the_backward_search_space_counts_each_launchs_tile_alone():
    # the three launches' tiles are never held at once: their product (2M elements) is no limit
    from tessera import backends
    from tessera.runtime.tuning import config_space_for
    space = config_space_for(_backward_bound().plan(tessera.Config()))
    heuristic = backends.get("triton").heuristic_config(space)
    launch_blocks = [heuristic["block_sizes"][i] for i in (0, 2, 4)]
    assert launch_blocks[0] * launch_blocks[1] * launch_blocks[2] > space.max_tile_elements
    assert space.fits_registers(heuristic)


@pytest.mark.parametrize(("head_dim", "rows"), [(128, 256), (64, 128)])
def test_the_forward_holds_256_query_rows_when_it_accumulates_a_row_of_128(head_dim, rows):
    from tessera.runtime.tuning import heuristic_for
    q, k, v, _ = attention_example.make_inputs(2, 32, 4096, 4096, head_dim, dtype=torch.bfloat16, device="cpu")
    assert heuristic_for(attention_example.attention.bind(q, k, v, False))["block_sizes"][1] == rows


def test_the_backward_widens_neither_dot_launch():
    from tessera.runtime.tuning import heuristic_for
    q, k, v, grad_out = (torch.empty(2, 32, 4096, 128, dtype=torch.bfloat16) for _ in range(4))
    lse = torch.empty(64, 4096)
    config = heuristic_for(attention_example.attention_bwd.bind(grad_out, q, k, v, q, lse, False))
    # dk and dv are two accumulated rows (their registers would spill at 256 keys); dq is one, but
    # its loop holds two score tiles (scores and dP) beside it: 256 rows spilled on sm_90
    assert config["block_sizes"][2] == 128 and config["block_sizes"][4] == 128


def test_score_tiles_count_the_products_from_zero_over_a_loops_tile():
    from tessera.compiler import loop_score_tiles
    q, k, v, grad_out = _inputs(1, 2, 256, 256, 64, torch.bfloat16)
    out, lse = attention_example.attention(q, k, v, False, True)
    forward = attention_example.attention.bind(q, k, v, False).to_ir()
    delta, key_blocks, query_blocks = _backward_bound().to_ir()
    # forward: the scores (p @ v accumulates); dk/dv and dq loops: scores and dP
    assert [loop_score_tiles(ir) for ir in (forward, delta, key_blocks, query_blocks)] == [1, 0, 2, 2]


@pytest.mark.parametrize(("kernel", "grouping"), [("forward", 8), ("backward", 1)])
def test_only_the_backward_is_not_l2_grouped_with_its_batch_dim(kernel, grouping):
    # each launch tiles one dim besides its batch-head index, so grouping pairs the two; measured
    # on the H100, the backward (two score tiles a step) ran faster without, the forward slower
    from tessera.runtime.tuning import heuristic_for
    q, k, v, grad_out = (torch.empty(2, 32, 4096, 128, dtype=torch.bfloat16) for _ in range(4))
    bound = (attention_example.attention.bind(q, k, v, False) if kernel == "forward" else
             attention_example.attention_bwd.bind(grad_out, q, k, v, q, torch.empty(64, 4096), False))
    config = heuristic_for(bound)
    assert config["l2_grouping"] == grouping
    assert all(order == [1, 0] for order in config["loop_orders"])  # the batch-head index slowest


@pytest.mark.parametrize(("head_dim", "query_block"), [(64, 32), (128, 64)])
def test_the_key_block_launch_steps_32_queries_when_two_programs_then_share_an_sm(head_dim, query_block):
    # dk, dv of 128 keys x 64 are 64 fp32 registers a thread: with 32 queries a step the launch
    # fits two programs per SM (127 registers on sm_90); at 128 they alone take 128 registers
    from tessera.runtime.tuning import heuristic_for
    q, k, v, grad_out = (torch.empty(2, 32, 4096, head_dim, dtype=torch.bfloat16) for _ in range(4))
    config = heuristic_for(attention_example.attention_bwd.bind(grad_out, q, k, v, q, torch.empty(64, 4096), False))
    assert config["block_sizes"][1:3] == [query_block, 128]
