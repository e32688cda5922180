"""Softmax over the rows of a jagged tensor (values + offsets), per feature column.

Row `i` is `values[offsets[i]:offsets[i + 1]]`, a variable number of `[features]` vectors; each
column of a row is normalized on its own (`torch.softmax(row, dim=0)`). One program per row
(`hl.grid`) reads its bounds with `hl.load`, then makes two passes over `hl.tile(start, end)`:
an online max and sum, then the normalized values.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples
from examples.jagged_mean import make_inputs  # the same jagged inputs, empty rows included


@tessera.kernel
def jagged_softmax(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """`softmax(values[offsets[i]:offsets[i + 1]], dim=0)` for every row i, as one `[total, features]` tensor."""
    num_rows = offsets.size(0) - 1
    _, features = values.size()
    out = torch.empty_like(values)
    for row in hl.grid(num_rows):
        start = hl.load(offsets, [row])
        end = hl.load(offsets, [row + 1])
        for tile_f in hl.tile(features):
            row_max = hl.full([tile_f], float("-inf"), dtype=torch.float32)
            row_sum = hl.zeros([tile_f], dtype=torch.float32)
            for tile_k in hl.tile(start, end):  # pass 1: running max, and the sum rescaled to it
                x = values[tile_k, tile_f].to(torch.float32)
                new_max = torch.maximum(row_max, torch.amax(x, dim=0))
                row_sum = row_sum * torch.exp(row_max - new_max) + torch.sum(torch.exp(x - new_max[None, :]), dim=0)
                row_max = new_max
            for tile_k in hl.tile(start, end):  # pass 2: normalize (an empty row runs neither pass)
                x = values[tile_k, tile_f].to(torch.float32)
                out[tile_k, tile_f] = (torch.exp(x - row_max[None, :]) / row_sum[None, :]).to(out.dtype)
    return out


def reference(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """One `torch.softmax(dim=0)` per row, in float32."""
    bounds = offsets.tolist()
    rows = [torch.softmax(values[a:b].float(), dim=0) for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.cat(rows).to(values.dtype) if rows else values.clone()


EXAMPLE = Example(
    "jagged_softmax",
    run=jagged_softmax,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"num_rows": 32, "max_length": 100, "features": 128},
        "cuda": {"num_rows": 2048, "max_length": 512, "features": 512},
    },
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
