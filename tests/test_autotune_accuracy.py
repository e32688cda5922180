"""How a tuning run knows a candidate is right: the eager reference it is compared with, and
the accuracy gate of the bench worker."""
from __future__ import annotations


import pytest
import torch

import tessera
from tessera import backends
from tessera.autotune.bench_worker import BenchSession, BenchTask, BenchWorkerSpec, accuracy_error, bench_worker_setup
from tessera.autotune.reference import bind_on_copies, eager_reference, reference_config
from tessera.backends.config_space import KernelFacts
from tessera.config import Config
from tessera.runtime import tuning
from tessera.ir.tunables import TunableDim

from examples.softmax import softmax

TRITON = backends.get("triton")  # the space and the heuristics are the backend's

pytestmark = pytest.mark.usefixtures("private_cache")


def test_the_eager_reference_runs_with_big_blocks_and_matches_the_default_one():
    x = torch.randn(3000, 40)
    bound = softmax.bind(x)
    space = tuning.config_space_for(bound.plan(Config()))
    config = reference_config(space, TRITON.heuristic_config(space))
    assert config["block_sizes"][0] >= 16  # 3000 rows: at most 188 tiles instead of 94 of the default 32
    working = bind_on_copies(bound)
    [fast] = eager_reference(working, config)
    torch.testing.assert_close(fast, bound.reference())


def test_reference_blocks_grow_the_dim_with_the_most_tiles_until_about_256_remain():
    facts = KernelFacts(tunables=(TunableDim(0, 8192, 1, "launch"), TunableDim(1, 8192, 1, "launch")),
                        launch_dims=(2,), dtypes=(torch.bfloat16,), largest_numel=8192 * 8192)
    space = TRITON.config_space(facts)
    blocks = reference_config(space, TRITON.heuristic_config(space))["block_sizes"]
    assert (8192 // blocks[0]) * (8192 // blocks[1]) == 256


def test_an_in_place_kernel_is_restored_after_itseager_reference():
    @tessera.kernel
    def scale_in_place(x: torch.Tensor) -> torch.Tensor:
        for tile in tessera.language.tile(x.size(0)):
            x[tile] = x[tile] * 2
        return x

    x = torch.arange(8, dtype=torch.float32)
    working = bind_on_copies(scale_in_place.bind(x))
    [reference] = eager_reference(working, Config(block_sizes=[8]))
    torch.testing.assert_close(reference, x * 2)
    torch.testing.assert_close(working.args[0], x)  # the tuning copy is pristine again


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
