"""Where Helion's unit tests run: the mode and backend queries and the skip / xfail decorators
that `helion._testing` offers (re-exported by `tessera._testing`), with Tessera's meanings.

Decorators that would ask the GPU decide when the test runs (`skipIfFn`), so collecting tests
never initializes CUDA; those for hardware or backends Tessera lacks (ROCm, XPU, MTIA, CuTe,
TileIR, Metal) always skip.

>>> @skipIfRefEager("reads the generated code")                     # doctest: +SKIP
... def test_codegen(self): ...
"""
from __future__ import annotations

import contextlib
import functools
import re
import unittest
from typing import Any, Callable, Iterator, Sequence

import torch

from tessera import settings

Decorator = Callable[[Any], Any]


# ---- modes and backends ---------------------------------------------------------------------

def in_eager_mode() -> bool:
    """True when kernels run as plain PyTorch (`TESSERA_MODE=eager`): Helion's ref-eager mode."""
    return settings.get("mode") == "eager"


def _get_backend() -> str:
    """The backend of kernels that name none (`TESSERA_BACKEND`, default triton)."""
    return settings.get("backend") or "triton"


def matchesBackends(backends: Sequence[str]) -> bool:
    """Whether the current backend is one of `backends`."""
    return _get_backend() in backends


def is_cuda() -> bool:
    """True when kernels run through Triton on an NVIDIA GPU."""
    return _get_backend() == "triton" and torch.cuda.is_available() and torch.version.hip is None


def get_test_float32_matmul_precision() -> str:
    """The `torch.set_float32_matmul_precision` the references of tests use."""
    return "high"


@contextlib.contextmanager
def float32_matmul_precision(precision: str) -> Iterator[None]:
    """Run the block under `torch.set_float32_matmul_precision(precision)`, then restore it."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def get_test_dot_precision() -> str:
    """The `dot_precision` tests ask for: tf32 where the GPU has it (NVIDIA), else ieee."""
    return "ieee" if torch.version.hip is not None else "tf32"


# ---- skip and xfail decorators ---------------------------------------------------------------

def skipIfFn(condition: Callable[[], bool], reason: str) -> Decorator:
    """Skip a test (or every test of a class) when `condition()` holds at run time, not at
    decoration: asking about the GPU while pytest collects would initialize CUDA."""
    if not isinstance(reason, str):
        raise TypeError(f"skip decorators take a reason string, got {type(reason).__name__}: "
                        "write @decorator('why'), with the parentheses")

    def decorate(item: Any) -> Any:
        if isinstance(item, type):
            original_set_up = item.setUp

            @functools.wraps(original_set_up)
            def set_up(self: unittest.TestCase, *args: Any, **kwargs: Any) -> Any:
                if condition():
                    self.skipTest(reason)
                return original_set_up(self, *args, **kwargs)

            item.setUp = set_up
            return item

        @functools.wraps(item)
        def test(*args: Any, **kwargs: Any) -> Any:
            if condition():
                raise unittest.SkipTest(reason)
            return item(*args, **kwargs)

        return test

    return decorate


def xfailIfFn(condition: Callable[[], bool], reason: str) -> Decorator:
    """Mark a test (or every test of a class) as an expected failure when `condition()` holds
    (decided when the module is imported, as `unittest.expectedFailure` needs)."""

    def decorate(item: Any) -> Any:
        if not condition():
            return item
        if isinstance(item, type):
            for name, value in list(vars(item).items()):
                if name.startswith("test") and callable(value):
                    setattr(item, name, unittest.expectedFailure(value))
            return item
        marked = unittest.expectedFailure(item)
        marked.__doc__ = f"{item.__doc__ or ''}\n[expected failure] {reason}".strip()
        return marked

    return decorate


def _never() -> bool:
    return False


def skipIfRefEager(reason: str) -> Decorator:
    """Skip in eager mode (tests that read generated code or compiled-only behaviour)."""
    return skipIfFn(in_eager_mode, reason)


def skipIfNormalMode(reason: str) -> Decorator:
    """Skip unless in eager mode."""
    return skipIfFn(lambda: not in_eager_mode(), reason)


def skipIfRocm(reason: str) -> Decorator:
    return unittest.skipIf(torch.version.hip is not None, reason)


def skipIfXPU(reason: str) -> Decorator:
    return skipIfFn(lambda: hasattr(torch, "xpu") and torch.xpu.is_available(), reason)


def skipIfMTIA(reason: str) -> Decorator:
    return skipIfFn(lambda: hasattr(torch, "mtia") and torch.mtia.is_available(), reason)


def skipIfPallas(reason: str) -> Decorator:
    return skipIfFn(lambda: _get_backend() == "pallas", reason)


def skipIfNotTriton(reason: str) -> Decorator:
    return skipIfFn(lambda: _get_backend() != "triton", reason)


def skipUnlessPallas(reason: str) -> Decorator:
    return skipIfFn(lambda: _get_backend() != "pallas", reason)


def _pallas_interpret() -> bool:
    # Tessera runs Pallas in JAX's interpreter whenever no TPU is attached, i.e. always here
    return _get_backend() == "pallas"


def skipIfPallasInterpret(reason: str) -> Decorator:
    return skipIfFn(_pallas_interpret, reason)


def xfailIfPallas(reason: str) -> Decorator:
    return xfailIfFn(lambda: _get_backend() == "pallas", reason)


def xfailIfPallasInterpret(reason: str) -> Decorator:
    return xfailIfFn(_pallas_interpret, reason)


def xfailIfPallasTpu(reason: str) -> Decorator:
    """Tessera has no TPU runs: never an expected failure."""
    return xfailIfFn(_never, reason)


def skipIfTileIR(reason: str) -> Decorator:
    """Tessera has no TileIR backend: never skips."""
    return skipIfFn(lambda: _get_backend() == "tileir", reason)


def skipIfCute(reason: str) -> Decorator:
    """Tessera has no CuTe backend: never skips."""
    return skipIfFn(lambda: _get_backend() == "cute", reason)


def skipIfMetal(reason: str) -> Decorator:
    return skipIfFn(lambda: _get_backend() == "metal", reason)


def xfailIfCute(reason: str) -> Decorator:
    """Tessera has no CuTe backend: never an expected failure."""
    return xfailIfFn(lambda: _get_backend() == "cute", reason)


def _absent(feature: str) -> Callable[[str], Decorator]:
    def decorator(reason: str) -> Decorator:
        return skipIfFn(lambda: True, f"{reason} ({feature})")
    decorator.__doc__ = f"Always skips: {feature}."
    return decorator


skipUnlessCuteAvailable = _absent("Tessera has no CuTe backend")
skipUnlessTileIR = _absent("Tessera has no TileIR backend")


def _amd_gpu_arch() -> str:
    if torch.version.hip is None or not torch.cuda.is_available():
        return ""
    return str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "gcnArchName", ""))


def skipUnlessAMDCDNA(reason: str) -> Decorator:
    """Skip unless on an AMD CDNA GPU (MI200/MI300: gfx90a, gfx94x, gfx95x)."""
    return skipIfFn(lambda: not _amd_gpu_arch().startswith(("gfx90a", "gfx94", "gfx95")), reason)


def skipUnlessMultiXCD(reason: str) -> Decorator:
    """Skip unless on an AMD GPU made of several XCDs (MI300: gfx94x, gfx95x)."""
    return skipIfFn(lambda: not _amd_gpu_arch().startswith(("gfx94", "gfx95")), reason)


def skipIfA10G(reason: str) -> Decorator:
    return skipIfFn(lambda: torch.cuda.is_available() and "A10G" in torch.cuda.get_device_name(), reason)


def skipIfPyTorchBaseVerLessThan(min_version: str) -> Decorator:
    """Skip when torch's release (pre-release and local suffixes ignored) is older than `min_version`."""
    def release(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])
    older = release(torch.__version__)[:len(release(min_version))] < release(min_version)
    return unittest.skipIf(older, f"needs PyTorch {min_version} or newer")


def skipIfNotCUDA() -> Decorator:
    return skipIfFn(lambda: not is_cuda(), "needs Triton on an NVIDIA GPU")


def skipUnlessTensorDescriptor(reason: str) -> Decorator:
    """Tensor descriptors (TMA) need an NVIDIA GPU of compute capability 9.0 or newer."""
    return skipIfFn(lambda: not is_cuda() or torch.cuda.get_device_capability() < (9, 0), reason)


def skipIfCudaCapabilityLessThan(minimum: tuple[int, int], *, reason: str | None = None) -> Decorator:
    """Skip on an NVIDIA GPU older than `minimum`; elsewhere the test runs."""
    return skipIfFn(lambda: is_cuda() and torch.cuda.get_device_capability() < tuple(minimum),
                    reason or f"needs CUDA capability >= {minimum[0]}.{minimum[1]}")


def _shared_memory_per_block() -> int | None:
    if not torch.cuda.is_available():
        return None
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    optin = getattr(properties, "shared_memory_per_block_optin", None)
    return int(optin if optin is not None else properties.shared_memory_per_block)


def skipIfSharedMemoryLessThan(required: int, *, reason: str | None = None) -> Decorator:
    def too_small() -> bool:
        available = _shared_memory_per_block()
        return available is not None and available < required

    return skipIfFn(too_small, reason or f"needs {required} bytes of shared memory per block")


def skipIfLowVRAM(reason: str = "needs a GPU with much memory", *, required_bytes: int | None = None) -> Decorator:
    """Skip on a GPU with less than `required_bytes` (default 30 GiB) total or free memory."""
    threshold = 30 * 1024**3 if required_bytes is None else required_bytes

    def low() -> bool:
        if not torch.cuda.is_available():
            return False
        free, total = torch.cuda.mem_get_info(torch.cuda.current_device())
        return min(free, total) < threshold

    return skipIfFn(low, reason)


def onlyBackends(backends: Sequence[str]) -> Decorator:
    """Skip a whole test class unless the current backend is one of `backends`."""

    def decorate(cls: type) -> type:
        if matchesBackends(backends):
            return cls
        return unittest.skip(f"not run for backend {_get_backend()}")(cls)

    return decorate


def skipUnlessBackends(backends: Sequence[str]) -> Decorator:
    """Skip a test unless the current backend is one of `backends`."""
    return unittest.skipUnless(matchesBackends(backends), f"not run for backend {_get_backend()}")
