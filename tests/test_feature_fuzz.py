"""A few seeds of every probe of benchmarks/feature_fuzz.py: eager and interpret agree with PyTorch.

The fuzz draws small kernels over recently added features (see its docstring); here each probe
runs on fixed seeds, so a regression in any of them fails with the draw that shows it. Longer
runs: `python benchmarks/feature_fuzz.py --seeds 200`.
"""
from __future__ import annotations

import pytest

from benchmark_modules import load_benchmark

feature_fuzz = load_benchmark("feature_fuzz")

SEEDS = range(3)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("probe", sorted(feature_fuzz.PROBES))
def test_feature_probe_agrees_with_torch_in_every_mode(probe: str, seed: int) -> None:
    findings = feature_fuzz.run_probe(probe, seed, ("eager", "interpret"))
    assert not findings, "\n".join(f"[{f.kind}] {f.detail}" for f in findings)
