"""Tessera: GPU kernels written as PyTorch with tiles.

>>> import tessera, tessera.language as hl
"""
from __future__ import annotations

__version__ = "0.1.0"

from tessera import exc, language  # noqa: E402
from tessera.config import Config  # noqa: E402
from tessera.runtime.kernel import Kernel, kernel  # noqa: E402
from tessera.runtime.kernel import kernel as jit  # noqa: E402  (Helion's alias of kernel)
from tessera.runtime.autograd import BackwardContext  # noqa: E402
from tessera.runtime.kernel_settings import RefMode, Settings  # noqa: E402
from tessera import runtime  # noqa: E402  (helion.runtime.get_num_sm)
from tessera.host_helpers import cdiv, next_power_of_2  # noqa: E402
from tessera.marking import mark_static  # noqa: E402
from tessera.autotune.tuner import install_autotuner  # noqa: E402
from tessera.aot import aot_kernel  # noqa: E402
from tessera import experimental  # noqa: E402  (Helion's helion.experimental.backward)

# The runtime calls the autotuner through a hook (the autotuner sits above it in the layers);
# installing loads only the autotuner's small parts, the pipeline loads when a call first tunes.
install_autotuner()

__all__ = ["BackwardContext", "Config", "Kernel", "RefMode", "Settings", "aot_kernel", "cdiv", "exc", "experimental", "jit", "kernel", "language",
           "mark_static", "next_power_of_2", "runtime"]
