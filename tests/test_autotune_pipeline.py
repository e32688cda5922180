"""The tuning pipeline end to end on the CPU: failing candidates are skipped, slow ones cut
off, warm workers reused, and worker start-up is not charged to the budget (faults injected by
the worker setups in `autotune_fakes.py`)."""
from __future__ import annotations

import time

import pytest
import torch

import tessera
from tessera import exc
from tessera.autotune import bench_worker, forking, pool
from tessera.autotune.pipeline import CandidateRunner, TuneOptions, _Candidate, decorator_line, tune
from tessera.backends.triton import modules, worker_support
from tessera.config import Config
from tessera.runtime import tuning

import autotune_fakes
from examples.add import add
from examples.softmax import softmax

pytestmark = pytest.mark.usefixtures("private_cache")


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
                                                                                               interpreted, device):
    # on the H100 every tensor_descriptor candidate failed in the bench worker: "no allocator was set"
    # the probe imports triton: first in this process, it must pick the suite's mode, not the compiled one
    modules._ensure_triton(device.type != "cuda")
    calls = []
    monkeypatch.setattr(worker_support, "triton_interpreted", lambda: interpreted)
    monkeypatch.setattr(worker_support, "ensure_descriptor_allocator", lambda: calls.append(1))
    source = _DESCRIPTOR_SOURCE.format(tag=f"interpreted={interpreted}")
    path = modules.write_generated("descriptor_probe", source, interpret=True)
    assert worker_support.load_function(path, "loads_through_a_descriptor") is not None
    assert calls == ([] if interpreted else [1])


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


def test_the_decorator_line_is_valid_python_that_rebuilds_the_config():
    config = Config(block_sizes=[64, 32], num_warps=4, pid_type="xyz", loop_orders=[[1, 0]])
    line = decorator_line(config)
    assert line.startswith("@tessera.kernel(config=tessera.Config(")
    assert eval(line[len("@tessera.kernel(config="):-1], {"tessera": tessera}) == config


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
