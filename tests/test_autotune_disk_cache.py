"""The disk cache of tuned Configs, and the rule a call follows to choose its Config (given,
stored, tuned or heuristic)."""
from __future__ import annotations

import json
import os

import pytest
import torch

import tessera
from tessera.autotune import disk_cache
from tessera.config import Config
from tessera.runtime import tuning

from examples.add import add

pytestmark = pytest.mark.usefixtures("private_cache")


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
