"""Tile allocations: `hl.zeros`, `hl.full`, `hl.arange`."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from tessera.ir.primitive import Primitive
from tessera.language.tile import Tile
from tessera.runtime import eager_state

ShapeArg = Sequence[Any]  # tiles, ints, or block sizes


def zeros(shape: ShapeArg, dtype: torch.dtype = torch.float32, device: Any = None) -> Any:
    """A tile of zeros; dimensions are tiles (their block) or compile-time ints.

    >>> acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)   # doctest: +SKIP
    """
    return full_p.bind(tuple(shape), 0, dtype=dtype)


def full(shape: ShapeArg, value: Any, dtype: torch.dtype = torch.float32, device: Any = None) -> Any:
    """A tile filled with `value`.

    >>> m_i = hl.full([tile_m], float("-inf"), dtype=torch.float32)   # doctest: +SKIP
    """
    return full_p.bind(tuple(shape), value, dtype=dtype)


def arange(begin_or_end: Any, end: Any = None, step: int = 1, dtype: torch.dtype = torch.int32,
           device: Any = None) -> Any:
    """`torch.arange` as a tile (int32 by default).

    >>> offsets = hl.arange(16)   # doctest: +SKIP
    """
    begin, stop = (0, begin_or_end) if end is None else (begin_or_end, end)
    return arange_p.bind(begin, stop, step=step, dtype=dtype)


def _extent(dim: Any) -> int:
    return len(dim) if isinstance(dim, Tile) else int(dim)


full_p = Primitive("full")


@full_p.def_eager
def _full_eager(shape: tuple, value: Any, *, dtype: torch.dtype) -> torch.Tensor:
    return torch.full([_extent(d) for d in shape], value, dtype=dtype, device=eager_state.device())


arange_p = Primitive("arange")


@arange_p.def_eager
def _arange_eager(begin: Any, end: Any, *, step: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(int(begin), int(end), step, dtype=dtype, device=eager_state.device())
