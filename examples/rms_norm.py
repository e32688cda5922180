"""RMS normalization (as in LLaMA): `x / sqrt(mean(x**2) + eps) * weight` over each row.

Shows a whole-row reduction in float32, a host float (`eps`) passed as a runtime scalar,
and a 1-D weight broadcast across the rows of a tile.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm over the last dimension of a 2-D `x`, scaled by `weight` (shape `[n]`)."""
    m, n = x.size()
    assert weight.size(0) == n, f"weight has {weight.size(0)} features, x has {n}"
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        rows = x[tile_m, :].to(torch.float32)
        inverse_rms = torch.rsqrt(torch.mean(rows * rows, dim=1) + eps)
        normalized = rows * inverse_rms[:, None]
        out[tile_m, :] = (normalized * weight[None, :].to(torch.float32)).to(out.dtype)
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """`torch.nn.functional.rms_norm` in float32, returned in the input dtype."""
    return torch.nn.functional.rms_norm(x.float(), (x.size(1),), weight.float(), eps).to(x.dtype)


def make_inputs(
    m: int, n: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Activations `[m, n]`, a weight `[n]` around 1, and eps."""
    x = torch.randn(m, n, dtype=dtype, device=device)
    weight = (1 + 0.1 * torch.randn(n, device=device)).to(dtype)
    return x, weight, 1e-5


EXAMPLE = Example(
    "rms_norm",
    run=rms_norm,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
