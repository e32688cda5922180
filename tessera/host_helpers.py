"""Arithmetic that kernels' host code uses on sizes (`helion.cdiv`, `helion.next_power_of_2`).

>>> cdiv(10, 4), next_power_of_2(10)
(3, 16)
"""
from __future__ import annotations

from typing import Any


def cdiv(numerator: Any, denominator: Any) -> Any:
    """Ceiling division of sizes: `cdiv(10, 4) == 3` (any values supporting `//` and negation)."""
    return -(-numerator // denominator)


def next_power_of_2(value: int) -> int:
    """The smallest power of two >= `value` (1 for values <= 1): `next_power_of_2(10) == 16`."""
    value = int(value)
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


__all__ = ["cdiv", "next_power_of_2"]
