"""Feature probes at Helion's module path `helion._compat`, for the examples that branch on them.

>>> use_tileir_tunables()
False
"""
from __future__ import annotations


def use_tileir_tunables() -> bool:
    """Whether the TileIR backend's tunables apply: never (Tessera lowers to Triton)."""
    return False


__all__ = ["use_tileir_tunables"]
