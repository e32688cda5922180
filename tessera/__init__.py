"""Tessera: GPU kernels written as PyTorch with tiles.

>>> import tessera, tessera.language as hl
"""
from __future__ import annotations

__version__ = "0.1.0"

from tessera import exc, language  # noqa: E402
from tessera.config import Config  # noqa: E402
from tessera.runtime.kernel import Kernel, kernel  # noqa: E402
from tessera.marking import mark_static  # noqa: E402

__all__ = ["Config", "Kernel", "exc", "kernel", "language", "mark_static"]
