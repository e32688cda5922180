"""Fuzzing the variant cache: many calls of one kernel with shapes that keep changing.

Each test calls one gallery kernel (add, softmax, layer_norm_fwd, matmul) with a seeded random
sequence of inputs: sizes that grow, shrink, drop to 1 or 0, land on primes and on block
boundaries, in every dtype and in contiguous, transposed and sliced layouts. Every result is
checked against PyTorch, so a variant reused for inputs it was not compiled for shows up as a
wrong answer. The mode follows the device (interpret on CPU, compiled on CUDA).

`TESSERA_FUZZ_CALLS` sets the number of calls per kernel (default 50), e.g. for a long GPU run:
`TESSERA_FUZZ_CALLS=5000 pytest tests/test_fuzz.py --device cuda`.
"""
from __future__ import annotations

import os
import random
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


def _describe(inputs: tuple[Any, ...]) -> str:
    return ", ".join(f"{tuple(t.shape)}/{t.stride()}/{t.dtype}" if isinstance(t, torch.Tensor) else repr(t)
                     for t in inputs)


def _fuzz(kernel: tessera.Kernel, reference: Callable[..., Any], make: Callable[..., tuple[Any, ...]],
          tolerances: dict[torch.dtype, tuple[float, float]], seed: int, device: torch.device) -> None:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for call in range(_CALLS):
        dtype = rng.choice(_DTYPES)
        inputs = tuple(_layout(rng, t) if isinstance(t, torch.Tensor) else t for t in make(dtype))
        try:
            assert_close(kernel(*inputs), reference(*inputs), tolerances[dtype], kernel.__name__)
        except Exception as error:
            raise AssertionError(f"call {call} (seed {seed}) with {_describe(inputs)}: {error}") from error


def _largest(device: torch.device) -> int:
    # The interpreter is slow per element; on the GPU the walk reaches real sizes.
    return 2048 if device.type == "cuda" else 130


def test_add_survives_a_random_sequence_of_shapes(device: torch.device) -> None:
    rows, cols = SizeWalk(random.Random(1), _largest(device) // 2), SizeWalk(random.Random(2), _largest(device))

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        m, n = rows.step(), cols.step()
        y_shape = (n,) if random.Random(m * 131 + n).random() < 0.3 else (m, n)
        return torch.randn(m, n, device=device).to(dtype), torch.randn(y_shape, device=device).to(dtype)

    _fuzz(tessera.kernel(add.add.fn, max_variants=_MAX_VARIANTS), add.reference, make, DEFAULT_TOLERANCES, 11, device)


def test_softmax_survives_a_random_sequence_of_shapes(device: torch.device) -> None:
    rows = SizeWalk(random.Random(3), _largest(device) // 2)
    cols = SizeWalk(random.Random(4), _largest(device), allow_zero=False)

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        return ((4 * torch.randn(rows.step(), cols.step(), device=device)).to(dtype),)

    _fuzz(tessera.kernel(softmax.softmax.fn, max_variants=_MAX_VARIANTS), softmax.reference, make, DEFAULT_TOLERANCES, 12, device)


def test_layer_norm_survives_a_random_sequence_of_shapes(device: torch.device) -> None:
    rows = SizeWalk(random.Random(5), _largest(device) // 2)
    cols = SizeWalk(random.Random(6), _largest(device), allow_zero=False)

    def make(dtype: torch.dtype) -> tuple[Any, ...]:
        m, n = rows.step(), cols.step()
        x = (3 + 2 * torch.randn(m, n, device=device)).to(dtype)
        weight = (1 + 0.1 * torch.randn(n, device=device)).to(dtype)
        bias = (0.1 * torch.randn(n, device=device)).to(dtype)
        return x, weight, bias, layer_norm.EPS

    _fuzz(tessera.kernel(layer_norm.layer_norm_fwd.fn, max_variants=_MAX_VARIANTS), layer_norm.reference_fwd, make, DEFAULT_TOLERANCES,
          13, device)


def test_matmul_survives_a_random_sequence_of_shapes(device: torch.device) -> None:
    largest = _largest(device) // 2
    sizes = [SizeWalk(random.Random(seed), largest) for seed in (7, 8, 9)]

    def make(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        m, k, n = (walk.step() for walk in sizes)
        return torch.randn(m, k, device=device).to(dtype), torch.randn(k, n, device=device).to(dtype)

    # ieee products: the fuzz checks indexing and masking, so rounding must not hide an error
    # (tf32, the GPU default for fp32, is covered by the gallery tests with their tolerances)
    kernel = tessera.kernel(matmul.matmul.fn, max_variants=_MAX_VARIANTS, dot_precision="ieee")
    _fuzz(kernel, matmul.reference, make, DOT_TOLERANCES, 14, device)


@pytest.mark.parametrize("seed", [0, 1])
def test_size_walk_visits_one_zero_growth_and_shrinkage(seed: int) -> None:
    walk = SizeWalk(random.Random(seed), 130)
    sizes = [walk.step() for _ in range(200)]
    assert 0 in sizes and 1 in sizes and max(sizes) == 130
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:]))
