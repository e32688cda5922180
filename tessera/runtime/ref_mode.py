"""Helion's module path `helion.runtime.ref_mode`: whether a kernel runs as its reference (eager).

>>> from tessera.runtime.ref_mode import is_ref_mode_enabled
"""
from __future__ import annotations

from tessera.runtime.kernel_settings import RefMode, Settings, requested_mode


def is_ref_mode_enabled(settings: Settings) -> bool:
    """Whether kernels with these settings run in eager mode (Helion's reference mode): by
    `ref_mode=RefMode.EAGER`, `mode="eager"` or TESSERA_MODE=eager.

    >>> is_ref_mode_enabled(Settings(ref_mode=RefMode.EAGER))
    True
    """
    return requested_mode(settings) == "eager"


__all__ = ["RefMode", "is_ref_mode_enabled"]
