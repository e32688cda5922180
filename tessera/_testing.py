"""Test helpers at the module path Helion's examples import them from (`helion._testing`).

A Helion example ports by renaming `helion` to `tessera` in its imports; these names keep
their meaning: `DEVICE` (the GPU if there is one, else the CPU), `HALF_DTYPE`,
`LONG_INT_TYPE`, `run_example` (check kernels against a reference) and `do_bench`; and the
harness of Helion's unit tests (`code_and_output`, `TestCase`, the skip decorators...), defined
in `tessera/_test_case.py` and `tessera/_test_skips.py`.

>>> from tessera._testing import DEVICE, run_example
>>> run_example(lambda x: x + 1, lambda x: 1 + x, (torch.ones(3),))  # doctest: +SKIP
"""
from __future__ import annotations

import functools
import statistics
import sys
import time
from typing import Any, Callable

import torch

from tessera._test_case import (  # noqa: F401  (Helion's unit-test harness, re-exported)
    EXAMPLES_DIR, PROJECT_ROOT, AssertExpectedJournal, CosSimilarity, assert_helion_compilation,
    assert_ref_eager_mode, RefEagerTestBase, RefEagerTestDisabled, TestCase, assert_close_with_mismatch_tolerance,
    check_example, code_and_output, import_path, output_only)
from tessera._test_skips import (  # noqa: F401  (its skip decorators and mode queries, re-exported)
    _get_backend, float32_matmul_precision, get_test_dot_precision, get_test_float32_matmul_precision, is_cuda,
    matchesBackends, onlyBackends, skipIfA10G, skipIfCudaCapabilityLessThan, skipIfCute, skipIfFn, skipIfLowVRAM,
    skipIfMetal, skipIfMTIA, skipIfNormalMode, skipIfNotCUDA, skipIfNotTriton, skipIfPallas, skipIfPallasInterpret,
    skipIfPyTorchBaseVerLessThan, skipIfRefEager, skipIfRocm, skipIfSharedMemoryLessThan, skipIfTileIR, skipIfXPU,
    skipUnlessAMDCDNA, skipUnlessBackends, skipUnlessCuteAvailable, skipUnlessMultiXCD, skipUnlessPallas,
    skipUnlessTensorDescriptor, skipUnlessTileIR, xfailIfCute, xfailIfFn, xfailIfPallas, xfailIfPallasInterpret,
    xfailIfPallasTpu)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _synchronize_without_accelerator(synchronize: Callable[..., None]) -> Callable[..., None]:
    """`torch.accelerator.synchronize()` for tests that run on `DEVICE` = the CPU: with no
    accelerator there is no queued device work to wait for (CPU ops finish before they return),
    so the call returns instead of raising; a call naming a device is torch's own."""
    @functools.wraps(synchronize)
    def wrapper(device: Any = None) -> None:
        if device is None and not torch.accelerator.is_available():
            return None
        return synchronize(device)
    wrapper.__wrapped_by_tessera__ = True  # type: ignore[attr-defined]
    return wrapper


# Helion's tests wait for device prints and timings with torch.accelerator.synchronize(), which a
# CPU-only torch refuses; their CPU runs (interpret and eager modes) have nothing to wait for
if not torch.accelerator.is_available() and not hasattr(torch.accelerator.synchronize, "__wrapped_by_tessera__"):
    torch.accelerator.synchronize = _synchronize_without_accelerator(torch.accelerator.synchronize)
HALF_DTYPE = torch.float16  # as in Helion (whose TPU runs take bfloat16; Tessera has none)
LONG_INT_TYPE = torch.int64


def _as_tensors(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _as_tensors(item)]
    return []


def _map_tensors(value: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`value` with `function` applied to each tensor in it (nested tuples and lists kept)."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(item, function) for item in value)
    return value


def _clone(value: Any) -> Any:
    # each implementation gets its own copy: a kernel that writes its inputs must not feed the next one
    def copy(tensor: torch.Tensor) -> torch.Tensor:
        copied = tensor.detach().clone()
        return copied.requires_grad_(tensor.requires_grad) if tensor.is_leaf else copied
    return _map_tensors(value, copy)


def _assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float,
                  max_mismatch_pct: float | None, max_mismatched_abs_diff: float | None) -> None:
    actual, expected = actual.detach().float().cpu(), expected.detach().float().cpu()
    if max_mismatch_pct is None:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
        return
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    bad = ~torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    fraction = bad.float().mean().item() if bad.numel() else 0.0
    assert fraction <= max_mismatch_pct, f"{name}: {fraction:.2%} of elements mismatch (> {max_mismatch_pct:.2%})"
    if max_mismatched_abs_diff is not None and bad.any():
        worst = (actual - expected).abs()[bad].max().item()
        assert worst <= max_mismatched_abs_diff, f"{name}: mismatched elements differ by up to {worst}"


def run_example(kernel_fn: Callable[..., Any] | dict[str, Callable[..., Any]],
                baseline_fn: Callable[..., Any] | dict[str, Callable[..., Any]],
                args: tuple[Any, ...], kernel_name: str = "tessera", baseline_name: str = "torch",
                rtol: float = 1e-2, atol: float = 1e-1, max_mismatch_pct: float | None = None,
                max_mismatched_abs_diff: float | None = None, bwd: bool = False,
                **_: Any) -> dict[str, float]:
    """Check every kernel (and every further baseline) against the first baseline; raise
    `AssertionError` on a mismatch. With `bwd=True` the gradients are compared too.

    Returns `{}`: timing is left to `do_bench` or `benchmarks/helion_examples.py`.

    >>> run_example(add, torch.add, (x, y))  # doctest: +SKIP
    """
    kernels = kernel_fn if isinstance(kernel_fn, dict) else {kernel_name: kernel_fn}
    baselines = baseline_fn if isinstance(baseline_fn, dict) else {baseline_name: baseline_fn}
    reference_name, reference = next(iter(baselines.items()))
    reference_args = _clone(args)
    expected_output = reference(*reference_args)
    expected = _as_tensors(expected_output)
    candidates = {name: fn for name, fn in {**kernels, **baselines}.items() if name != reference_name}
    for name, fn in candidates.items():
        print(f"Testing {name} correctness...", file=sys.stderr)
        own_args = _clone(args)
        output = fn(*own_args)
        actual = _as_tensors(output)
        assert len(actual) == len(expected), f"{name}: {len(actual)} outputs, the reference gives {len(expected)}"
        _check_outputs(name, actual, expected, rtol, atol, max_mismatch_pct, max_mismatched_abs_diff,
                       lambda: _as_tensors(reference(*_promoted(args))))
        if bwd:
            _check_gradients(name, output, own_args, expected_output, reference_args, reference, rtol, atol)
    return {}


def _check_outputs(name: str, actual: list[torch.Tensor], expected: list[torch.Tensor], rtol: float, atol: float,
                   max_mismatch_pct: float | None, max_mismatched_abs_diff: float | None,
                   exact: Callable[[], list[torch.Tensor]]) -> None:
    """Compare against the reference; a low-precision mismatch is arbitrated by `exact()`, the
    reference evaluated in float64: the kernel passes when it is at least as close to that as the
    reference itself (max and mean error, with a little slack).

    A bf16 reference rounds at other places than the kernel (torch's CPU kernels even accumulate
    in bf16), so at large magnitudes the two differ by more than the tolerance while the kernel is
    the more accurate one. Any other mismatch stays a failure."""
    try:
        for got, want in zip(actual, expected):
            _assert_close(name, got, want, rtol, atol, max_mismatch_pct, max_mismatched_abs_diff)
    except AssertionError:
        if not any(t.dtype in (torch.float16, torch.bfloat16) for t in expected):
            raise
        if not _arbitrated(actual, expected, exact):
            raise
        print(f"{name}: outside rtol/atol of the low-precision reference, but as close as that reference "
              "to its float64 evaluation: accepted", file=sys.stderr)


def _arbitrated(actual: list[torch.Tensor], expected: list[torch.Tensor],
                exact: Callable[[], list[torch.Tensor]]) -> bool:
    try:
        truths = exact()
    except Exception:  # a reference that cannot run in float64 has no arbiter
        return False
    return len(truths) == len(expected) and all(
        _as_close_as(got, want, truth) for got, want, truth in zip(actual, expected, truths))


def _as_close_as(got: torch.Tensor, want: torch.Tensor, truth: torch.Tensor, slack: float = 1.5) -> bool:
    truth = truth.detach().double().cpu()
    kernel_error = (got.detach().double().cpu() - truth).abs()
    reference_error = (want.detach().double().cpu() - truth).abs()
    if kernel_error.shape != truth.shape or not kernel_error.isfinite().all():
        return False
    return bool(kernel_error.max() <= slack * reference_error.max() and
                kernel_error.mean() <= slack * reference_error.mean())


def _promoted(value: Any) -> Any:
    """Arguments in float64 (leaves that required gradients still do)."""
    def promote(tensor: torch.Tensor) -> torch.Tensor:
        if not tensor.is_floating_point():
            return tensor.detach().clone()
        return tensor.detach().double().requires_grad_(tensor.requires_grad)
    return _map_tensors(value, promote)


def _check_gradients(name: str, output: Any, own_args: tuple, expected_output: Any, reference_args: tuple,
                     reference: Callable[..., Any], rtol: float, atol: float) -> None:
    grad_output = torch.randn_like(_as_tensors(expected_output)[0])
    _as_tensors(expected_output)[0].backward(grad_output, retain_graph=True)
    _as_tensors(output)[0].backward(grad_output, retain_graph=True)
    wanted = [t.grad for t in _as_tensors(reference_args) if t.requires_grad]
    got = [t.grad for t in _as_tensors(own_args) if t.requires_grad]
    assert len(got) == len(wanted) and wanted, f"{name}: no gradients to compare"

    @functools.cache  # one float64 backward however many gradients need arbitration
    def exact_gradients() -> list[torch.Tensor]:
        promoted = _promoted(reference_args)
        _as_tensors(reference(*promoted))[0].backward(grad_output.double())
        return [t.grad for t in _as_tensors(promoted) if t.requires_grad]

    for index, (actual, want) in enumerate(zip(got, wanted)):
        assert (actual is None) == (want is None), f"{name}: gradient {index} exists in one run only"
        if want is not None:
            _check_outputs(f"{name} gradient {index}", [actual], [want], rtol, atol, None, None,
                           lambda index=index: [exact_gradients()[index]])


def do_bench(fn: Callable[[], Any], warmup: int = 25, rep: int = 100, return_mode: str = "median",
             **_: Any) -> float:
    """Milliseconds per call of `fn` (median by default): CUDA events on a GPU, a wall clock on CPU.

    >>> do_bench(lambda: torch.ones(8).sum())  # doctest: +SKIP
    """
    cuda = torch.cuda.is_available()
    fn()
    samples: list[float] = []
    deadline = time.perf_counter() + (warmup + rep) / 1e3
    while len(samples) < 5 or time.perf_counter() < deadline:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - began) * 1e3)
        if len(samples) >= 1000:
            break
    reduce = {"median": statistics.median, "mean": statistics.fmean, "min": min, "max": max}
    return float(reduce.get(return_mode, statistics.median)(samples))
