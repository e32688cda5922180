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
    # (tests/test_autotune_*.py drive the tuner explicitly).
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


@pytest.fixture(autouse=True, scope="session")
def _interpreter_stays_out_of_gpu_runs(request: pytest.FixtureRequest) -> Any:
    """Triton picks its interpreter once per process, when it is imported: in a GPU run, a test
    that would run a kernel interpreted (CPU tensors) is skipped rather than switching its whole
    worker process to the interpreter; the CPU suite runs it."""
    if request.config.getoption("--device") != "cuda":
        yield
        return
    from tessera.backends.triton import modules, worker_support
    ensure, import_triton = modules._ensure_triton, worker_support.import_triton

    def refuse(interpret: bool) -> None:
        if interpret:
            pytest.skip("runs a kernel in Triton's interpreter: the CPU suite covers it")

    def guarded_ensure(interpret: bool) -> None:
        refuse(interpret)
        ensure(interpret)

    def guarded_import(interpret: bool) -> None:
        refuse(interpret)
        import_triton(interpret)

    modules._ensure_triton = guarded_ensure
    worker_support.import_triton = guarded_import
    try:
        yield
    finally:
        modules._ensure_triton, worker_support.import_triton = ensure, import_triton


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


@pytest.fixture
def private_cache(tmp_path: Any) -> Any:
    """A cache directory of the test's own: what one autotuning test stores, no other finds."""
    from tessera import settings  # imported here: the environment is set up first (pytest_configure)
    with settings.override(cache_dir=str(tmp_path / "cache")):
        yield


@pytest.fixture
def interpreter_workers(device: torch.device) -> None:
    """Tuning CPU tensors runs candidates in Triton's interpreter in worker processes, which a
    GPU test process (Triton imported compiled) cannot start: a CPU-suite test."""
    if device.type == "cuda":
        pytest.skip("tunes in Triton's interpreter: the CPU suite covers it")
