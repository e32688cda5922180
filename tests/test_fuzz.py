"""Fuzzing the variant cache: many calls of one kernel with shapes that keep changing.

Each test calls one gallery kernel (add, softmax, layer_norm_fwd, layer_norm_bwd, matmul) with a
seeded random sequence of inputs: sizes that grow, shrink, drop to 1 or 0, land on primes and on
block boundaries, in every dtype and in contiguous, transposed and sliced layouts; a quarter of the
calls repeat an earlier call's exact layouts in new tensors (the exact-facts memo). Every result is
checked against PyTorch, so a variant reused for inputs it was not compiled for shows up as a
wrong answer. The mode follows the device (interpret on CPU, compiled on CUDA).

`TESSERA_FUZZ_CALLS` sets the number of calls per kernel (default 50), e.g. for a long GPU run:
`TESSERA_FUZZ_CALLS=5000 pytest tests/test_fuzz.py --device cuda`. `benchmarks/fuzz_gpu.py`
runs the same targets (`TARGETS`, `fuzz`) as a standalone script, e.g. under compute-sanitizer.
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
from typing import Any, Callable

import pytest
import torch

import tessera
from examples import add, layer_norm, matmul, softmax
from examples._harness import DEFAULT_TOLERANCES, DOT_TOLERANCES, assert_close

_CALLS = int(os.environ.get("TESSERA_FUZZ_CALLS", "50"))
# Every dtype x layout x whole-row block combination is its own variant: far more than the
# default cap of 64 over a long run. The cap has its own test (test_cache.py).
_MAX_VARIANTS = 1_000_000
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_PRIMES = (2, 3, 5, 7, 13, 31, 37, 61, 127)
# layer_norm_bwd specializes the width (seed 003), so each width is its own variant: the fuzz
# draws from the seed's widths rather than walking, and walks the row count. The interpreter
# stops at 1000 (tests/test_layer_norm_backward.py runs 5632 there).
_NORM_WIDTHS = (64, 200, 1000, 5632)

Inputs = Callable[[torch.dtype], tuple[Any, ...]]


class SizeWalk:
    """A random walk over sizes: grow, shrink, jump to 1, 0, a prime or a block boundary."""

    def __init__(self, rng: random.Random, largest: int, allow_zero: bool = True) -> None:
        self.rng = rng
        self.largest = largest
        self.allow_zero = allow_zero
        self.size = rng.randint(1, 16)

    def step(self) -> int:
        move = self.rng.choice(("grow", "grow", "shrink", "shrink", "one", "zero", "prime", "boundary", "same"))
        if move == "grow":
            self.size = self.size * 2 + self.rng.randint(0, 3)
        elif move == "shrink":
            self.size = self.size // 2
        elif move == "one":
            self.size = 1
        elif move == "zero":
            self.size = 0
        elif move == "prime":
            self.size = self.rng.choice(_PRIMES)
        elif move == "boundary":
            self.size = self.rng.choice((16, 32, 64, 128)) + self.rng.choice((-1, 0, 1))
        self.size = min(self.size, self.largest)
        if self.size == 0 and not self.allow_zero:
            self.size = 1
        return self.size


def _layout(rng: random.Random, tensor: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, column-major, or as a strided view into a larger buffer."""
    choice = rng.choice(("contiguous", "contiguous", "transposed", "sliced"))
    if choice == "transposed" and tensor.dim() == 2:
        return tensor.t().contiguous().t()
    if choice == "sliced" and tensor.dim() >= 1:
        shape = [size + 1 for size in tensor.shape[:-1]] + [2 * tensor.shape[-1] + 1]
        buffer = torch.full(shape, float("nan"), dtype=tensor.dtype, device=tensor.device)
        view = buffer[(slice(1, None),) * (tensor.dim() - 1) + (slice(1, None, 2),)]
        view.copy_(tensor)
        return view
    return tensor


def _same_layout(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes, strides, storage offset (so the same pointer alignment) and
    values, in new memory: a repeat call whose exact facts match an earlier one."""
    elements = tensor.untyped_storage().nbytes() // tensor.element_size()
    buffer = torch.full((elements,), float("nan"), dtype=tensor.dtype, device=tensor.device)
    copy = buffer.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
    copy.copy_(tensor.detach())  # a leaf, like the original (the autograd reference needs one)
    return copy


def _describe(inputs: tuple[Any, ...]) -> str:
    return ", ".join(f"{tuple(t.shape)}/{t.stride()}/{t.dtype}" if isinstance(t, torch.Tensor) else repr(t)
                     for t in inputs)


def largest_size(device: torch.device) -> int:
    """The largest size a walk reaches: the interpreter is slow per element; the GPU takes real sizes."""
    return 2048 if device.type == "cuda" else 130


@dataclasses.dataclass(frozen=True)
class FuzzTarget:
    """One kernel under fuzz.

    `make_kernel()` returns a fresh kernel (its own variant cache, no cap on variants);
    `make_inputs(rng, device, largest)` returns a function `dtype -> inputs` whose sizes walk with
    `rng`, each at most `largest`; `reference(*inputs)` is PyTorch's answer.
    """

    name: str
    make_kernel: Callable[[], tessera.Kernel]
    reference: Callable[..., Any]
    make_inputs: Callable[[random.Random, torch.device, int], Inputs]
    tolerances: dict[torch.dtype, tuple[float, float]]


@dataclasses.dataclass
class FuzzReport:
    """What one fuzz run did: calls made, variants the kernel compiled, and each failing call."""

    name: str
    calls: int = 0
    variants: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)


def fuzz(target: FuzzTarget, device: torch.device, calls: int, seed: int = 0, largest: int | None = None,
         max_failures: int = 1, deadline: float | None = None) -> FuzzReport:
    """Call a fresh `target` kernel `calls` times on seeded random inputs and check each result.

    Stops early after `max_failures` failing calls (a wrong answer or an error), or before a call
    once `time.monotonic()` passes `deadline`. The same target, seed and `largest` give the same
    sequence of inputs.
    """
    rng = random.Random(f"{target.name}/{seed}")
    torch.manual_seed(rng.getrandbits(32))
    kernel = target.make_kernel()
    make = target.make_inputs(rng, device, largest or largest_size(device))
    report = FuzzReport(target.name)
    recent: list[tuple[torch.dtype, tuple[Any, ...]]] = []
    for call in range(calls):
        if deadline is not None and time.monotonic() > deadline:
            break
        if recent and rng.random() < 0.25:  # an earlier call's exact layouts, in new tensors
            dtype, earlier = rng.choice(recent)
            inputs = tuple(_same_layout(t) if isinstance(t, torch.Tensor) else t for t in earlier)
        else:
            dtype = rng.choice(_DTYPES)
            inputs = tuple(_layout(rng, t) if isinstance(t, torch.Tensor) else t for t in make(dtype))
            recent = (recent + [(dtype, inputs)])[-8:]
        report.calls += 1
        try:
            assert_close(kernel(*inputs), target.reference(*inputs), target.tolerances[dtype], target.name)
        except Exception as error:  # a wrong answer or a crash: both are findings
            report.failures.append(f"call {call} (seed {seed}) with {_describe(inputs)}: "
                                   f"{type(error).__name__}: {error}")
            if len(report.failures) >= max_failures:
                break
    report.variants = kernel.cache_info().variants
    return report


def _add_inputs(rng: random.Random, device: torch.device, largest: int) -> Inputs:
    rows, cols = SizeWalk(rng, largest // 2), SizeWalk(rng, largest)

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        m, n = rows.step(), cols.step()
        y_shape = (n,) if rng.random() < 0.3 else (m, n)  # broadcast a row now and then
        return torch.randn(m, n, device=device).to(dtype), torch.randn(y_shape, device=device).to(dtype)

    return make


def _softmax_inputs(rng: random.Random, device: torch.device, largest: int) -> Inputs:
    rows, cols = SizeWalk(rng, largest // 2), SizeWalk(rng, largest, allow_zero=False)

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        return ((4 * torch.randn(rows.step(), cols.step(), device=device)).to(dtype),)

    return make


def _layer_norm_fwd_inputs(rng: random.Random, device: torch.device, largest: int) -> Inputs:
    rows, cols = SizeWalk(rng, largest // 2), SizeWalk(rng, largest, allow_zero=False)

    def make(dtype: torch.dtype) -> tuple[Any, ...]:
        m, n = rows.step(), cols.step()
        x = (3 + 2 * torch.randn(m, n, device=device)).to(dtype)
        weight = (1 + 0.1 * torch.randn(n, device=device)).to(dtype)
        bias = (0.1 * torch.randn(n, device=device)).to(dtype)
        return x, weight, bias, layer_norm.EPS

    return make


def _layer_norm_bwd_inputs(rng: random.Random, device: torch.device, largest: int) -> Inputs:
    rows = SizeWalk(rng, largest // 2)
    widths = _NORM_WIDTHS if device.type == "cuda" else _NORM_WIDTHS[:-1]

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        return layer_norm.make_bwd_inputs(rows.step(), rng.choice(widths), dtype=dtype, device=str(device))

    return make


def _matmul_inputs(rng: random.Random, device: torch.device, largest: int) -> Inputs:
    sizes = [SizeWalk(rng, largest // 2) for _ in range(3)]

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        m, k, n = (walk.step() for walk in sizes)
        return torch.randn(m, k, device=device).to(dtype), torch.randn(k, n, device=device).to(dtype)

    return make


def _fresh(kernel: tessera.Kernel, **settings: Any) -> Callable[[], tessera.Kernel]:
    return lambda: tessera.kernel(kernel.fn, max_variants=_MAX_VARIANTS, **settings)


TARGETS: dict[str, FuzzTarget] = {target.name: target for target in (
    FuzzTarget("add", _fresh(add.add), add.reference, _add_inputs, DEFAULT_TOLERANCES),
    FuzzTarget("softmax", _fresh(softmax.softmax), softmax.reference, _softmax_inputs, DEFAULT_TOLERANCES),
    FuzzTarget("layer_norm_fwd", _fresh(layer_norm.layer_norm_fwd), layer_norm.reference_fwd,
               _layer_norm_fwd_inputs, DEFAULT_TOLERANCES),
    FuzzTarget("layer_norm_bwd", _fresh(layer_norm.layer_norm_bwd), layer_norm.reference_bwd,
               _layer_norm_bwd_inputs, DEFAULT_TOLERANCES),
    # ieee products: the fuzz checks indexing and masking, so rounding must not hide an error
    # (tf32, the GPU default for fp32, is covered by the gallery tests with their tolerances)
    FuzzTarget("matmul", _fresh(matmul.matmul, dot_precision="ieee"), matmul.reference, _matmul_inputs,
               DOT_TOLERANCES),
)}


@pytest.mark.parametrize("name", list(TARGETS))
def test_kernel_survives_a_random_sequence_of_shapes(name: str, device: torch.device) -> None:
    report = fuzz(TARGETS[name], device, _CALLS)
    assert not report.failures, report.failures[0]
    assert report.calls == _CALLS and report.variants >= 1


def test_fuzz_replays_the_same_inputs_for_the_same_seed() -> None:
    def first_shapes(seed: int) -> list[tuple[int, ...]]:
        make = _matmul_inputs(random.Random(seed), torch.device("cpu"), 130)
        return [tuple(make(torch.float32)[0].shape) for _ in range(20)]

    assert first_shapes(3) == first_shapes(3) != first_shapes(4)


def test_fuzz_reports_a_kernel_that_gives_wrong_answers(device: torch.device) -> None:
    wrong = dataclasses.replace(TARGETS["add"], reference=lambda x, y: x - y)
    report = fuzz(wrong, device, calls=20, max_failures=2)
    assert len(report.failures) == 2 and "differs from PyTorch" in report.failures[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_size_walk_visits_one_zero_growth_and_shrinkage(seed: int) -> None:
    walk = SizeWalk(random.Random(seed), 130)
    sizes = [walk.step() for _ in range(200)]
    assert 0 in sizes and 1 in sizes and max(sizes) == 130
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:]))
