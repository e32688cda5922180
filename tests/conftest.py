"""Test options: `--device cuda` (or TESSERA_TEST_DEVICE=cuda) runs the suite on the GPU."""
from __future__ import annotations

import os

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default=os.environ.get("TESSERA_TEST_DEVICE", "cpu"),
                     help="device for kernel tests: cpu (default) or cuda")


def pytest_configure(config: pytest.Config) -> None:
    # Tests check results, not tuning: calls run the heuristic Config instead of tuning first
    # (tests/test_autotune.py drives the tuner explicitly).
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    # A fresh cache per test session: tuned configs from earlier runs must not leak in.
    if "TESSERA_CACHE_DIR" not in os.environ:
        import tempfile
        os.environ["TESSERA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessera-test-cache-")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    name = request.config.getoption("--device")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA requested but not available")
    return torch.device(name)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
