"""Helion's module path `helion.runtime.config`: the Config class.

>>> from tessera.runtime.config import Config
"""
from __future__ import annotations

from tessera.config import Config

__all__ = ["Config"]
