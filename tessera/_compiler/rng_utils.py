"""Reference random numbers at Helion's module path `helion._compiler.rng_utils`: what `hl.rand`,
`hl.randint` and `hl.rand4x` give at explicit Philox offsets, computed on the host with Tessera's
own Philox 4x32-10 (language/rng.py, Triton's constants and conversions). An element's offset is
its row-major number in the loops' full extents, in every mode and block size, as in Helion.

>>> philox_rand_ref(42, torch.arange(4)).shape
torch.Size([4])
"""
from __future__ import annotations

from typing import Any

import torch

from tessera.language.rng import random_at_offsets


def _offsets(offset: Any) -> torch.Tensor:
    return offset.to(torch.int64) if isinstance(offset, torch.Tensor) else torch.tensor(offset, dtype=torch.int64)


def _seed(seed: Any) -> int:
    return int(seed.reshape(())) if isinstance(seed, torch.Tensor) else int(seed)


def philox_rand_ref(seed: Any, offset: Any) -> torch.Tensor:
    """Uniform float32 numbers in [0, 1) at `offset` (an int or an int tensor) of seed `seed`."""
    return random_at_offsets(_seed(seed), _offsets(offset), "rand")


def philox_rand4x_ref(seed: Any, offset: Any) -> tuple[torch.Tensor, ...]:
    """The four uniform numbers `hl.rand4x` gives at `offset`."""
    return random_at_offsets(_seed(seed), _offsets(offset), "rand4x")


def philox_randint_ref(seed: Any, offset: Any, low: int, high: int) -> torch.Tensor:
    """int32 numbers in [low, high) at `offset`, as `hl.randint` gives them."""
    if low >= high:
        raise ValueError(f"low ({low}) must be less than high ({high})")
    return random_at_offsets(_seed(seed), _offsets(offset), "randint", low, high)


__all__ = ["philox_rand4x_ref", "philox_rand_ref", "philox_randint_ref"]
