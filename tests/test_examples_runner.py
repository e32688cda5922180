"""The Helion examples runner's timed mode (benchmarks/helion_examples.py, compiled mode).

Its torch.compile baselines have a budget per example: dynamo unrolls a baseline's Python loop,
and jagged_layer_norm's reference (a loop over up to 16384 sequences) took minutes to compile
over the example's eight sizes, so the example timed out on the H100 although its own kernels
compile in seconds. Past the budget, later rows say the baseline was skipped.
"""
from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from benchmarks import helion_examples


def _timed_rows(monkeypatch: pytest.MonkeyPatch, calls: int, compile_seconds: float) -> list[dict[str, Any]]:
    def slow_compile(function: Any) -> Any:
        time.sleep(compile_seconds)  # what compiling the baseline costs
        return function

    monkeypatch.setattr(torch, "compile", slow_compile)
    monkeypatch.setattr(helion_examples, "TORCH_COMPILE_BUDGET", 0.3)
    monkeypatch.setattr(helion_examples, "_timings", [])
    checked = []
    # (Triton is never imported here: a CPU test process must import it in interpreter mode)
    run_example = helion_examples._timed_run_example(lambda *args, **kwargs: checked.append(args), "/dev/null",
                                                     do_bench=lambda function: (function(), 1.0)[1])
    for size in range(1, calls + 1):
        run_example(lambda x: x + 1, lambda x: x + 1, (torch.ones(size),))
    assert len(checked) == calls  # every size is still checked
    return helion_examples._timings


def test_torch_compile_baselines_stop_after_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _timed_rows(monkeypatch, calls=3, compile_seconds=0.35)
    assert rows[0]["torch.compile"] == 1.0
    assert all(str(row["torch.compile"]).startswith("skipped") for row in rows[1:])
    assert all(row["kernels"] == {"tessera": 1.0} and row["baselines"] == {"torch": 1.0} for row in rows)


def test_cheap_torch_compile_baselines_are_all_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _timed_rows(monkeypatch, calls=3, compile_seconds=0.0)
    assert [row["torch.compile"] for row in rows] == [1.0, 1.0, 1.0]
