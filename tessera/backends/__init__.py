"""Code generators behind one protocol (`base.Backend`), looked up by name.

>>> backend = get("triton")
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tessera import exc

if TYPE_CHECKING:
    from tessera.backends.base import Backend

# name -> "module:class"; a backend module is imported only when first asked for (importing
# Triton fixes its interpreter mode for the process, see backends/triton/modules.py).
_REGISTERED: dict[str, str] = {"triton": "tessera.backends.triton.backend:TritonBackend",
                                "pallas": "tessera.backends.pallas.backend:PallasBackend"}
_INSTANCES: dict[str, Backend] = {}


def names() -> tuple[str, ...]:
    """The names `get` accepts."""
    return tuple(_REGISTERED)


def get(name: str) -> Backend:
    """The backend registered under `name` (one instance per process)."""
    backend = _INSTANCES.get(name)
    if backend is None:
        if name not in _REGISTERED:
            raise exc.ConfigError(f"unknown backend {name!r}", hint=f"use one of {', '.join(_REGISTERED)}")
        module, _, attribute = _REGISTERED[name].partition(":")
        backend = _INSTANCES[name] = getattr(importlib.import_module(module), attribute)()
    return backend
