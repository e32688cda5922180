"""Regressions found by running Helion's examples (jagged_dense_add .. xsa) on Tessera: each kernel
in eager and interpret modes against PyTorch, at sizes with 1, non-powers-of-two and tails."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import settings

CPU_MODES = ("eager", "interpret")


@tessera.kernel
def _max_and_optional_sum(x: torch.Tensor, with_sum: bool) -> torch.Tensor:
    out = torch.zeros([x.size(0)], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        acc = hl.full([tile_m], float("-inf"), dtype=torch.float32)
        if with_sum:
            total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(x.size(1)):
            acc = torch.maximum(acc, x[tile_m, tile_n].amax(dim=1))
            if with_sum:
                total += x[tile_m, tile_n].sum(dim=1)
        if with_sum:
            acc = acc + total
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("shape", [(1, 1), (37, 50), (5, 129)])
@pytest.mark.parametrize("with_sum", [False, True])
def test_inner_loop_carries_a_name_bound_only_under_a_false_host_if(mode: str, shape: tuple, with_sum: bool) -> None:
    # Helion's layer_norm backward: `if compute_bias_grad: grad_b_acc = ...` before an inner loop that
    # updates it under the same condition; with the condition False the name is unbound at the loop
    x = torch.randn(*shape)
    expected = x.amax(dim=1) + (x.sum(dim=1) if with_sum else 0)
    with settings.override(mode=mode):
        torch.testing.assert_close(_max_and_optional_sum(x, with_sum), expected, atol=1e-4, rtol=1e-5)


@tessera.kernel
def _unbound_after_loop(x: torch.Tensor, with_sum: bool) -> torch.Tensor:
    out = torch.zeros([x.size(0)], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        if with_sum:
            total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(x.size(1)):
            if with_sum:
                total += x[tile_m, tile_n].sum(dim=1)
        out[tile_m] = total
    return out


@pytest.mark.parametrize("mode", CPU_MODES)
def test_a_name_left_unbound_by_the_loop_stays_unbound_after_it(mode: str) -> None:
    x = torch.randn(9, 20)
    with settings.override(mode=mode):
        torch.testing.assert_close(_unbound_after_loop(x, True), x.sum(dim=1), atol=1e-4, rtol=1e-5)
        with pytest.raises((UnboundLocalError, NameError, tessera.exc.TesseraError)):
            _unbound_after_loop(x, False)


@tessera.kernel
def _row_stats(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0), x.size(1), 3], dtype=torch.float32, device=x.device)
    for tile_b, tile_m in hl.tile([x.size(0), x.size(1)]):
        rows = x[tile_b, tile_m, :].to(torch.float32)
        out[tile_b, tile_m, 0] = rows.sum(dim=-1)
        out[tile_b, tile_m, 1] = rows.amax(dim=-1)
        out[tile_b, tile_m, 2] = rows.amin(dim=-1)
    return out


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 37, 50), (2, 5, 129)])
def test_interpreted_code_calls_no_library_function_per_program(shape: tuple) -> None:
    # Triton's interpreter runs each call of a library @jit function (tl.cdiv, tl.sum, tl.max) by
    # re-patching the language, ~10 ms per call per program: interpreted code writes them out
    x = torch.randn(*shape)
    x[0, 0, 0] = float("nan") if shape[2] > 1 else x[0, 0, 0]
    config = tessera.Config(block_sizes=[2, 16])
    bound = _row_stats.bind(x)
    code = bound.to_triton_code(config)
    assert "tl.cdiv(" not in code and "tl.sum(" not in code and "tl.max(" not in code and "tl.min(" not in code
    expected = torch.stack([x.sum(-1), x.amax(-1), x.amin(-1)], dim=-1)
    with settings.override(mode="interpret"):
        torch.testing.assert_close(bound.run(config), expected, atol=1e-4, rtol=1e-5, equal_nan=True)


def test_interpreted_launch_leaves_the_interpreters_overflow_checks_as_they_were() -> None:
    x = torch.randn(3, 5, 7)
    with settings.override(mode="interpret"):
        _row_stats(x)
    from triton.runtime import interpreter
    assert interpreter.interpreter_builder.options.sanitize_overflow


@tessera.kernel
def _blocked_row_sums(x: torch.Tensor) -> torch.Tensor:
    # Helion's kl_div / long_sum shape: register_block_size blocks for both dims, an accumulator
    # as wide as the inner block, summed after the loop
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    block_n = hl.register_block_size(n)
    block_m = hl.register_block_size(m)
    for tile_m in hl.tile(m, block_size=block_m):
        acc = hl.zeros([tile_m, block_n], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=block_n):
            acc += x[tile_m, tile_n].to(torch.float32)
        out[tile_m] = acc.sum(dim=-1)
    return out


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("shape", [(1, 1), (37, 300), (130, 1000)])
def test_blocked_row_sums(mode: str, shape: tuple) -> None:
    x = torch.randn(*shape)
    with settings.override(mode=mode):
        torch.testing.assert_close(_blocked_row_sums(x), x.sum(dim=1), atol=1e-3, rtol=1e-5)


def test_interpret_mode_runs_wider_blocks_than_the_gpu_heuristic() -> None:
    # the interpreter's cost is per op, not per element: 16-wide blocks over 4096 columns ran
    # 256 iterations per program where 128-wide ones run 32 (Helion's kl_div: 165 s -> 7 s)
    from tessera.runtime.tuning import heuristic_for
    bound = _blocked_row_sums.bind(torch.randn(256, 4096))
    gpu, interpreted = heuristic_for(bound)["block_sizes"], heuristic_for(bound, interpreted=True)["block_sizes"]
    assert all(wide >= narrow for wide, narrow in zip(interpreted, gpu)) and interpreted != gpu
    # widened up to 128 per dim and INTERPRETER_ELEMENTS a tile, never narrower than the GPU's
    # blocks (a row kernel's GPU chunk, 4096 here, is already wider)
    from tessera.backends.triton.heuristics import INTERPRETER_BLOCK, INTERPRETER_ELEMENTS
    assert all(wide <= max(INTERPRETER_BLOCK, narrow) for wide, narrow in zip(interpreted, gpu))
    assert interpreted[0] * interpreted[1] <= max(INTERPRETER_ELEMENTS, gpu[0] * gpu[1])
