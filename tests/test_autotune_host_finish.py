"""Tuning kernels whose host code finishes the results after the launches (partial sums added
up on the host, host_finish.py): candidates are checked on the finished results."""
from __future__ import annotations


import pytest
import torch

import tessera
import tessera.language as hl
from tessera.autotune import host_finish
from tessera.autotune.bench_worker import BenchResult
from tessera.autotune.pipeline import CandidateRunner, TuneOptions, _Candidate, tune
from tessera.autotune.reference import bind_on_copies
from tessera.autotune.workers import Outcome
from tessera.config import Config

import autotune_fakes
from examples.add import add

pytestmark = pytest.mark.usefixtures("private_cache")


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


def test_host_finished_launches_that_write_nothing_into_buffers_holding_the_answer_are_rejected():
    x, weight = args = _column_sum_inputs(32, 8)
    working = bind_on_copies(_scaled_column_sums.bind(*args))
    runner = CandidateRunner(working, TuneOptions(progress=False), "_scaled_column_sums")
    runner.bench, runner.reference = autotune_fakes.RecordingGroup(), [x * weight, x.sum(dim=0)]
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
