"""Kernel settings at Helion's module path `helion.runtime.settings` (see kernel_settings.py).

>>> from tessera.runtime.settings import Settings, RefMode
"""
from __future__ import annotations

from tessera.runtime.kernel_settings import RefMode, Settings


def _get_backend() -> str:
    """The default code-generation backend (what Helion's examples branch on)."""
    return "triton"


__all__ = ["RefMode", "Settings"]
