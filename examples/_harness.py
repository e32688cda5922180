"""Plumbing shared by the examples: pick a device, compare with PyTorch, time a call.

Every example module builds one or more `Example` records in `EXAMPLES`; `python -m
examples.<name>` runs them with `run_examples`, and `python -m examples.gallery` runs them all.

    >>> EXAMPLE = Example("add", run=add, reference=reference, make_inputs=make_inputs,
    ...                   sizes={"cpu": {"m": 256, "n": 512}, "cuda": {"m": 4096, "n": 4096}})
    >>> EXAMPLE.check("cpu", torch.float32, m=7, n=13)   # max abs error, raises if wrong
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

# (atol, rtol) per dtype: fp32 leaves room for reassociated reductions; the low-precision
# entries are about two units in the last place of the output dtype.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}

# Examples whose kernels use dot products: fp32 dots may run as tf32 on the GPU.
DOT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (5e-3, 5e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (3e-2, 3e-2),
}

DTYPES_BY_NAME: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def best_device() -> str:
    """The device examples run on by default: CUDA when present, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flatten(item)]
    raise TypeError(f"expected a tensor or a sequence of tensors, got {type(value).__name__}")


def max_error(actual: Any, expected: Any) -> float:
    """Largest absolute difference over matching tensors (nan where both are nan counts as 0)."""
    worst = 0.0
    for got, want in zip(_flatten(actual), _flatten(expected), strict=True):
        if got.shape != want.shape:
            return float("inf")
        got64, want64 = got.detach().double().cpu(), want.detach().double().cpu()
        both_nan = got64.isnan() & want64.isnan()
        diff = torch.where(both_nan, 0.0, (got64 - want64).abs())
        if diff.numel():
            worst = max(worst, float(torch.nan_to_num(diff, nan=float("inf")).max()))
    return worst


class Mismatch(AssertionError):
    """A kernel's output disagrees with PyTorch; `max_error` is inf for a shape or dtype mismatch."""

    def __init__(self, message: str, max_error: float = float("inf")) -> None:
        super().__init__(message)
        self.max_error = max_error


def assert_close(actual: Any, expected: Any, tolerance: tuple[float, float], name: str) -> float:
    """Check `actual` against `expected` elementwise (|a - e| <= atol + rtol * |e|); return max error.

    Raises `Mismatch` naming the first output that differs in shape, dtype or value.
    """
    atol, rtol = tolerance
    got_list, want_list = _flatten(actual), _flatten(expected)
    if len(got_list) != len(want_list):
        raise Mismatch(f"{name}: {len(got_list)} outputs, expected {len(want_list)}")
    for position, (got, want) in enumerate(zip(got_list, want_list)):
        if got.shape != want.shape:
            shapes = f"{tuple(got.shape)}, expected {tuple(want.shape)}"
            raise Mismatch(f"{name}: output {position} has shape {shapes}")
        if got.dtype != want.dtype:
            raise Mismatch(f"{name}: output {position} has dtype {got.dtype}, expected {want.dtype}")
        got64, want64 = got.detach().double().cpu(), want.detach().double().cpu()
        if not torch.allclose(got64, want64, atol=atol, rtol=rtol, equal_nan=True):
            error = max_error(got, want)
            raise Mismatch(
                f"{name}: output {position} differs from PyTorch by up to {error:.3g} "
                f"(atol={atol}, rtol={rtol})",
                error,
            )
    return max_error(actual, expected)


def synchronize(device: str) -> None:
    """Wait for queued GPU work so host timers measure it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_ms(
    run: Callable[..., Any],
    inputs: Sequence[Any],
    device: str,
    repeat: int | None = None,
    warmup: bool = True,
) -> float:
    """Median wall time of `run(*inputs)` in milliseconds, after one untimed call (which compiles)."""
    if repeat is None:
        repeat = 20 if torch.device(device).type == "cuda" else 3
    if warmup:
        run(*inputs)
        synchronize(device)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(*inputs)
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


@dataclass(frozen=True)
class Example:
    """One gallery entry: a kernel entry point and what it takes to check and time it.

    `make_inputs(**sizes, dtype=..., device=...)` returns the positional arguments of both
    `run` (the kernel or its host wrapper) and `reference` (plain PyTorch). `sizes` maps a
    device type ("cpu", "cuda") to the keyword sizes the gallery uses there.
    """

    name: str
    run: Callable[..., Any]
    reference: Callable[..., Any]
    make_inputs: Callable[..., tuple[Any, ...]]
    sizes: dict[str, dict[str, Any]]
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=DEFAULT_TOLERANCES.copy)
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)

    def gallery_sizes(self, device: str) -> dict[str, Any]:
        """The moderate, realistic sizes used by the gallery on this device."""
        return self.sizes[torch.device(device).type]

    def inputs(self, device: str, dtype: torch.dtype, **sizes: Any) -> tuple[Any, ...]:
        """Fresh, seeded inputs at `sizes` (the gallery's sizes when none are given)."""
        torch.manual_seed(0)
        return self.make_inputs(**(sizes or self.gallery_sizes(device)), dtype=dtype, device=device)

    def check(self, device: str = "cpu", dtype: torch.dtype = torch.float32, **sizes: Any) -> float:
        """Run the kernel and the reference on the same inputs; return the max abs error.

        Raises `Mismatch` (an AssertionError) when they differ by more than this example's tolerance.
        """
        inputs = self.inputs(device, dtype, **sizes)
        expected = self.reference(*inputs)
        actual = self.run(*inputs)
        return assert_close(actual, expected, self.tolerances[dtype], self.name)


def run_examples(examples: Sequence[Example], argv: Sequence[str] | None = None) -> None:
    """Command line of `python -m examples.<name>`: check each example at the gallery sizes on the
    chosen device and dtype, and print one line per example (raises `Mismatch` if one is wrong)."""
    parser = argparse.ArgumentParser(description="Check Tessera examples against PyTorch.")
    parser.add_argument("--device", default=best_device(), help="cpu or cuda (default: best available)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES_BY_NAME))
    args = parser.parse_args(argv)
    dtype = DTYPES_BY_NAME[args.dtype]
    for example in examples:
        error = example.check(args.device, dtype)
        ms = time_ms(example.run, example.inputs(args.device, dtype), args.device, warmup=False)
        sizes = ", ".join(f"{key}={value}" for key, value in example.gallery_sizes(args.device).items())
        print(f"{example.name}: ok on {args.device} {args.dtype} ({sizes}); max err {error:.3g}, {ms:.2f} ms")
