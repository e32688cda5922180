"""Elementwise add with broadcasting: the smallest complete Tessera kernel.

Shows an N-D tile loop over every dimension of the output (`hl.tile(out.size())`), host code
that broadcasts and allocates with plain PyTorch, and a cast on store.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`x + y` with PyTorch broadcasting and type promotion."""
    x, y = torch.broadcast_tensors(x, y)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile in hl.tile(out.size()):
        out[tile] = (x[tile] + y[tile]).to(out.dtype)
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """PyTorch's own `x + y`."""
    return x + y


def make_inputs(
    m: int, n: int, *, broadcast: bool = False, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two `[m, n]` tensors, or an `[m, n]` and a `[n]` one when `broadcast`."""
    x = torch.randn(m, n, dtype=dtype, device=device)
    y = torch.randn(n if broadcast else (m, n), dtype=dtype, device=device)
    return x, y


EXAMPLE = Example(
    "add",
    run=add,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 512, "n": 500}, "cuda": {"m": 8192, "n": 8192}},
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
