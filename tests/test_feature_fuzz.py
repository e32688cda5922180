"""A few seeds of every probe of benchmarks/feature_fuzz.py: eager and interpret agree with PyTorch.

The fuzz draws small kernels over recently added features (see its docstring); here each probe
runs on fixed seeds, so a regression in any of them fails with the draw that shows it. Longer
runs: `python benchmarks/feature_fuzz.py --seeds 200`.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "feature_fuzz.py"
_SPEC = importlib.util.spec_from_file_location("feature_fuzz", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
feature_fuzz = importlib.util.module_from_spec(_SPEC)
sys.modules["feature_fuzz"] = feature_fuzz  # dataclasses look their module up by name
_SPEC.loader.exec_module(feature_fuzz)

SEEDS = range(3)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("probe", sorted(feature_fuzz.PROBES))
def test_feature_probe_agrees_with_torch_in_every_mode(probe: str, seed: int) -> None:
    findings = feature_fuzz.run_probe(probe, seed, ("eager", "interpret"))
    assert not findings, "\n".join(f"[{f.kind}] {f.detail}" for f in findings)
