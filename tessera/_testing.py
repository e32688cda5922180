"""Test helpers at the module path Helion's examples import them from (`helion._testing`).

A Helion example ports by renaming `helion` to `tessera` in its imports; these names keep
their meaning: `DEVICE` (the GPU if there is one, else the CPU), `HALF_DTYPE`,
`LONG_INT_TYPE`, `run_example` (check kernels against a reference) and `do_bench`.

>>> from tessera._testing import DEVICE, run_example
>>> run_example(lambda x: x + 1, lambda x: 1 + x, (torch.ones(3),))  # doctest: +SKIP
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
HALF_DTYPE = torch.bfloat16
LONG_INT_TYPE = torch.int64


def _as_tensors(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _as_tensors(item)]
    return []


def _clone(value: Any) -> Any:
    # each implementation gets its own copy: a kernel that writes its inputs must not feed the next one
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone()
        return copied.requires_grad_(value.requires_grad) if value.is_leaf else copied
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(item) for item in value)
    return value


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
        for got, want in zip(actual, expected):
            _assert_close(name, got, want, rtol, atol, max_mismatch_pct, max_mismatched_abs_diff)
        if bwd:
            _check_gradients(name, output, own_args, expected_output, reference_args, rtol, atol)
    return {}


def _check_gradients(name: str, output: Any, own_args: tuple, expected_output: Any, reference_args: tuple,
                     rtol: float, atol: float) -> None:
    grad_output = torch.randn_like(_as_tensors(expected_output)[0])
    _as_tensors(expected_output)[0].backward(grad_output, retain_graph=True)
    _as_tensors(output)[0].backward(grad_output, retain_graph=True)
    wanted = [t.grad for t in _as_tensors(reference_args) if t.requires_grad]
    got = [t.grad for t in _as_tensors(own_args) if t.requires_grad]
    assert len(got) == len(wanted) and wanted, f"{name}: no gradients to compare"
    for index, (actual, want) in enumerate(zip(got, wanted)):
        assert (actual is None) == (want is None), f"{name}: gradient {index} exists in one run only"
        if want is not None:
            _assert_close(f"{name} gradient {index}", actual, want, rtol, atol, None, None)


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
