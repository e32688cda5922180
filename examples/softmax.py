"""Row softmax, two ways.

`softmax` loads whole rows (`x[tile_m, :]`) and reduces them in registers: the usual choice
when a row fits. `softmax_two_pass` streams wide rows in column tiles: a first inner loop
carries a running max and a rescaled running sum, a second writes the normalized values.
`softmax` has a backward made of a second kernel, `softmax_bwd` (`@softmax.backward`), so
`softmax(x)` works with autograd. Both compute in float32, or float64 for float64 inputs.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor, one block of whole rows per tile."""
    m, _ = x.size()
    out = torch.empty_like(x)
    compute = torch.promote_types(x.dtype, torch.float32)
    for tile_m in hl.tile(m):
        rows = x[tile_m, :].to(compute)
        shifted = rows - torch.amax(rows, dim=1, keepdim=True)
        numerator = torch.exp(shifted)
        out[tile_m, :] = (numerator / numerator.sum(dim=1, keepdim=True)).to(out.dtype)
    return out


@tessera.kernel
def softmax_bwd(grad_out: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The gradient of softmax over rows, from the forward's output: `out * (g - sum(g * out))`."""
    m, _ = out.size()
    grad_x = torch.empty_like(out)
    compute = torch.promote_types(out.dtype, torch.float32)
    for tile_m in hl.tile(m):
        probabilities = out[tile_m, :].to(compute)
        grads = grad_out[tile_m, :].to(compute)
        dot = torch.sum(grads * probabilities, dim=1, keepdim=True)
        grad_x[tile_m, :] = (probabilities * (grads - dot)).to(grad_x.dtype)
    return grad_x


@softmax.backward
def softmax_backward(ctx: tessera.BackwardContext, grad_out: torch.Tensor) -> torch.Tensor:
    """softmax's gradient rule: one more kernel, on the saved output."""
    return softmax_bwd(grad_out, ctx.output)


@tessera.kernel
def softmax_two_pass(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, reading each row in column tiles (any row width)."""
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row_max = hl.full([tile_m], float("-inf"), dtype=torch.float32)
        row_sum = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            new_max = torch.maximum(row_max, torch.amax(values, dim=1))
            # Rescale what was summed under the old max, then add this tile's terms.
            row_sum = row_sum * torch.exp(row_max - new_max) + torch.exp(values - new_max[:, None]).sum(dim=1)
            row_max = new_max
        for tile_n in hl.tile(n):
            values = x[tile_m, tile_n].to(torch.float32)
            out[tile_m, tile_n] = (torch.exp(values - row_max[:, None]) / row_sum[:, None]).to(out.dtype)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    """`torch.softmax` computed in float32, returned in the input dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(m: int, n: int, *, dtype: torch.dtype, device: str) -> tuple[torch.Tensor]:
    """An `[m, n]` matrix of logits with a spread wide enough to make the max shift matter."""
    return (4 * torch.randn(m, n, dtype=torch.float32, device=device).to(dtype),)


EXAMPLE = Example(
    "softmax",
    run=softmax,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
TWO_PASS_EXAMPLE = Example(
    "softmax_two_pass",
    run=softmax_two_pass,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 256, "n": 4000}, "cuda": {"m": 4096, "n": 32768}},
)
EXAMPLES = [EXAMPLE, TWO_PASS_EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
