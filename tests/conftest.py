"""Test options: `--device cuda` (or TESSERA_TEST_DEVICE=cuda) runs the suite on the GPU."""
from __future__ import annotations

import os
import sys
from typing import Any

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


_TRITON_MODE_REPORTED = False


@pytest.fixture(autouse=True)
def _triton_stays_compiled(request: pytest.FixtureRequest) -> Any:
    """On the GPU a test process runs compiled kernels: a test that imports Triton with its
    interpreter breaks every later test in its process, so it fails itself, by name."""
    yield
    global _TRITON_MODE_REPORTED
    if _TRITON_MODE_REPORTED or request.config.getoption("--device") != "cuda":
        return
    standard = sys.modules.get("triton.language.standard")
    if standard is not None and type(standard.cdiv).__name__ == "InterpretedFunction":
        _TRITON_MODE_REPORTED = True
        pytest.fail("this test imported Triton with its interpreter in a GPU test process")
