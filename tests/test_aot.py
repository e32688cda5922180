"""Ahead-of-time tuning (`tessera.aot_kernel`, issue 15): collect tunes each new shape once and
records it, measure times every recorded Config per shape, evaluate runs the fastest Config of
the nearest recorded shape, and with no data the kernel behaves as `tessera.kernel`."""
from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from tessera.aot import AOTRecords
from tessera.autotuner.benchmarking import do_bench_generic
from tessera.runtime import tuning

T = torch.Tensor


def scale_rows(x: T, factor: float) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * factor
    return out


class CountingTuner:
    """A tuner whose answer is known: block sizes from the call's first size; counts its calls."""

    def __init__(self) -> None:
        self.tuned: list[tuple[int, ...]] = []

    def kernel_defined(self, kernel: Any) -> None:
        pass

    def stored_config(self, kernel: Any, bound: Any, at_least: str) -> tessera.Config | None:
        return None

    def tune(self, kernel: Any, bound: Any, effort: str) -> tessera.Config:
        shape = tuple(bound.args[0].shape)
        self.tuned.append(shape)
        return tessera.Config(block_sizes=[1 if shape[0] < 8 else 8, 16])


@pytest.fixture
def data_dir(tmp_path: Any) -> Any:
    with settings.override(aot_data_dir=str(tmp_path)):
        yield tmp_path


@pytest.fixture
def counting_tuner() -> Any:
    tuner = CountingTuner()
    previous = tuning.install_tuner(tuner)
    yield tuner
    tuning.install_tuner(previous)


def _recorded(directory: Any) -> list[dict[str, Any]]:
    (name,) = [n for n in os.listdir(directory) if n.endswith(".json")]
    with open(os.path.join(directory, name), encoding="utf-8") as handle:
        return json.load(handle)["entries"]


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (16, 64)], ids=str)
def test_with_no_data_an_aot_kernel_computes_as_a_kernel(mode: str, shape: tuple[int, int], data_dir: Any) -> None:
    x = torch.randn(shape)
    kernel = tessera.aot_kernel(scale_rows, mode=mode)
    torch.testing.assert_close(kernel(x, 3.0), x * 3.0)
    assert kernel.settings.static_shapes is False


def test_collect_tunes_each_new_shape_once_and_records_it(data_dir: Any, counting_tuner: CountingTuner) -> None:
    kernel = tessera.aot_kernel(scale_rows, mode="interpret")
    with settings.override(aot_mode="collect"):
        for shape in [(5, 37), (5, 37), (20, 7)]:
            x = torch.randn(shape)
            torch.testing.assert_close(kernel(x, 2.0), x * 2.0)
    assert counting_tuner.tuned == [(5, 37), (20, 7)]
    entries = _recorded(data_dir)
    assert [e["features"] for e in entries] == [["float32", 5, 37], ["float32", 20, 7]]
    assert entries[0]["tuned"]["block_sizes"] == [1, 16] and entries[1]["tuned"]["block_sizes"] == [8, 16]


def test_evaluate_runs_the_fastest_measured_config_of_the_nearest_shape(data_dir: Any) -> None:
    kernel = tessera.aot_kernel(scale_rows, mode="interpret")
    records = kernel.records(torch.device("cpu"))
    slow, fast = tessera.Config(block_sizes=[2, 16]), tessera.Config(block_sizes=[4, 32])
    records.add_times(("float32", 100, 100), {slow: 2.0, fast: 1.0})
    records.add_tuned(("float32", 4, 4), slow)
    x = torch.randn(90, 120)
    assert kernel.choose_config("interpret", (x, 1.0), {}) == fast
    assert kernel.choose_config("interpret", (torch.randn(3, 5), 1.0), {}) == slow
    torch.testing.assert_close(kernel(x, 1.5), x * 1.5)
    # another dtype shares no features: the kernel chooses as usual (the heuristic)
    assert kernel.choose_config("interpret", (x.double(), 1.0), {}) not in (slow, fast)


def test_measure_times_every_recorded_config_on_the_call_shape(data_dir: Any) -> None:
    kernel = tessera.aot_kernel(scale_rows, mode="interpret")
    records = kernel.records(torch.device("cpu"))
    configs = [tessera.Config(block_sizes=[2, 16]), tessera.Config(block_sizes=[8, 8])]
    for size, config in zip((3, 30), configs):
        records.add_tuned(("float32", size, size), config)
    x = torch.randn(6, 9)
    with settings.override(aot_mode="measure"):
        torch.testing.assert_close(kernel(x, -1.0), -x)
    entry = records.entry(("float32", 6, 9))
    assert entry is not None and sorted(c["block_sizes"] for c, _ in entry["times"]) == [[2, 16], [8, 8]]
    assert all(ms > 0 for _, ms in entry["times"])


def rms_norm(x: T, eps: float = 1e-5) -> T:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        row = x[tile_m, :].to(torch.float32)
        out[tile_m, :] = (row / torch.sqrt(torch.mean(row * row, dim=-1) + eps)[:, None]).to(out.dtype)
    return out


def test_batched_dims_leave_the_features_so_batch_sizes_share_a_config(data_dir: Any) -> None:
    kernel = tessera.aot_kernel(rms_norm, batched=[[0, None], None], mode="interpret")
    assert kernel.features((torch.zeros(3, 40), 1e-5), {}) == kernel.features((torch.zeros(70, 40), 1e-5), {}) \
        == ("float32", 40)
    x = torch.randn(7, 33)
    expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(kernel(x), expected)


def test_a_key_function_gives_the_features_flattened(data_dir: Any) -> None:
    kernel = tessera.aot_kernel(scale_rows, key=lambda x, factor: (x.shape, x.dtype), mode="interpret")
    assert kernel.features((torch.zeros(3, 5, dtype=torch.float16), 1.0), {}) == (3, 5, 2)


def test_collect_fn_tunes_its_inputs_then_measure_fn_times_them(data_dir: Any, counting_tuner: CountingTuner) -> None:
    kernel = tessera.aot_kernel(scale_rows, mode="interpret",
                                collect_fn=lambda: [(torch.randn(2, 8), 1.0), (torch.randn(9, 8), 1.0)],
                                measure_fn=lambda: [(torch.randn(4, 8), 1.0)])
    with settings.override(aot_mode="collect"):
        x = torch.randn(3, 8)
        torch.testing.assert_close(kernel(x, 2.0), x * 2.0)
        kernel(x, 2.0)
    assert counting_tuner.tuned == [(2, 8), (9, 8)]  # the inputs of collect_fn, once; not the calls
    features = [tuple(e["features"]) for e in _recorded(data_dir)]
    assert features == [("float32", 2, 8), ("float32", 9, 8), ("float32", 4, 8)]


def test_a_damaged_data_file_is_ignored_with_a_warning(data_dir: Any, capsys: Any) -> None:
    kernel = tessera.aot_kernel(scale_rows, mode="interpret")
    path = kernel.records(torch.device("cpu")).path
    kernel._records.clear()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("{not json")
    x = torch.randn(4, 4)
    torch.testing.assert_close(kernel(x, 2.0), x * 2.0)
    assert "damaged AOT data" in capsys.readouterr().out
    assert AOTRecords.read(path, "scale_rows").entries == []


def test_an_unknown_aot_mode_is_refused(data_dir: Any) -> None:
    kernel = tessera.aot_kernel(scale_rows, mode="interpret")
    with settings.override(aot_mode="train"), pytest.raises(exc.ConfigError, match="TESSERA_AOT_MODE"):
        kernel(torch.randn(2, 2), 1.0)


def test_do_bench_generic_returns_each_statistic() -> None:
    work = lambda: torch.ones(64).sum()  # noqa: E731
    assert isinstance(do_bench_generic(work, warmup=1, rep=2), float)
    low, high = do_bench_generic(work, warmup=1, rep=2, quantiles=[0.2, 0.8])
    assert 0 < low <= high
    assert len(do_bench_generic(work, return_mode="all", fixed_repetitions=3)) == 3
    with pytest.raises(ValueError, match="return_mode"):
        do_bench_generic(work, return_mode="p50")
