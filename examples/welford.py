"""Row variance and mean in one streaming pass (Welford / Chan et al. merging).

Each row is read in column tiles. A tile's own mean and sum of squared deviations (M2) are
merged into the running pair, so rows of any width need only registers of one tile, and the
result stays accurate where `E[x^2] - E[x]^2` would cancel catastrophically.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def welford(x: torch.Tensor, correction: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.var_mean(x, dim=1, correction=correction)` for a 2-D `x`, as float32 `(var, mean)`."""
    m, n = x.size()
    var = torch.empty([m], dtype=torch.float32, device=x.device)
    mean = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        running_mean = hl.zeros([tile_m], dtype=torch.float32)
        running_m2 = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            tile_count = tile_n.end - tile_n.begin
            tile_mean = torch.sum(values, dim=1) / tile_count
            deviations = values - tile_mean[:, None]
            tile_m2 = torch.sum(deviations * deviations, dim=1)
            # Merge (tile_n.begin values seen so far) with (tile_count new ones).
            delta = tile_mean - running_mean
            running_mean = running_mean + delta * (tile_count / tile_n.end)
            running_m2 = running_m2 + tile_m2 + delta * delta * (tile_n.begin * tile_count / tile_n.end)
        var[tile_m] = running_m2 / (n - correction)
        mean[tile_m] = running_mean
    return var, mean


def reference(x: torch.Tensor, correction: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.var_mean` over rows, in float32."""
    return torch.var_mean(x.float(), dim=1, correction=correction)


def make_inputs(
    m: int, n: int, *, correction: int = 1, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, int]:
    """Rows with a large common offset (where the naive formula loses precision), and correction."""
    return (100 + torch.randn(m, n, device=device)).to(dtype), correction


EXAMPLE = Example(
    "welford",
    run=welford,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
