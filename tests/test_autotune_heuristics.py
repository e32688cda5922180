"""The heuristic Config (what autotune_effort="none" runs and where every search starts): block
sizes, warps and chunking for typical kernels, within the tuner's register budget."""
from __future__ import annotations


import pytest
import torch

from tessera import backends
from tessera.backends.config_space import KernelFacts
from tessera.config import Config
from tessera.runtime import tuning
from tessera.ir.tunables import TunableDim

import autotune_fakes

TRITON = backends.get("triton")  # the space and the heuristics are the backend's

pytestmark = pytest.mark.usefixtures("private_cache")


def test_heuristic_for_a_large_bf16_add_gives_each_program_8_kb_per_tensor():
    facts = KernelFacts(tunables=(TunableDim(0, 8192, 1, "launch"), TunableDim(1, 8192, 1, "launch")),
                        launch_dims=(2,), dtypes=(torch.bfloat16,), largest_numel=8192 * 8192)
    config = TRITON.heuristic_config(TRITON.config_space(facts))
    assert config["block_sizes"] == [4, 1024] and config["num_warps"] == 8


def test_heuristic_for_softmax_rows_of_4096_takes_one_row_per_program_with_8_warps():
    config = TRITON.heuristic_config(TRITON.config_space(autotune_fakes.softmax_facts()))
    assert config["block_sizes"] == [1] and config["num_warps"] == 8


def test_heuristic_for_a_bf16_matmul_uses_128_by_256_tiles_and_a_64_deep_k_loop():
    config = TRITON.heuristic_config(TRITON.config_space(autotune_fakes.matmul_facts()))
    assert config["block_sizes"] == [128, 256, 64]  # a wave of 128 x 256 tiles (gemm_sweep: 4096^3 0.83x -> 0.98x)
    assert (config["num_warps"], config["num_stages"], config["l2_grouping"]) == (8, 3, 8)


def test_heuristic_blocks_never_exceed_a_small_extent_rounded_up_to_a_power_of_two():
    facts = KernelFacts(tunables=(TunableDim(0, 5, 1, "launch"), TunableDim(1, 3, 1, "launch")), launch_dims=(2,))
    assert TRITON.heuristic_config(TRITON.config_space(facts))["block_sizes"] == [8, 4]


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_attention_heuristic_fits_the_tuners_register_budget(head_dim):
    # the heuristic is the search's first seed; at D128 it holds 256 query rows (128 per thread)
    from examples.attention import attention
    q, k, v = (torch.empty(2, 32, 4096, head_dim, dtype=torch.bfloat16) for _ in range(3))
    bound = attention.bind(q, k, v, False)
    space = tuning.config_space_for(bound.plan(Config()))
    assert space.fits_device(tuning.heuristic_for(bound))
    matmul_space = TRITON.config_space(autotune_fakes.matmul_facts())
    assert matmul_space.fits_device(TRITON.heuristic_config(matmul_space))
