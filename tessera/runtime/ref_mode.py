"""Helion's reference-mode names at its module path `helion.runtime.ref_mode`.

Helion's reference mode is Tessera's eager mode: the kernel body runs as PyTorch.

>>> from tessera.runtime.ref_mode import RefMode, is_ref_mode_enabled
>>> is_ref_mode_enabled(Settings(ref_mode=RefMode.EAGER))   # doctest: +SKIP
True
"""
from __future__ import annotations

from tessera.runtime.kernel_settings import RefMode, Settings


def is_ref_mode_enabled(settings: Settings) -> bool:
    """Whether a kernel with these settings runs in eager (reference) mode."""
    return settings.runs_eager()


__all__ = ["RefMode", "is_ref_mode_enabled"]
