"""A helper the eager-mode language tests share."""
from __future__ import annotations

import tessera


def eager_kernel(config: tessera.Config | None = None):
    """`@tessera.kernel` in eager mode, optionally with a fixed Config."""
    return tessera.kernel(mode="eager", config=config)
