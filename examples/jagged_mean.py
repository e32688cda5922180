"""Mean over the rows of a jagged tensor (values + offsets), empty rows giving 0.

Row `i` is `values[offsets[i]:offsets[i + 1]]`, a variable number of `[features]` vectors.
Shows `hl.grid` (one program per row), per-row bounds read with `hl.load` as runtime
scalars, and an inner `hl.tile(start, end)` loop whose trip count depends on the data.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def jagged_mean(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Per-row means `[num_rows, features]` of jagged `values` `[total, features]`."""
    num_rows = offsets.size(0) - 1
    _, features = values.size()
    out = torch.empty([num_rows, features], dtype=values.dtype, device=values.device)
    for row in hl.grid(num_rows):
        start = hl.load(offsets, [row])
        end = hl.load(offsets, [row + 1])
        # An empty row sums to 0; dividing by max(length, 1) keeps it 0 rather than 0 / 0.
        divisor = torch.clamp((end - start).to(torch.float32), min=1.0)
        for tile_f in hl.tile(features):
            total = hl.zeros([tile_f], dtype=torch.float32)
            for tile_k in hl.tile(start, end):
                total = total + torch.sum(values[tile_k, tile_f].to(torch.float32), dim=0)
            out[row, tile_f] = (total / divisor).to(out.dtype)
    return out


def reference(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Segment sums with `index_add_`, divided by the row lengths (empty rows: 0)."""
    lengths = offsets[1:] - offsets[:-1]
    row_of_value = torch.repeat_interleave(torch.arange(lengths.numel(), device=values.device), lengths)
    sums = torch.zeros(lengths.numel(), values.size(1), device=values.device)
    sums.index_add_(0, row_of_value, values.float())
    return (sums / lengths.clamp(min=1)[:, None]).to(values.dtype)


def make_inputs(
    num_rows: int, max_length: int, features: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random row lengths in `[0, max_length]` (every seventh row empty), values and int64 offsets."""
    lengths = torch.randint(0, max_length + 1, (num_rows,))
    lengths[1::7] = 0
    offsets = torch.zeros(num_rows + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, dim=0)
    values = torch.randn(int(offsets[-1]), features).to(dtype)
    return values.to(device), offsets.to(device)


EXAMPLE = Example(
    "jagged_mean",
    run=jagged_mean,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"num_rows": 64, "max_length": 100, "features": 256},
        "cuda": {"num_rows": 2048, "max_length": 512, "features": 512},
    },
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
