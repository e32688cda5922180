"""Helion's Kernel and BoundKernel methods on Tessera's kernels: `kernel.autotune(args_sequence,
force=...)`, `bound.settings/configs/autotune/ensure_config_exists/run_ref/format_kernel_decorator`."""
from __future__ import annotations

import types

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import settings

T = torch.Tensor


def twice_plus(x: T, y: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2 + y[tile]
    return out


CHOSEN = tessera.Config(block_sizes=[8])


@pytest.fixture
def kernel(monkeypatch, tmp_path):
    """The kernel, with the search replaced by one that records what it tuned and picks CHOSEN."""
    from tessera.autotune import pipeline

    tuned: list[tuple] = []

    def tune(*args, **kwargs):
        tuned.append(args)
        return types.SimpleNamespace(config=CHOSEN, time_ms=0.5, seconds=0.1, failures={},
                                     search=types.SimpleNamespace(trials=[1]))
    monkeypatch.setattr(pipeline, "tune", tune)
    with settings.override(cache_dir=str(tmp_path), autotune_effort=None):
        compiled = tessera.kernel(twice_plus, mode="interpret")
        compiled.tuned = tuned
        yield compiled


@pytest.mark.parametrize("size", [1, 37])
def test_autotune_takes_the_arguments_unpacked_or_as_helions_one_sequence(kernel, size):
    x, y = torch.randn(size), torch.randn(size)
    assert kernel.autotune((x, y), force=True) == CHOSEN and kernel.autotune(x, y) == CHOSEN
    assert len(kernel.tuned) == 2
    torch.testing.assert_close(kernel(x, y), 2 * x + y)


def test_bound_kernel_reads_settings_and_configs_and_pins_its_config():
    x, y = torch.randn(37), torch.randn(37)
    pinned = tessera.kernel(twice_plus, mode="interpret", config=tessera.Config(block_sizes=[16]))
    bound = pinned.bind((x, y))
    assert bound.settings is pinned.settings and bound.configs == [tessera.Config(block_sizes=[16])]
    bound.ensure_config_exists((x, y))
    torch.testing.assert_close(bound(x, y), 2 * x + y)
    assert bound.format_kernel_decorator(tessera.Config(block_sizes=[16]), bound.settings) == \
        "@tessera.kernel(config=tessera.Config(block_sizes=[16]), static_shapes=False)"


@pytest.mark.parametrize("size", [1, 5, 37])
def test_run_ref_runs_the_kernel_as_pytorch(kernel, size):
    x, y = torch.randn(size), torch.randn(size)
    torch.testing.assert_close(kernel.bind((x, y)).run_ref(x, y), 2 * x + y)


def test_bound_autotune_runs_its_calls_under_the_result(kernel):
    x, y = torch.randn(37), torch.randn(37)
    bound = kernel.bind((x, y))
    assert bound.autotune((x, y)) == CHOSEN and bound._config == CHOSEN
    torch.testing.assert_close(bound(x, y), 2 * x + y)
