"""Prewarm: the tuning workers are started when a kernel that will likely tune is defined."""
from __future__ import annotations


import pytest
import torch

import tessera
from tessera import backends, settings
from tessera.autotune import compile_pool, disk_cache, prewarm
from tessera.autotune import pool
from tessera.autotune.bench_worker import BenchWorkerSpec, bench_worker_setup
from tessera.autotune.compile_pool import CompileWorkerSpec
from tessera.autotune.pipeline import TuneOptions
from tessera.backends.triton import worker_support
from tessera.config import Config

import autotune_fakes
from examples.add import add
from examples.softmax import softmax

TRITON = backends.get("triton")  # the space and the heuristics are the backend's

pytestmark = pytest.mark.usefixtures("private_cache")


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
