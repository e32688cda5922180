"""What the lanes past an inner loop's tail take when they join a register_block_size allocation.

`acc = hl.full([tile_m, block], -inf); for t in hl.tile(n, block_size=block): acc = torch.maximum(acc, x[tile_m, t])`
combines the tile's lanes with the allocation's lane for lane. On the tail tile the lanes past
`n` hold no element: they must leave the allocation as it was, or a later `acc.amax(-1)` reads
the padding (0) as data. Every mode fills those lanes, at the op that joins them to the
allocation, with the op's identity for that operand (max: -inf, min: +inf, mul: 1, add: 0, ...)
or, for `torch.where`, with the other value (the lane keeps the allocation's value whatever
the condition); ops without an identity (`x - acc`, `exp`, comparisons) see 0.

>>> past_end_fill("maximum", 1, torch.float32)
-inf
"""
from __future__ import annotations

from typing import Any

import torch

OTHER_VALUE = "other value"
"""The fill of a `torch.where` value operand: the other value operand's lanes."""


def _lowest(dtype: torch.dtype) -> Any:
    if dtype == torch.bool:
        return False
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _highest(dtype: torch.dtype) -> Any:
    if dtype == torch.bool:
        return True
    return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max


def _all_bits(dtype: torch.dtype) -> Any:
    return True if dtype == torch.bool else -1


# op -> (the operand positions the identity holds for (None: any), the identity for a dtype)
_IDENTITIES: dict[str, tuple[tuple[int, ...] | None, Any]] = {
    "add": (None, lambda dtype: 0),
    "sub": ((1,), lambda dtype: 0),
    "mul": (None, lambda dtype: 1),
    "truediv": ((1,), lambda dtype: 1),
    "div": ((1,), lambda dtype: 1),
    "maximum": (None, _lowest),
    "fmax": (None, _lowest),
    "minimum": (None, _highest),
    "fmin": (None, _highest),
    "bitwise_and": (None, _all_bits),
    "logical_and": (None, lambda dtype: True),
    "bitwise_or": (None, lambda dtype: 0),
    "bitwise_xor": (None, lambda dtype: 0),
    "logical_or": (None, lambda dtype: False),
    "logical_xor": (None, lambda dtype: False),
}


def past_end_fill(name: str, position: int, dtype: torch.dtype) -> Any:
    """The value lanes past a tail tile's end take in operand `position` (of `dtype`) of op
    `name` when they join an allocation: its identity there, OTHER_VALUE for a value of
    `torch.where` (position 1 or 2), else 0 (False for bools)."""
    if name == "where" and position in (1, 2):
        return OTHER_VALUE
    positions, identity = _IDENTITIES.get(name, ((), None))
    if identity is not None and (positions is None or position in positions):
        return identity(dtype)
    return False if dtype == torch.bool else 0
