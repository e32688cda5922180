"""Segment sum: add each row of `values` into the output row its segment id names.

`out[segment_ids[i]] += values[i]` (`torch.index_add`, torch_scatter's `segment_sum` for
unsorted ids). Each program reads a tile of rows and scatters them with `hl.atomic_add`, an
index tensor as the row index: rows of one segment may sit in several programs, and the
atomics add them all. The sum is kept in float32 (atomics reorder it; fp32 keeps that harmless).
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def segment_sum_kernel(values: torch.Tensor, segment_ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Adds `values[i]` `[n, features]` into `out[segment_ids[i]]` (`out` float32, zeroed)."""
    n, features = values.size()
    for tile_n, tile_f in hl.tile([n, features]):
        ids = segment_ids[tile_n]
        hl.atomic_add(out, [ids, tile_f], values[tile_n, tile_f].to(torch.float32))
    return out


def segment_sum(values: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Per-segment sums `[num_segments, features]` in `values.dtype`; empty segments give 0."""
    out = torch.zeros(num_segments, values.size(1), dtype=torch.float32, device=values.device)
    return segment_sum_kernel(values, segment_ids, out).to(values.dtype)


def reference(values: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """`index_add_` in float32."""
    out = torch.zeros(num_segments, values.size(1), dtype=torch.float32, device=values.device)
    return out.index_add_(0, segment_ids, values.float()).to(values.dtype)


def make_inputs(
    n: int, features: int, num_segments: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`n` rows with random segment ids in `[0, num_segments)`, unsorted (some segments stay empty)."""
    values = torch.randn(n, features).to(dtype)
    segment_ids = torch.randint(0, num_segments, (n,), dtype=torch.int64)
    return values.to(device), segment_ids.to(device), num_segments


EXAMPLE = Example(
    "segment_sum",
    run=segment_sum,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"n": 1000, "features": 64, "num_segments": 37},
        "cuda": {"n": 1 << 18, "features": 256, "num_segments": 4096},
    },
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
