"""`Config` at Helion's module path `helion.runtime.config` (tests import it from there).

>>> from tessera.runtime.config import Config
"""
from __future__ import annotations

from tessera.config import Config

__all__ = ["Config"]
