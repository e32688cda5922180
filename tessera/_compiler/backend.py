"""Helion's module path `helion._compiler.backend`: Tessera's own backend classes under it.

>>> from tessera._compiler.backend import PallasBackend
"""
from __future__ import annotations

from tessera.backends.pallas.backend import PallasBackend

__all__ = ["PallasBackend"]
