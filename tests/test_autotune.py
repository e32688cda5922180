"""The autotuner: its space, heuristics, search, fault-proof pipeline, accuracy gate and disk cache.

Everything runs on the CPU: the pipeline in interpret mode with wall-clock timing, faults
injected by the worker setups in `autotune_fakes.py`. The worker processes themselves are
tested in `test_autotune_workers.py`.
"""
from __future__ import annotations

import functools
import json
import os
import random
import time
from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import backends, exc, settings
from tessera.autotune import bench_worker, compile_pool, disk_cache, host_finish, prewarm
from tessera.autotune import forking, pool
from tessera.autotune.bench_worker import BenchResult, BenchSession, BenchTask, BenchWorkerSpec, accuracy_error, bench_worker_setup
from tessera.autotune.compile_pool import CompileWorkerSpec
from tessera.autotune.pipeline import (CandidateRunner, TuneOptions, _Candidate, _eager_reference, decorator_line,
                                       reference_config, tune)
from tessera.autotune.search import SearchResult, Trial, search
from tessera.autotune.workers import Outcome
from tessera.backends.config_space import KernelFacts
from tessera.backends.triton import modules, worker_support
from tessera.config import Config
from tessera.runtime import tuning
from tessera.ir.tunables import TunableDim

import autotune_fakes
from examples.add import add
from examples.softmax import softmax


TRITON = backends.get("triton")  # the space and the heuristics are the backend's


@pytest.fixture
def interpreter_workers(device: torch.device) -> None:
    """Tuning CPU tensors runs candidates in Triton's interpreter in worker processes, which a
    GPU test process (Triton imported compiled) cannot start: a CPU-suite test."""
    if device.type == "cuda":
        pytest.skip("tunes in Triton's interpreter: the CPU suite covers it")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path):
    with settings.override(cache_dir=str(tmp_path / "cache")):
        yield


def matmul_facts() -> KernelFacts:
    return KernelFacts(tunables=(TunableDim(0, 4096, 16, "launch"), TunableDim(1, 4096, 16, "launch"),
                                 TunableDim(2, 4096, 16, "loop")),
                       launch_dims=(2,), dtypes=(torch.bfloat16,), uses_dot=True)


def softmax_facts(rows: int = 8192, width: int = 4096) -> KernelFacts:
    return KernelFacts(tunables=(TunableDim(0, rows, 1, "launch"),), launch_dims=(1,),
                       dtypes=(torch.bfloat16,), uses_reduction=True, largest_numel=rows * width)


# ---------------------------------------------------------------------------------------------
# The space
# ---------------------------------------------------------------------------------------------

def test_block_sizes_range_over_powers_of_two_from_the_smallest_legal_block_to_the_extent():
    space = TRITON.config_space(KernelFacts(tunables=(TunableDim(0, 100, 16, "launch"),)))
    assert space.axis("block_sizes[0]").choices == (16, 32, 64, 128)


def test_loop_orders_and_l2_grouping_appear_only_for_multi_dim_tile_loops():
    two_dims = TRITON.config_space(matmul_facts())
    assert two_dims.axis("loop_orders[0]").choices == ([0, 1], [1, 0])
    assert "l2_grouping" in {axis.key for axis in two_dims.axes}
    one_dim = TRITON.config_space(softmax_facts())
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
    space = TRITON.config_space(matmul_facts(), enabled={"block_sizes", "num_warps"})
    assert {axis.key for axis in space.axes} == {"block_sizes", "num_warps"}


def test_validation_names_the_block_size_that_is_too_small_for_a_dot():
    space = TRITON.config_space(matmul_facts())
    with pytest.raises(exc.ConfigError, match=r"block_sizes\[2\]=8 .*smallest legal block is 16"):
        space.validate(Config(block_sizes=[64, 64, 8]))


def test_validation_names_a_wrong_number_of_block_sizes():
    space = TRITON.config_space(matmul_facts())
    with pytest.raises(exc.ConfigError, match="block_sizes has 2 entries, but this kernel has 3"):
        space.validate(Config(block_sizes=[64, 64]))


def test_validation_names_a_loop_order_for_a_loop_the_kernel_does_not_have():
    space = TRITON.config_space(matmul_facts())
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
    space = TRITON.config_space(softmax_facts(rows=64), enabled={"block_sizes", "num_warps"})
    center = Config(block_sizes=[4], num_warps=4)
    assert list(space.neighbors(center)) == [Config(block_sizes=[2], num_warps=4), Config(block_sizes=[8], num_warps=4),
                                             Config(block_sizes=[4], num_warps=2), Config(block_sizes=[4], num_warps=8)]


# ---------------------------------------------------------------------------------------------
# Heuristics
# ---------------------------------------------------------------------------------------------

def test_heuristic_for_a_large_bf16_add_gives_each_program_8_kb_per_tensor():
    facts = KernelFacts(tunables=(TunableDim(0, 8192, 1, "launch"), TunableDim(1, 8192, 1, "launch")),
                        launch_dims=(2,), dtypes=(torch.bfloat16,), largest_numel=8192 * 8192)
    config = TRITON.heuristic_config(TRITON.config_space(facts))
    assert config["block_sizes"] == [4, 1024] and config["num_warps"] == 8


def test_heuristic_for_softmax_rows_of_4096_takes_one_row_per_program_with_8_warps():
    config = TRITON.heuristic_config(TRITON.config_space(softmax_facts()))
    assert config["block_sizes"] == [1] and config["num_warps"] == 8


def test_heuristic_for_a_bf16_matmul_uses_128_by_256_tiles_and_a_64_deep_k_loop():
    config = TRITON.heuristic_config(TRITON.config_space(matmul_facts()))
    assert config["block_sizes"] == [128, 256, 64]  # a wave of 128 x 256 tiles (gemm_sweep: 4096^3 0.83x -> 0.98x)
    assert (config["num_warps"], config["num_stages"], config["l2_grouping"]) == (8, 3, 8)


def test_heuristic_blocks_never_exceed_a_small_extent_rounded_up_to_a_power_of_two():
    facts = KernelFacts(tunables=(TunableDim(0, 5, 1, "launch"), TunableDim(1, 3, 1, "launch")), launch_dims=(2,))
    assert TRITON.heuristic_config(TRITON.config_space(facts))["block_sizes"] == [8, 4]


# ---------------------------------------------------------------------------------------------
# Search
# ---------------------------------------------------------------------------------------------

def _bowl(config: Config) -> float:
    """A cost with its minimum at block_sizes=[128, 64, 32], num_warps=4."""
    blocks = config["block_sizes"]
    return (1 + abs(blocks[0].bit_length() - 8) + abs(blocks[1].bit_length() - 7) + abs(blocks[2].bit_length() - 6)
            + abs(config["num_warps"].bit_length() - 3) + 0.1 * config["num_stages"])


def _run_search(effort: str, seed: int, budget: float = 1e9):
    space = TRITON.config_space(matmul_facts(), enabled={"block_sizes", "num_warps", "num_stages"})
    clock = iter(range(10 ** 6))
    return search(space, lambda configs, deadline: [_bowl(c) for c in configs], effort=effort,
                  seeds=[TRITON.heuristic_config(space)], budget_seconds=budget, seed=seed, clock=lambda: next(clock))


def test_search_with_the_same_seed_visits_the_same_configs_in_the_same_order():
    first, second = _run_search("full", seed=7), _run_search("full", seed=7)
    assert [t.config for t in first.trials] == [t.config for t in second.trials]


def test_search_with_another_seed_draws_another_population():
    assert [t.config for t in _run_search("full", 1).trials] != [t.config for t in _run_search("full", 2).trials]


def test_full_search_finds_the_bottom_of_a_bowl():
    result = _run_search("full", seed=0)
    assert result.best == Config(block_sizes=[128, 64, 32], num_warps=4, num_stages=1)


def test_quick_search_stays_small_and_improves_on_the_seed():
    result = _run_search("quick", seed=0)
    assert len(result.trials) <= 30
    assert result.best_ms < _bowl(result.trials[0].config)


def _batches_of(effort: str, space, seed: int = 0) -> list[list[Config]]:
    """The batches a search from the heuristic sends out under the bowl cost."""
    batches = []

    def evaluate(configs, deadline):
        batches.append(configs)
        return [_bowl(c) for c in configs]

    search(space, evaluate, effort=effort, seeds=[TRITON.heuristic_config(space)], budget_seconds=1e9, seed=seed)
    return batches


def test_quick_search_sends_a_single_seed_out_with_its_neighbours_in_one_batch():
    space = TRITON.config_space(matmul_facts(), enabled={"block_sizes", "num_warps", "num_stages"})
    batches = _batches_of("quick", space)
    seed = TRITON.heuristic_config(space)
    assert batches[0][0] == space.normalize(seed)
    fitting = [space.normalize(c) for c in space.neighbors_interleaved(seed) if space.fits_device(c)]
    assert batches[0][1:] == fitting[:len(batches[0]) - 1]
    assert len(batches[0]) >= 8


def test_the_first_ring_of_a_quick_search_moves_every_axis_of_a_matmul_space():
    space = TRITON.config_space(matmul_facts())
    seed = space.normalize(TRITON.heuristic_config(space))
    assert len(list(space.neighbors(seed))) > 16  # more one-step moves than the first ring holds
    ring = _batches_of("quick", space)[0][1:]
    moved = {name for config in ring for name, value in space.values_of(config).items()
             if value != space.values_of(seed)[name]}
    assert moved == {axis.name for axis in space.axes if len(axis.choices) > 1}


def test_a_dot_tile_that_leaves_a_thread_more_than_128_accumulator_elements_is_not_tried():
    space = TRITON.config_space(matmul_facts())
    heuristic = TRITON.heuristic_config(space)  # 128 x 256 with 8 warps: 128 per thread
    assert space.fits_device(heuristic)
    assert not space.fits_device(heuristic.merged(num_warps=4))  # 256 per thread: spills
    assert space.fits_device(heuristic.merged(block_sizes=[128, 128, 64], num_warps=4))
    ring = _batches_of("quick", space)[0]
    assert all(space.fits_device(config) for config in ring)


def test_a_seed_is_timed_even_when_it_does_not_fit_the_tuners_register_budget():
    space = TRITON.config_space(matmul_facts())
    spilling = TRITON.heuristic_config(space).merged(num_warps=4)
    batches = []
    search(space, lambda configs, deadline: batches.append(configs) or [1.0] * len(configs), effort="quick",
           seeds=[spilling], budget_seconds=1e9)
    assert batches[0][0] == space.normalize(spilling) and not space.fits_device(spilling)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_attention_heuristic_fits_the_tuners_register_budget(head_dim):
    # the heuristic is the search's first seed; at D128 it holds 256 query rows (128 per thread)
    from examples.attention import attention
    q, k, v = (torch.empty(2, 32, 4096, head_dim, dtype=torch.bfloat16) for _ in range(3))
    bound = attention.bind(q, k, v, False)
    space = tuning.config_space_for(bound.plan(Config()))
    assert space.fits_device(tuning.heuristic_for(bound))
    matmul_space = TRITON.config_space(matmul_facts())
    assert matmul_space.fits_device(TRITON.heuristic_config(matmul_space))


def test_interleaved_neighbours_are_the_same_moves_in_another_order():
    space = TRITON.config_space(matmul_facts())
    seed = TRITON.heuristic_config(space)
    assert sorted(map(repr, space.neighbors_interleaved(seed))) == sorted(map(repr, space.neighbors(seed)))


def test_a_full_search_begins_with_the_quick_search_and_never_ends_worse():
    quick, full = _run_search("quick", seed=0), _run_search("full", seed=0)
    assert [t.config for t in full.trials[:len(quick.trials)]] == [t.config for t in quick.trials]
    assert full.best_ms <= quick.best_ms and len(full.trials) > len(quick.trials)


def test_a_full_search_population_holds_mutants_of_the_best_beside_random_points():
    space = TRITON.config_space(matmul_facts(), enabled={"block_sizes", "num_warps", "num_stages"})
    batches = _batches_of("full", space)
    quick_trials = len(_run_search("quick", seed=0).trials)
    done = 0
    for number, batch in enumerate(batches):  # find the population: the batch after the quick search's
        done += len(batch)
        if done == quick_trials:
            population = batches[number + 1]
            break
    best = min((c for b in batches[:number + 1] for c in b), key=_bowl)
    near = [c for c in population if sum(a != b for a, b in zip(space.values_of(c).values(),
                                                                    space.values_of(best).values())) <= 2]
    assert len(near) >= 2 and len(population) >= 8


def test_search_stops_when_the_budget_is_spent():
    result = _run_search("full", seed=0, budget=3)  # the fake clock ticks once per batch
    assert len(result.trials) < len(_run_search("full", seed=0).trials)


def test_settings_declare_the_autotune_seed():
    with settings.override(autotune_seed=11):
        assert settings.get("autotune_seed") == 11


# ---------------------------------------------------------------------------------------------
# The pipeline: failing candidates are skipped, warm workers reused, references restored
# ---------------------------------------------------------------------------------------------

def test_pipeline_skips_every_kind_of_failing_candidate_and_returns_a_working_one(interpreter_workers):
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    seeds = [Config(block_sizes=[8, 16], num_warps=1),                 # compile error
             Config(block_sizes=[8, 16], num_warps=2),                 # compile hangs
             Config(block_sizes=[8, 16], num_warps=16),                # bench worker dies
             Config(block_sizes=[8, 16], num_warps=4, num_stages=3),   # kernel raises
             Config(block_sizes=[8, 16], num_warps=4, num_stages=4),   # wrong result
             Config(block_sizes=[4, 16], num_warps=8, num_stages=1)]   # fine
    options = TuneOptions(compile_workers=2, compile_timeout_s=3, run_timeout_s=30, rep_ms=1, final_rep_ms=1,
                          compile_setup=autotune_fakes.faulty_compile_setup,
                          bench_setup=autotune_fakes.faulty_bench_setup, progress=False)
    result = tune(add.bind(x, y), effort="quick", budget_seconds=120, seeds=seeds, only_seeds=True, options=options)
    assert result.config["block_sizes"] == [4, 16]
    assert result.failures == {"compile": 1, "timeout": 1, "crash": 1, "error": 1, "wrong": 1}


@tessera.kernel
def _scaled_column_sums(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`x * weight` row by row, and the column sums of `x`: one partial sum per block of rows,
    which host code adds up after the launch (a result the host finishes: host_finish.py)."""
    m = x.size(0)
    m_block = hl.register_block_size(m)
    n = hl.specialize(x.size(1))
    scaled = torch.empty_like(x)
    blocks = torch.empty([(m + m_block - 1) // m_block, n], dtype=x.dtype, device=x.device)
    for mb in hl.tile(m, block_size=m_block):
        acc = hl.zeros([n], dtype=x.dtype)
        for row in hl.tile(mb.begin, mb.end):
            rows = x[row, :]
            scaled[row, :] = rows * weight[None, :]
            acc = acc + torch.sum(rows, dim=0)
        blocks[mb.id, :] = acc
    return scaled, blocks.sum(dim=0)


def _column_sum_inputs(m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(m, n), torch.randn(n)


def test_a_kernel_whose_host_code_sums_partial_results_tunes_and_wrong_partial_sums_are_rejected(
        interpreter_workers):
    # the launch writes partial sums per block; host code sums them into the column sums
    args = _column_sum_inputs(48, 24)
    seeds = [Config(block_sizes=[16, 16], num_stages=4),   # its launches write wrong partial sums
             Config(block_sizes=[16, 16], num_stages=1),
             Config(block_sizes=[32, 16], num_stages=1)]
    options = TuneOptions(compile_workers=2, rep_ms=1, final_rep_ms=1, progress=False,
                          bench_setup=autotune_fakes.faulty_bench_setup)
    result = tune(_scaled_column_sums.bind(*args), effort="none", budget_seconds=120, seeds=seeds, only_seeds=True,
                  options=options)
    assert result.failures == {"wrong": 1}
    assert result.config["num_stages"] == 1
    scaled, sums = _scaled_column_sums.bind(*args).run(result.config)
    torch.testing.assert_close(scaled, args[0] * args[1])
    torch.testing.assert_close(sums, args[0].sum(dim=0), rtol=1e-4, atol=1e-4)


def test_quick_tuning_of_a_kernel_whose_host_code_finishes_its_results_finds_no_wrong_candidate(
        interpreter_workers):
    options = TuneOptions(compile_workers=2, rep_ms=1, final_rep_ms=1, progress=False)
    result = tune(_scaled_column_sums.bind(*_column_sum_inputs(32, 16)), effort="quick", budget_seconds=120,
                  options=options)
    assert result.failures == {} and len(result.search.trials) > 3


def test_finishing_on_the_host_runs_the_host_code_on_what_the_launches_wrote():
    args = _column_sum_inputs(48, 24)
    bound = _scaled_column_sums.bind(*args)
    plan = bound.plan(Config(block_sizes=[16, 16]))
    assert host_finish.finished_on_host(plan) and not host_finish.finished_on_host(add.bind(*args[:1] * 2).plan())
    scaled = plan.result[0]
    blocks = [t for t in host_finish.finish_on_host(bound, plan).stored if t.shape == (3, 24)]
    assert len(blocks) == 1  # the partial sums, one row per block of 16 rows
    blocks[0].fill_(2.0)  # what a worker's launches would have written
    scaled.fill_(5.0)
    finished = host_finish.finish_on_host(bound, plan)
    assert {id(t) for t in finished.stored} == {id(t) for t in blocks + [scaled]}  # never an input
    torch.testing.assert_close(finished.results[0], torch.full((48, 24), 5.0))
    torch.testing.assert_close(finished.results[1], torch.full((24,), 6.0))  # summed over its 3 rows


class _RecordingGroup:
    """Stands in for the bench worker group: keeps what is submitted."""

    def __init__(self):
        self.submitted = []

    def submit(self, task_id, task):
        self.submitted.append((task_id, task))


def test_host_finished_launches_that_write_nothing_into_buffers_holding_the_answer_are_rejected():
    x, weight = args = _column_sum_inputs(32, 8)
    working = tessera.autotune.pipeline._bind_on_copies(_scaled_column_sums.bind(*args))
    runner = CandidateRunner(working, TuneOptions(progress=False), "_scaled_column_sums")
    runner.bench, runner.reference = _RecordingGroup(), [x * weight, x.sum(dim=0)]
    candidate = runner.candidates[0] = _Candidate(Config(block_sizes=[16, 16]), host_finished=True)
    candidate.plan = working.plan(candidate.config)
    # the plan's buffers already hold the right partial sums (memory an earlier candidate left)
    finished = host_finish.finish_on_host(working, candidate.plan)
    candidate.plan.result[0].copy_(runner.reference[0])
    blocks = [t for t in finished.stored if t.shape == (2, 8)]
    blocks[0].copy_(x.reshape(2, 16, 8).sum(1))
    assert runner._host_result_error(candidate)[0] <= 1
    runner._submit_check(0)
    [(task_id, task)] = runner.bench.submitted
    assert task_id == ("gate", 0) and task.run_only
    assert all(t.isnan().all() for t in blocks + [candidate.plan.result[0]])  # poisoned; inputs untouched
    torch.testing.assert_close(working.args[0], x)
    runner._gate_on_host(Outcome(("gate", 0), "ok", BenchResult(None, float("nan"), "ran")))  # wrote nothing
    assert candidate.status == "wrong"


def _tune_add_against_its_heuristic(times):
    """Tune add with its heuristic Config (num_warps=4) and one other (num_warps=8) under fake times."""
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    heuristic = tuning.heuristic_for(add.bind(x, y))
    assert heuristic["num_warps"] == 4
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, progress=False, warm_pool=False,
                          bench_setup=functools.partial(autotune_fakes.timed_bench_setup, times))
    result = tune(add.bind(x, y), effort="none", budget_seconds=120, seeds=[heuristic.merged(num_warps=8)],
                  options=options)
    assert len(result.search.trials) == 2 and result.failures == {}
    return result, heuristic


def test_tuning_never_returns_a_config_the_final_timing_measured_slower_than_the_heuristic(interpreter_workers):
    # the other Config led the search but is slower when timed again beside the heuristic
    result, heuristic = _tune_add_against_its_heuristic({"search": {4: 2.0, 8: 1.0}, "final": {4: 2.0, 8: 3.0}})
    assert result.config["num_warps"] == 4 and result.time_ms == 2.0


def test_a_tie_with_the_heuristic_goes_to_the_heuristic(interpreter_workers):
    result, heuristic = _tune_add_against_its_heuristic({"search": {4: 2.0, 8: 1.0}, "final": {4: 2.0, 8: 2.0}})
    assert result.config["num_warps"] == 4


def test_the_heuristic_is_timed_in_the_final_round_even_when_it_is_not_among_the_leaders(interpreter_workers):
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    heuristic = tuning.heuristic_for(add.bind(x, y))
    others = [heuristic.merged(num_warps=warps) for warps in (1, 2, 8)]
    times = {"search": {1: 1.0, 2: 1.0, 8: 1.0, 4: 5.0}, "final": {1: 6.0, 2: 7.0, 8: 8.0, 4: 5.0}}
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, final_top=2, progress=False, warm_pool=False,
                          bench_setup=functools.partial(autotune_fakes.timed_bench_setup, times))
    result = tune(add.bind(x, y), effort="none", budget_seconds=120, seeds=others, options=options)
    assert result.config["num_warps"] == 4


def test_a_config_faster_than_the_heuristic_in_the_final_timing_wins(interpreter_workers):
    result, heuristic = _tune_add_against_its_heuristic({"search": {4: 2.0, 8: 1.0}, "final": {4: 2.0, 8: 1.5}})
    assert result.config["num_warps"] == 8 and result.time_ms == 1.5


def test_a_config_within_the_noise_margin_of_the_heuristic_loses_to_it(interpreter_workers):
    result, heuristic = _tune_add_against_its_heuristic({"search": {4: 2.0, 8: 1.0}, "final": {4: 2.0, 8: 1.99}})
    assert result.config["num_warps"] == 4 and result.time_ms == result.default_ms == 2.0


def test_the_result_reports_the_heuristic_time_of_its_own_final_round(interpreter_workers):
    result, heuristic = _tune_add_against_its_heuristic({"search": {4: 2.0, 8: 1.0}, "final": {4: 3.0, 8: 1.5}})
    assert result.default_ms == 3.0 and result.time_ms == 1.5


def test_the_budget_never_cancels_the_heuristic_config(interpreter_workers):
    # the heuristic compiles for longer than the whole budget; the other seed is timed in time
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    heuristic = tuning.heuristic_for(add.bind(x, y))
    times = {"search": {4: 2.0, 8: 1.0}, "final": {4: 1.0, 8: 3.0}}
    options = TuneOptions(compile_workers=2, rep_ms=1, final_rep_ms=1, progress=False, warm_pool=False,
                          compile_setup=autotune_fakes.heuristic_compiles_slowly_setup,
                          bench_setup=functools.partial(autotune_fakes.timed_bench_setup, times))
    result = tune(add.bind(x, y), effort="none", budget_seconds=1, seeds=[heuristic.merged(num_warps=8)],
                  options=options)
    assert result.failures == {} and {t.config["num_warps"]: t.time_ms for t in result.search.trials} == {4: 2.0, 8: 1.0}
    assert result.config["num_warps"] == 4 and result.default_ms == 1.0


def test_a_batch_does_not_wait_for_one_slow_compile_and_times_it_when_it_is_done(interpreter_workers):
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    heuristic = tuning.heuristic_for(add.bind(x, y))
    seeds = [heuristic.merged(num_warps=8), heuristic.merged(num_warps=2), heuristic.merged(num_stages=2)]
    options = TuneOptions(compile_workers=4, rep_ms=1, final_rep_ms=1, progress=False, warm_pool=False,
                          compile_setup=autotune_fakes.eight_warps_compile_slowly_setup)
    result = tune(add.bind(x, y), effort="none", budget_seconds=120, seeds=seeds, options=options)
    times = {(t.config["num_warps"], t.config["num_stages"]): t.time_ms for t in result.search.trials}
    assert result.phases["stragglers"] == 1 and len(times) == 4 and None not in times.values()
    assert result.failures == {}


def test_a_candidate_slower_than_the_cutoff_on_its_first_run_is_not_timed_further():
    calls = []

    def slow_run():
        calls.append(1)
        time.sleep(0.02)

    assert bench_worker._time_wall(slow_run, rep_ms=1e6, flush=None, cutoff_ms=1.0) >= 20 and len(calls) == 1
    calls.clear()
    bench_worker._time_wall(slow_run, rep_ms=1e6, flush=None)
    assert len(calls) == 3


def test_the_cutoff_is_a_few_times_the_fastest_candidate_timed_so_far():
    runner = CandidateRunner(add.bind(torch.randn(4, 4), torch.randn(4, 4)), TuneOptions(progress=False), "add")
    assert runner._cutoff_ms() is None
    runner.candidates = {0: _Candidate(Config(num_warps=4), time_ms=2.0, status="ok"),
                         1: _Candidate(Config(num_warps=8), time_ms=None, status="wrong"),
                         2: _Candidate(Config(num_warps=2), time_ms=5.0, status="ok")}
    assert runner._cutoff_ms() == 2.0 * tessera.autotune.pipeline.PRUNE_FACTOR


_DESCRIPTOR_SOURCE = """import triton
import triton.language as tl


@triton.jit
def loads_through_a_descriptor(pointer):  # {tag}
    descriptor = tl.make_tensor_descriptor(pointer, shape=[16], strides=[1], block_shape=[16])
    descriptor.load([0])
"""


@pytest.mark.parametrize("interpreted", [False, True])
def test_a_bench_worker_sets_the_descriptor_allocator_before_loading_a_compiled_tma_candidate(monkeypatch,
                                                                                               interpreted):
    # on the H100 every tensor_descriptor candidate failed in the bench worker: "no allocator was set"
    calls = []
    monkeypatch.setattr(worker_support, "triton_interpreted", lambda: interpreted)
    monkeypatch.setattr(worker_support, "ensure_descriptor_allocator", lambda: calls.append(1))
    source = _DESCRIPTOR_SOURCE.format(tag=f"interpreted={interpreted}")
    path = modules.write_generated("descriptor_probe", source, interpret=True)
    assert worker_support.load_function(path, "loads_through_a_descriptor") is not None
    assert calls == ([] if interpreted else [1])


class _FakeTimedBench:
    """The bench worker group of a final round: a plan's time is `times[num_warps]`, or in round
    r `times[num_warps][r]` when that is a tuple."""

    def __init__(self, times: dict[int, Any]) -> None:
        self.times, self.submitted = times, []

    def submit(self, task_id: Any, task: Any) -> None:
        self.submitted.append((task_id, task.launches[0].num_warps))

    def wait_all(self) -> list[Outcome]:
        def time_of(task_id, warps):
            given = self.times[warps]
            return given[task_id[1]] if isinstance(given, tuple) else given
        return [Outcome(task_id, "ok", BenchResult(time_of(task_id, warps), 0.0, "")) for task_id, warps in self.submitted]


def _final_round(times: dict[int, Any], search_times: dict[int, float], top: int | None = None):
    """The final round of add's heuristic (4 warps) against other warp counts under fake times."""
    working = tessera.autotune.pipeline._bind_on_copies(add.bind(torch.randn(64, 64), torch.randn(64, 64)))
    heuristic = tuning.heuristic_for(working)
    configs = {warps: heuristic.merged(num_warps=warps) for warps in times}
    result = SearchResult(None, 0.0, [Trial(configs[warps], search_times[warps]) for warps in times])
    runner = CandidateRunner(working, TuneOptions(progress=False), "add")
    runner.bench = _FakeTimedBench(times)
    return runner, configs, runner.final_timing(result, top=top or len(times), rep_ms=1, baseline=configs[4])


def test_a_lead_smaller_than_the_spread_between_two_rounds_of_one_config_goes_to_the_heuristic():
    # 8 warps leads by 4%, but its own two rounds differ by 10%: noise, the heuristic stays
    runner, configs, (best, best_ms, default_ms) = _final_round({4: (2.0, 2.0), 8: (1.82, 2.02)}, {4: 2.0, 8: 1.0})
    assert best == configs[4] and default_ms == 2.0


def test_a_lead_larger_than_the_spread_between_rounds_wins():
    runner, configs, (best, best_ms, default_ms) = _final_round({4: (2.0, 2.02), 8: (1.5, 1.52)}, {4: 2.0, 8: 1.0})
    assert best == configs[8] and best_ms == 1.51


@pytest.mark.parametrize("draw", range(20))
def test_the_final_round_never_picks_a_config_slower_than_the_heuristic(draw):
    # a fake timer: random search times, and two random final rounds, for the heuristic (4 warps)
    # and three others; only two of them lead the search
    rng = random.Random(draw)
    final = {warps: tuple(rng.choice([1.0, 1.005, 1.05, 1.5, 2.0]) for _ in range(2)) for warps in (1, 2, 4, 8)}
    runner, configs, (best, best_ms, default_ms) = _final_round(final, {w: rng.uniform(1, 2) for w in final}, top=2)
    assert default_ms == sum(final[4]) / 2 and best_ms <= default_ms
    if best != configs[4]:
        assert best_ms < default_ms * (1 - tessera.autotune.pipeline.BASELINE_MARGIN)
    assert {warps for _, warps in runner.bench.submitted} >= {4}  # the heuristic ran in the final round


def test_pipeline_raises_a_clear_error_when_every_candidate_fails(monkeypatch):
    def every_candidate_fails(self, configs, deadline):
        for config in configs:
            self.candidates[len(self.candidates)] = _Candidate(config, status="compile")
        return [None] * len(configs)

    monkeypatch.setattr(CandidateRunner, "start", lambda self: None)
    monkeypatch.setattr(CandidateRunner, "evaluate", every_candidate_fails)
    with pytest.raises(exc.AutotuneError, match=r"every autotuning candidate of add failed \(2 compile\)"):
        tune(add.bind(torch.randn(4, 4), torch.randn(4, 4)), effort="none", budget_seconds=60,
             seeds=[Config(block_sizes=[4, 4]), Config(block_sizes=[2, 4])], only_seeds=True,
             options=TuneOptions(progress=False))


def test_a_second_tuning_in_the_process_reuses_the_warm_workers(interpreter_workers):
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, progress=False)
    tune(add.bind(x, y), effort="none", budget_seconds=60, options=options)
    pids = {w.process.pid for name in ("compile", "bench") for w in pool._pools[name].workers}
    result = tune(softmax.bind(torch.randn(8, 16)), effort="none", budget_seconds=60, options=options)
    assert {w.process.pid for name in ("compile", "bench") for w in pool._pools[name].workers} == pids
    # found ready when the run began: marked before the kernel was traced, not after a start-up
    assert result.phases["bench_workers"] == result.phases["compile_workers"] == "warm"
    assert result.phases["bench_worker_ready"] <= result.phases["traced"]
    assert result.phases["compile_worker_ready"] <= result.phases["traced"]
    assert result.phases["first_timed"] <= result.phases["final_done"]  # phases are rounded to milliseconds
    expected = "fork" if forking.fork_hazard() is None else "forkserver"  # fork: no CUDA on a CI machine
    assert result.phases["compile_started_by"] == result.phases["bench_started_by"] == expected


def test_waiting_for_workers_to_start_is_not_charged_to_the_budget(interpreter_workers):
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, progress=False, warm_pool=False,
                          compile_setup=autotune_fakes.slow_compile_setup)  # starts in 4 s, twice the budget
    result = tune(add.bind(x, y), effort="none", budget_seconds=2, seeds=[Config(block_sizes=[8, 16])],
                  only_seeds=True, options=options)
    assert result.config["block_sizes"] == [8, 16] and result.failures == {}


def test_the_eager_reference_runs_with_big_blocks_and_matches_the_default_one():
    x = torch.randn(3000, 40)
    bound = softmax.bind(x)
    space = tuning.config_space_for(bound.plan(Config()))
    config = reference_config(space, TRITON.heuristic_config(space))
    assert config["block_sizes"][0] >= 16  # 3000 rows: at most 188 tiles instead of 94 of the default 32
    working = tessera.autotune.pipeline._bind_on_copies(bound)
    [fast] = _eager_reference(working, config)
    torch.testing.assert_close(fast, bound.reference())


def test_reference_blocks_grow_the_dim_with_the_most_tiles_until_about_256_remain():
    facts = KernelFacts(tunables=(TunableDim(0, 8192, 1, "launch"), TunableDim(1, 8192, 1, "launch")),
                        launch_dims=(2,), dtypes=(torch.bfloat16,), largest_numel=8192 * 8192)
    space = TRITON.config_space(facts)
    blocks = reference_config(space, TRITON.heuristic_config(space))["block_sizes"]
    assert (8192 // blocks[0]) * (8192 // blocks[1]) == 256


def test_an_in_place_kernel_is_restored_after_its_eager_reference():
    @tessera.kernel
    def scale_in_place(x: torch.Tensor) -> torch.Tensor:
        for tile in tessera.language.tile(x.size(0)):
            x[tile] = x[tile] * 2
        return x

    x = torch.arange(8, dtype=torch.float32)
    working = tessera.autotune.pipeline._bind_on_copies(scale_in_place.bind(x))
    [reference] = _eager_reference(working, Config(block_sizes=[8]))
    torch.testing.assert_close(reference, x * 2)
    torch.testing.assert_close(working.args[0], x)  # the tuning copy is pristine again


def test_quick_tuning_runs_end_to_end_on_the_cpu_interpreter(interpreter_workers):
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, progress=False)
    result = tune(add.bind(x, y), effort="quick", budget_seconds=60, options=options)
    assert result.failures.get("wrong", 0) == 0
    assert len(result.search.trials) > 3
    torch.testing.assert_close(add.bind(x, y).run(result.config), x + y)


def test_full_tuning_runs_end_to_end_on_the_cpu_interpreter_and_reports_the_default_time(interpreter_workers):
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, progress=False)
    result = tune(add.bind(x, y), effort="full", budget_seconds=2, options=options)
    heuristic = tuning.heuristic_for(add.bind(x, y))
    assert result.search.trials[0].config["block_sizes"] == heuristic["block_sizes"]  # the quick search first
    assert result.search.trials[0].time_ms is not None and result.default_ms is not None
    assert result.time_ms <= result.default_ms
    torch.testing.assert_close(add.bind(x, y).run(result.config), x + y)


# ---------------------------------------------------------------------------------------------
# Accuracy gate
# ---------------------------------------------------------------------------------------------

def test_accuracy_gate_scales_its_tolerance_with_the_output_magnitude():
    want = torch.randn(1000, dtype=torch.float32) * 1e6
    assert accuracy_error([want * (1 + 1e-4)], [want])[0] <= 1
    assert accuracy_error([want + 1e5], [want])[0] > 1


def test_accuracy_gate_rejects_misplaced_nans_and_wrong_shapes():
    want = torch.tensor([1.0, float("nan")])
    assert accuracy_error([torch.tensor([1.0, float("nan")])], [want])[0] <= 1
    assert accuracy_error([torch.tensor([float("nan"), 1.0])], [want])[0] > 1
    assert accuracy_error([torch.zeros(3)], [torch.zeros(2)])[0] == float("inf")


def test_accuracy_gate_rejects_a_candidate_that_writes_nothing_into_an_output_holding_the_answer():
    reference = torch.arange(8, dtype=torch.float32)
    output = reference.clone()  # memory reused from an earlier, correct candidate
    handler = bench_worker_setup(BenchWorkerSpec("interpret"))
    handler.begin_session(BenchSession([], [reference]))
    result = handler(BenchTask(launches=[], results=[output], check=True, rep_ms=1))
    assert result.time_ms is None


def test_bench_worker_refuses_a_candidate_outside_a_session():
    handler = bench_worker_setup(BenchWorkerSpec("interpret"))
    with pytest.raises(RuntimeError, match="before the tuning run's inputs"):
        handler(BenchTask(launches=[], results=[], check=True, rep_ms=1))


# ---------------------------------------------------------------------------------------------
# Disk cache and the call-time rule
# ---------------------------------------------------------------------------------------------

KEY = disk_cache.CacheKey("source", "spec", "GPU", "torch", "triton")


def test_disk_cache_misses_then_hits_what_was_stored():
    assert disk_cache.lookup(KEY) is None
    disk_cache.store(KEY, Config(block_sizes=[64], loop_orders=[[1, 0]]), time_ms=1.5, effort="quick")
    entry = disk_cache.lookup(KEY)
    assert entry.config == Config(block_sizes=[64], loop_orders=[[1, 0]]) and entry.time_ms == 1.5


def test_disk_cache_entry_tuned_with_less_effort_does_not_satisfy_a_full_request():
    disk_cache.store(KEY, Config(block_sizes=[64]), time_ms=1.0, effort="quick")
    assert disk_cache.lookup(KEY, at_least="full") is None


def test_disk_cache_ignores_a_corrupted_entry_and_a_rewrite_repairs_it():
    path = disk_cache.store(KEY, Config(block_sizes=[64]), time_ms=1.0, effort="quick")
    with open(path, "w") as handle:
        handle.write('{"format": 1, "key": ')
    assert disk_cache.lookup(KEY) is None
    disk_cache.store(KEY, Config(block_sizes=[32]), time_ms=1.0, effort="quick")
    assert disk_cache.lookup(KEY).config == Config(block_sizes=[32])
    assert [name for name in os.listdir(os.path.dirname(path)) if name.endswith(".tmp")] == []


def test_disk_cache_ignores_a_foreign_entry_under_its_file_name():
    path = disk_cache.store(KEY, Config(block_sizes=[64]), time_ms=1.0, effort="quick")
    with open(path) as handle:
        data = json.load(handle)
    data["key"]["device_name"] = "another GPU"
    with open(path, "w") as handle:
        json.dump(data, handle)
    assert disk_cache.lookup(KEY) is None


def test_disk_cache_ignores_an_entry_whose_config_no_longer_validates():
    path = disk_cache.store(KEY, Config(block_sizes=[64]), time_ms=1.0, effort="quick")
    with open(path) as handle:
        data = json.load(handle)
    data["config"]["num_warps"] = 3
    with open(path, "w") as handle:
        json.dump(data, handle)
    assert disk_cache.lookup(KEY) is None


def test_a_second_process_reuses_the_tuned_config_from_disk_without_tuning(monkeypatch):
    monkeypatch.setenv("TESSERA_AUTOTUNE_EFFORT", "quick")  # conftest turns tuning off for other tests
    monkeypatch.setenv("TESSERA_PREWARM", "0")  # defining the kernel below must not start workers (on a GPU)
    kernel = tessera.kernel(add.fn)
    x = torch.randn(8, 8)
    calls = []

    def fake_tune(bound, **options):
        calls.append(options)
        from tessera.autotune.search import SearchResult
        from tessera.autotune.pipeline import TuneResult
        return TuneResult(Config(block_sizes=[8, 8], num_warps=2), 0.5, SearchResult(None, 0.5, []), {}, 0.1)

    monkeypatch.setattr("tessera.autotune.pipeline.tune", fake_tune)
    first = tuning._choose(kernel, "compiled", kernel.bind(x, x))
    tuning.forget(kernel)  # what a new process starts with
    second = tuning._choose(kernel, "compiled", kernel.bind(x, x))
    assert first == second == Config(block_sizes=[8, 8], num_warps=2)
    assert len(calls) == 1


def test_a_kernel_with_a_config_runs_it_without_tuning():
    config = Config(block_sizes=[4, 4])
    kernel = tessera.kernel(config=config)(add.fn)
    assert tuning.config_for_call(kernel, "compiled", (torch.randn(4, 4), torch.randn(4, 4)), {}) is config


def test_interpret_mode_never_tunes_and_runs_the_heuristic_config():
    kernel = tessera.kernel(add.fn)
    x = torch.randn(8, 2048)
    chosen = tuning.config_for_call(kernel, "interpret", (x, x), {})
    assert chosen == tuning.heuristic_for(kernel.bind(x, x), interpreted=True)
    # the interpreter's flavour of the heuristic: the GPU's blocks, widened (its cost is per op)
    assert tuning.heuristic_for(kernel.bind(x, x))["block_sizes"] == [2, 1024]
    assert chosen["block_sizes"] == [8, 1024]


def test_interpret_mode_with_configs_runs_the_first_one():
    configs = [Config(block_sizes=[2, 2]), Config(block_sizes=[4, 4])]
    kernel = tessera.kernel(configs=configs)(add.fn)
    assert tuning.config_for_call(kernel, "interpret", (torch.randn(4, 4), torch.randn(4, 4)), {}) == configs[0]


def test_the_decorator_line_is_valid_python_that_rebuilds_the_config():
    config = Config(block_sizes=[64, 32], num_warps=4, pid_type="xyz", loop_orders=[[1, 0]])
    line = decorator_line(config)
    assert line.startswith("@tessera.kernel(config=tessera.Config(")
    assert eval(line[len("@tessera.kernel(config="):-1], {"tessera": tessera}) == config


# ---------------------------------------------------------------------------------------------
# Prewarm: workers started when a kernel that will likely tune is defined
# ---------------------------------------------------------------------------------------------

def _defined_kernels(monkeypatch) -> list:
    submitted: list = []
    monkeypatch.setattr(prewarm, "_submit", submitted.append)
    return submitted


def test_defining_a_kernel_that_will_likely_tune_asks_for_the_workers(monkeypatch):
    submitted = _defined_kernels(monkeypatch)
    # the background path (where CUDA is initialized, the workers cannot be forked here)
    monkeypatch.setattr(prewarm.forking, "fork_hazard", lambda: "CUDA is initialized")
    with settings.override(autotune_effort=None):
        tuned = tessera.kernel(add.fn)
        tessera.kernel(config=Config(block_sizes=[4, 4]))(add.fn)    # a config: no tuning
        tessera.kernel(mode="interpret")(add.fn)                     # never tunes
        tessera.kernel(autotune_effort="none")(add.fn)
        with settings.override(prewarm=False):
            tessera.kernel(add.fn)
        with settings.override(mode="eager"):
            tessera.kernel(add.fn)
    tessera.kernel(add.fn)  # the test suite's TESSERA_AUTOTUNE_EFFORT=none
    assert submitted == [tuned]


def test_defining_a_kernel_never_raises_from_prewarm(monkeypatch):
    def broken(kernel):
        raise RuntimeError("injected")
    monkeypatch.setattr(prewarm, "_likely_to_tune", broken)
    assert tessera.kernel(add.fn)(torch.ones(2, 2), torch.ones(2, 2)).sum() == 8


def test_prewarm_hashes_the_source_as_the_kernel_does():
    assert prewarm.source_hash(add.fn) == add.source_hash


def _cuda_present(monkeypatch) -> TuneOptions:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    pool.shutdown_pools()
    return TuneOptions(compile_workers=1, compile_setup=autotune_fakes.echo_setup,
                       bench_setup=autotune_fakes.echo_setup)


def test_prewarm_starts_the_compile_pool_and_bench_worker_a_tuning_run_will_lease(monkeypatch):
    options = _cuda_present(monkeypatch)
    try:
        assert prewarm.consider(add, options).startswith("will likely tune")
        compile_pool, bench = pool._pools["compile"], pool._pools["bench"]
        assert compile_pool.prestarted and compile_pool.payload == CompileWorkerSpec("compiled")
        assert len(compile_pool.workers) == 1
        assert bench.prestarted and bench.payload == BenchWorkerSpec("compiled", "cuda:0")
        assert prewarm.consider(softmax, options) == "the workers are running already"
    finally:
        pool.shutdown_pools()


def test_prewarm_leaves_the_workers_off_when_the_disk_cache_has_configs_for_the_kernel(monkeypatch):
    options = _cuda_present(monkeypatch)
    key = disk_cache.CacheKey(prewarm.source_hash(add.fn), "spec", "NVIDIA H100 80GB HBM3", torch.__version__,
                              disk_cache._triton_version())
    disk_cache.store(key, Config(block_sizes=[4, 4]), time_ms=1.0, effort="quick")
    assert disk_cache.has_entry_for(key.source_hash)
    assert disk_cache.has_entry_for(key.source_hash, frozenset({key.device_name}))
    assert not disk_cache.has_entry_for(key.source_hash, frozenset({"another GPU"}))
    assert prewarm.consider(add, options).startswith("the disk cache has tuned configs")
    assert not pool.has_group("compile") and not pool.has_group("bench")


def test_interpret_mode_workers_have_no_warm_up_and_the_warm_up_source_is_written_once(monkeypatch):
    # in a worker, prepare_worker imports Triton with its interpreter; here it would fix this
    # test process's Triton mode for every later test
    monkeypatch.setattr(type(TRITON), "prepare_worker", lambda self, interpret: None)
    assert not hasattr(compile_pool.compile_worker_setup(CompileWorkerSpec("interpret")), "warm_up")
    assert bench_worker_setup(BenchWorkerSpec("interpret")).warm_up is None
    path = worker_support.warm_up_source_path()
    assert open(path).read() == worker_support.WARM_UP_SOURCE and worker_support.warm_up_source_path() == path
