"""torch's shaped factories (`torch.zeros(n, dtype=...)`) called inside a traced tile loop by code
the rewrite does not see: a helper function or a lambda the kernel was given. With plain int
sizes nothing in the call is a proxy, so torch would allocate a host tensor; inside a tile loop
such a value is registers, as the rewritten body's `torch.zeros` and eager mode make it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from tessera.ir.primitive import TORCH_FUNCTIONS
from tessera.trace.proxy import written_by_user

if TYPE_CHECKING:
    from tessera.trace.tracer import Tracer

# made inside a tile loop, these are tile values even from plain ints (`torch.arange(tile.block_size)`,
# `torch.zeros(block_m, block_n)` with host constants): registers, as hl.zeros makes them
TILE_FACTORIES = frozenset({torch.arange, torch.zeros, torch.ones, torch.empty, torch.full})


class TileFactoryMode(TorchFunctionMode):
    """Active while a tile loop's body is traced: the factories above, called by the user's code
    (not by a primitive's rule or Tessera's own code, which build host tensors of their own), bind
    their primitives."""

    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        # (the caller: 1 frame up, torch's dispatch adds none; Tessera's own shape code asks
        # torch.empty for dtype examples, which must stay plain tensors)
        if func in TILE_FACTORIES and not self.tracer.rule_depth and func in TORCH_FUNCTIONS \
                and written_by_user(1):
            return TORCH_FUNCTIONS[func].bind(*args, **kwargs)
        return func(*args, **kwargs)
