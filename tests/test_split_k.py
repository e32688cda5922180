"""split_k: a GEMM's K loop split over S programs per output tile (ir/split_reduction.py).

Pins which launches may be split (a K loop summing products into zeros, elementwise code after
it; never an accumulator read elsewhere, a store in the loop, an atomic or a data-dependent K),
that every split computes what eager mode and PyTorch compute (size 1, non-powers of two, K tails,
K shorter than S blocks: empty slices), that the sum is deterministic, and what the space and the
heuristic offer.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close
from examples.matmul import matmul
from tessera import exc, settings
from tessera.backends.config_space import KernelFacts
from tessera.backends.triton.heuristics import heuristic_config
from tessera.backends.triton.space import config_space
from tessera.ir.split_reduction import split_reduction
from tessera.ir.tunables import TunableDim


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _inputs(m: int, n: int, k: int, device: torch.device, dtype: torch.dtype = torch.float32) -> tuple:
    generator = torch.Generator().manual_seed(m * 1000003 + n * 1009 + k)
    x = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
    y = torch.randn(k, n, generator=generator).to(device=device, dtype=dtype)
    bias = torch.randn(n, generator=generator).to(device=device, dtype=dtype)
    return x, y, bias


@pytest.mark.parametrize("m, n, k, blocks, splits", [
    (1, 1, 1, [16, 16, 16], 2),        # size 1 everywhere: one K step, the other slice empty
    (37, 45, 300, [16, 16, 32], 4),    # non-powers of two, a K tail
    (5, 3, 40, [16, 16, 16], 8),       # K of 3 steps over 8 slices: 5 empty slices
    (64, 48, 1000, [32, 16, 64], 3),   # S not a power of two, uneven slices
    (16, 16, 16, [16, 16, 16], 1),     # split_k=1: the plain kernel
])
def test_split_k_matches_pytorch_and_eager(m: int, n: int, k: int, blocks: list[int], splits: int,
                                           device: torch.device) -> None:
    x, y, bias = _inputs(m, n, k, device)
    config = tessera.Config(block_sizes=blocks, split_k=splits)
    split = tessera.kernel(matmul.fn, mode=_mode(device), config=config, dot_precision="ieee")
    out = split(x, y, bias, activation=torch.relu)
    expected = torch.relu(x.double() @ y.double() + bias.double()).float()
    assert_close(out, expected, (1e-4, 1e-4), "split_k matmul")
    with settings.override(mode="eager"):
        eager = tessera.kernel(matmul.fn, config=config, dot_precision="ieee")(x, y, bias, activation=torch.relu)
    assert_close(out, eager, (1e-4, 1e-4), "split_k matmul vs eager")


def test_split_k_in_bfloat16_rounds_once_on_store(device: torch.device) -> None:
    x, y, _ = _inputs(16, 40, 200, device, torch.bfloat16)
    split = tessera.kernel(matmul.fn, mode=_mode(device), config=tessera.Config(block_sizes=[16, 16, 32], split_k=4))
    out = split(x, y)
    assert out.dtype == torch.bfloat16
    assert_close(out, (x.float() @ y.float()).to(torch.bfloat16), (2e-2, 2e-2), "bf16 split_k matmul")


def test_split_k_is_deterministic_across_calls(device: torch.device) -> None:
    x, y, bias = _inputs(33, 70, 513, device)
    split = tessera.kernel(matmul.fn, mode=_mode(device), config=tessera.Config(block_sizes=[16, 32, 32], split_k=5))
    first = split(x, y, bias)
    for _ in range(3):  # the counters reset themselves: every call adds the same partials in the same order
        assert torch.equal(split(x, y, bias), first)


def test_split_k_code_slices_k_and_adds_the_partials_in_order(device: torch.device) -> None:
    x, y, _ = _inputs(16, 16, 256, device)
    bound = tessera.kernel(matmul.fn, mode=_mode(device)).bind(x, y)
    config = tessera.Config(block_sizes=[16, 16, 32], split_k=4)
    code = bound.to_triton_code(config)
    assert "split_per = " in code and "tl.atomic_add(split_counters" in code
    sums = [line.strip() for line in code.splitlines() if "tl.load(split_partials" in line]
    assert [f"+ {part * 256} +" in line for part, line in enumerate(sums)] == [True] * 4
    assert [launch.grid for launch in bound.plan(config).launches] == [(4,)]  # 1 tile x 4 slices
    assert [launch.grid for launch in bound.plan(config.merged(split_k=1)).launches] == [(1,)]


def test_split_k_is_ignored_under_a_persistent_pid_type(device: torch.device) -> None:
    x, y, bias = _inputs(40, 40, 100, device)
    config = tessera.Config(block_sizes=[16, 16, 16], split_k=4, pid_type="persistent_interleaved")
    kernel = tessera.kernel(matmul.fn, mode=_mode(device), config=config, dot_precision="ieee")
    assert "split_counters" not in kernel.bind(x, y, bias).to_triton_code(config)
    assert_close(kernel(x, y, bias), x @ y + bias, (1e-4, 1e-4), "persistent matmul")


def test_split_k_reuses_its_workspace_across_shapes(device: torch.device) -> None:
    """Calls of growing and shrinking grids in turn (on a GPU they share one kept workspace)."""
    split = tessera.kernel(matmul.fn, mode=_mode(device), config=tessera.Config(block_sizes=[16, 16, 32], split_k=3),
                           dot_precision="ieee")
    for m, n, k in ((8, 8, 100), (40, 70, 200), (8, 8, 100), (17, 33, 64)):
        x, y, bias = _inputs(m, n, k, device)
        assert_close(split(x, y, bias), (x.double() @ y.double() + bias.double()).float(), (1e-4, 1e-4), f"split_k {m}x{n}x{k}")


def test_split_k_replays_from_a_cuda_graph_and_runs_eagerly_after(device: torch.device) -> None:
    if device.type != "cuda":
        pytest.skip("CUDA graphs need a GPU")
    split = tessera.kernel(matmul.fn, config=tessera.Config(block_sizes=[16, 64, 64], split_k=4), dot_precision="ieee")
    x, y, bias = _inputs(16, 256, 1024, device)
    split(x, y, bias)  # compiled before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = split(x, y, bias)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, (x.double() @ y.double() + bias.double()).float(), (1e-4, 1e-4), "replayed split_k")
        assert_close(split(x, y, bias), out, (0, 0), "eager split_k after a replay")


def test_split_k_must_be_a_positive_int() -> None:
    with pytest.raises(exc.ConfigError, match="split_k"):
        tessera.Config(split_k=0)


# -- which launches may be split ---------------------------------------------------------------

def _splits(kernel: Callable[..., Any], *args: Any) -> bool:
    ir = tessera.kernel(kernel, mode="interpret").bind(*args).to_ir(tessera.Config(block_sizes=[16, 16, 16]))
    return split_reduction(ir) is not None


def test_a_plain_matmul_with_an_epilogue_may_be_split() -> None:
    x, y, bias = _inputs(8, 8, 32, torch.device("cpu"))
    assert _splits(matmul.fn, x, y, bias)


def test_an_accumulator_read_elsewhere_in_the_loop_is_not_split() -> None:
    def scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), y.size(1)], device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(x.size(1)):
                acc = torch.addmm(acc * 0.5, x[tile_m, tile_k], y[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    assert not _splits(scaled, *_inputs(8, 8, 32, torch.device("cpu"))[:2])


def test_a_store_inside_the_loop_is_not_split() -> None:
    def leaky(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.zeros([x.size(0), y.size(1)], device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(x.size(1)):
                acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
                out[tile_m, tile_n] = acc
        return out

    assert not _splits(leaky, *_inputs(8, 8, 32, torch.device("cpu"))[:2])


def test_an_atomic_epilogue_is_not_split() -> None:
    def accumulate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.zeros([x.size(0), y.size(1)], device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(x.size(1)):
                acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
            hl.atomic_add(out, [tile_m, tile_n], acc)
        return out

    assert not _splits(accumulate, *_inputs(8, 8, 32, torch.device("cpu"))[:2])


def test_an_accumulator_that_starts_from_a_value_is_not_split() -> None:
    def from_bias(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), y.size(1)], device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            acc = bias[tile_n][None, :].expand(tile_m, tile_n).to(torch.float32) + hl.zeros([tile_m, tile_n])
            for tile_k in hl.tile(x.size(1)):
                acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    assert not _splits(from_bias, *_inputs(8, 8, 32, torch.device("cpu")))


def test_a_data_dependent_k_is_not_split() -> None:
    def ragged(x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), y.size(1)], device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            k = hl.load(lengths, [0])
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    x, y, _ = _inputs(8, 8, 32, torch.device("cpu"))
    assert not _splits(ragged, x, y, torch.tensor([32], dtype=torch.int32))


# -- the space and the heuristic ----------------------------------------------------------------

def _gemm_facts(m: int, n: int, k: int, splittable: bool = True) -> KernelFacts:
    tunables = (TunableDim(0, m, 16, "launch"), TunableDim(1, n, 16, "launch"), TunableDim(2, k, 16, "loop"))
    return KernelFacts(tunables=tunables, launch_dims=(2,), dtypes=(torch.bfloat16,), uses_dot=True,
                       programs=-(-m // 64) * -(-n // 64), split_reduction=splittable)


def test_the_space_offers_split_k_only_where_it_applies() -> None:
    assert "split_k" in [axis.name for axis in config_space(_gemm_facts(16, 4096, 4096)).axes]
    assert "split_k" not in [axis.name for axis in config_space(_gemm_facts(16, 4096, 4096, False)).axes]


@pytest.mark.parametrize("m, n, k, split", [
    (1, 4096, 4096, True), (16, 4096, 14336, True),    # 64 narrow tiles, a deep K
    (128, 11008, 4096, False),                             # 128 x 128 tiles: splitting only lost there
    (4096, 4096, 4096, False), (16, 28672, 4096, False),  # a full grid
    (16, 4096, 128, False),                                # too shallow a K to slice
])
def test_the_heuristic_splits_k_for_small_grids_only(m: int, n: int, k: int, split: bool) -> None:
    assert (heuristic_config(config_space(_gemm_facts(m, n, k))).get("split_k", 1) > 1) == split


def test_a_call_plan_reports_a_splittable_launch() -> None:
    x, y, bias = _inputs(8, 8, 32, torch.device("cpu"))
    assert tessera.kernel(matmul.fn, mode="interpret").bind(x, y, bias).plan(tessera.Config()).split_reductions == (True,)
