"""Batched matrix multiply: a 3-D tile loop over (batch, m, n) with a K loop inside.

Shows `hl.tile([b, m, n], block_size=[1, None, None])` yielding three tiles, the batch one
fixed at one matrix per program (the m and n block sizes stay tunable), and `torch.baddbmm`
accumulating low-precision tiles into a float32 accumulator.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import DOT_TOLERANCES, Example, run_examples


@tessera.kernel
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`torch.bmm(a, b)` for `a` `[batch, m, k]` and `b` `[batch, k, n]`."""
    batch, m, k = a.size()
    batch2, k2, n = b.size()
    assert (batch, k) == (batch2, k2), f"size mismatch: a is {list(a.shape)}, b is {list(b.shape)}"
    out = torch.empty([batch, m, n], dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc.to(out.dtype)
    return out


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`torch.bmm` in float32, cast to the inputs' dtype."""
    return torch.bmm(a.float(), b.float()).to(torch.promote_types(a.dtype, b.dtype))


def make_inputs(
    batch: int, m: int, k: int, n: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """`a` `[batch, m, k]` and `b` `[batch, k, n]`, scaled so outputs are O(1)."""
    a = torch.randn(batch, m, k, device=device).to(dtype)
    b = (torch.randn(batch, k, n, device=device) / max(k, 1) ** 0.5).to(dtype)
    return a, b


EXAMPLE = Example(
    "bmm",
    run=bmm,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"batch": 4, "m": 128, "k": 128, "n": 96},
        "cuda": {"batch": 32, "m": 1024, "k": 1024, "n": 1024},
    },
    tolerances=DOT_TOLERANCES,
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
