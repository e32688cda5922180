"""The tuning space the Triton backend offers a kernel: its axes, their ranges, validation of a
Config against it, and one-step neighbours."""
from __future__ import annotations


import pytest

from tessera import backends, exc
from tessera.backends.config_space import KernelFacts
from tessera.config import Config
from tessera.ir.tunables import TunableDim

import autotune_fakes

TRITON = backends.get("triton")  # the space and the heuristics are the backend's

pytestmark = pytest.mark.usefixtures("private_cache")


def test_block_sizes_range_over_powers_of_two_from_the_smallest_legal_block_to_the_extent():
    space = TRITON.config_space(KernelFacts(tunables=(TunableDim(0, 100, 16, "launch"),)))
    assert space.axis("block_sizes[0]").choices == (16, 32, 64, 128)


def test_loop_orders_and_l2_grouping_appear_only_for_multi_dim_tile_loops():
    two_dims = TRITON.config_space(autotune_fakes.matmul_facts())
    assert two_dims.axis("loop_orders[0]").choices == ([0, 1], [1, 0])
    assert "l2_grouping" in {axis.key for axis in two_dims.axes}
    one_dim = TRITON.config_space(autotune_fakes.softmax_facts())
    assert not {"loop_orders", "l2_grouping"} & {axis.key for axis in one_dim.axes}


def test_reduction_loops_offer_one_block_or_power_of_two_chunks():
    facts = KernelFacts(tunables=(), reduction_extents=(1000,))
    space = TRITON.config_space(facts, enabled={"reduction_loops"})
    assert space.axis("reduction_loops[0]").choices == (32, 64, 128, 256, 512, None)


def test_the_neighbour_of_one_block_is_the_largest_chunk_not_the_smallest():
    space = TRITON.config_space(KernelFacts(tunables=(), reduction_extents=(4096,)), enabled={"reduction_loops"})
    assert space.default()["reduction_loops"] == [None]
    assert [c["reduction_loops"] for c in space.neighbors(space.default())] == [[2048]]


def test_keys_the_backend_does_not_honour_stay_out_of_the_space():
    space = TRITON.config_space(autotune_fakes.matmul_facts(), enabled={"block_sizes", "num_warps"})
    assert {axis.key for axis in space.axes} == {"block_sizes", "num_warps"}


def test_validation_names_the_block_size_that_is_too_small_for_a_dot():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    with pytest.raises(exc.ConfigError, match=r"block_sizes\[2\]=8 .*smallest legal block is 16"):
        space.validate(Config(block_sizes=[64, 64, 8]))


def test_validation_names_a_wrong_number_of_block_sizes():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    with pytest.raises(exc.ConfigError, match="block_sizes has 2 entries, but this kernel has 3"):
        space.validate(Config(block_sizes=[64, 64]))


def test_validation_names_a_loop_order_for_a_loop_the_kernel_does_not_have():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    with pytest.raises(exc.ConfigError, match=r"loop_orders\[0\]=\[0, 1, 2\]"):
        space.validate(Config(loop_orders=[[0, 1, 2]]))


def test_config_rejects_malformed_values_of_the_new_keys_by_name():
    with pytest.raises(exc.ConfigError, match="l2_grouping=3"):
        Config(l2_grouping=3)
    with pytest.raises(exc.ConfigError, match=r"loop_orders\[0\]=\[0, 0\]"):
        Config(loop_orders=[[0, 0]])
    with pytest.raises(exc.ConfigError, match="pid_type='spiral'"):
        Config(pid_type="spiral")


def test_neighbours_move_one_axis_one_step():
    space = TRITON.config_space(autotune_fakes.softmax_facts(rows=64), enabled={"block_sizes", "num_warps"})
    center = Config(block_sizes=[4], num_warps=4)
    assert list(space.neighbors(center)) == [Config(block_sizes=[2], num_warps=4), Config(block_sizes=[8], num_warps=4),
                                             Config(block_sizes=[4], num_warps=2), Config(block_sizes=[4], num_warps=8)]
