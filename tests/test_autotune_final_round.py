"""The final round of a tuning run: the leaders are timed again beside the heuristic Config,
which wins ties, noise and budget overruns (fake times from `autotune_fakes.timed_bench_setup`
and `FakeTimedBench`)."""
from __future__ import annotations

import functools
import random
from typing import Any

import pytest
import torch

import tessera
from tessera.autotune.pipeline import CandidateRunner, TuneOptions, tune
from tessera.autotune.reference import bind_on_copies
from tessera.autotune.search import SearchResult, Trial
from tessera.runtime import tuning

import autotune_fakes
from examples.add import add

pytestmark = pytest.mark.usefixtures("private_cache")


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


def _final_round(times: dict[int, Any], search_times: dict[int, float], top: int | None = None):
    """The final round of add's heuristic (4 warps) against other warp counts under fake times."""
    working = bind_on_copies(add.bind(torch.randn(64, 64), torch.randn(64, 64)))
    heuristic = tuning.heuristic_for(working)
    configs = {warps: heuristic.merged(num_warps=warps) for warps in times}
    result = SearchResult(None, 0.0, [Trial(configs[warps], search_times[warps]) for warps in times])
    runner = CandidateRunner(working, TuneOptions(progress=False), "add")
    runner.bench = autotune_fakes.FakeTimedBench(times)
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
