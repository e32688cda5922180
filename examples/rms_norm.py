"""RMS normalization (as in LLaMA): `x / sqrt(mean(x**2) + eps) * weight` over each row.

Shows a whole-row reduction in float32, a host float (`eps`) passed as a runtime scalar,
and a 1-D weight broadcast across the rows of a tile. The backward kernel (`rms_norm_bwd`,
the gradient rule of `rms_norm` for autograd) recomputes each row's 1/rms from `x`, which it
reads anyway, and reduces `grad_weight` over rows in two stages as `examples/layer_norm.py`
does: a block of rows per program sums into registers, a second tile loop sums the blocks.
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


@tessera.kernel
def rms_norm_bwd(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients `(grad_x, grad_weight)` of `rms_norm(x, weight, eps)` for the output gradient `grad_out`."""
    m = x.size(0)
    m_block = hl.register_block_size(m)
    n = hl.specialize(x.size(1))
    grad_x = torch.empty_like(x)
    grad_weight_blocks = torch.empty([(m + m_block - 1) // m_block, n], dtype=torch.float32, device=x.device)
    grad_weight = torch.empty_like(weight)
    for mb in hl.tile(m, block_size=m_block):
        grad_weight_acc = hl.zeros([n], dtype=torch.float32)
        weight_row = weight[None, :].to(torch.float32)
        for row in hl.tile(mb.begin, mb.end):
            dy = grad_out[row, :].to(torch.float32)
            rows = x[row, :].to(torch.float32)
            inverse_rms = torch.rsqrt(torch.sum(rows * rows, dim=1, keepdim=True) / n + eps)
            weighted_dy = dy * weight_row
            # mean(weighted_dy * x_hat) * inverse_rms = mean(weighted_dy * x) * inverse_rms**2:
            # both row sums need only the loaded rows, so neither waits for the other
            mean_wdy_x = torch.sum(weighted_dy * rows, dim=1, keepdim=True) / n
            grad_weight_acc = grad_weight_acc + torch.sum(dy * rows * inverse_rms, dim=0)
            grad_rows = (weighted_dy - rows * (mean_wdy_x * inverse_rms * inverse_rms)) * inverse_rms
            grad_x[row, :] = grad_rows.to(grad_x.dtype)
        grad_weight_blocks[mb.id, :] = grad_weight_acc
    for tile_n in hl.tile(n, block_size=16):  # the second stage, one launch (as layer_norm_bwd's)
        weight_sum = hl.zeros([tile_n], dtype=torch.float32)
        for blocks in hl.tile(grad_weight_blocks.size(0), block_size=64):
            weight_sum = weight_sum + torch.sum(grad_weight_blocks[blocks, tile_n], dim=0)
        grad_weight[tile_n] = weight_sum.to(grad_weight.dtype)
    return grad_x, grad_weight


@rms_norm.backward
def rms_norm_backward(ctx: tessera.BackwardContext, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """rms_norm's gradient rule: the backward kernel (eps, a float, has no gradient)."""
    x, weight = ctx.inputs[:2]
    eps = ctx.inputs[2] if len(ctx.inputs) > 2 else ctx.kwargs.get("eps", 1e-5)
    grad_x, grad_weight = rms_norm_bwd(grad_out.contiguous(), x, weight, eps)
    return (grad_x, grad_weight) + (None,) * (len(ctx.inputs) - 2)


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


def reference_bwd(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same gradients from autograd through `torch.nn.functional.rms_norm` in float32."""
    x32 = x.float().requires_grad_()
    weight32 = weight.float().requires_grad_()
    torch.nn.functional.rms_norm(x32, (x.size(1),), weight32, eps).backward(grad_out.float())
    return x32.grad.to(x.dtype), weight32.grad.to(weight.dtype)


def make_bwd_inputs(
    m: int, n: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """`(grad_out, x, weight, eps)`."""
    x, weight, eps = make_inputs(m, n, dtype=dtype, device=device)
    return torch.randn(m, n, device=device).to(dtype), x, weight, eps


EXAMPLE = Example(
    "rms_norm",
    run=rms_norm,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
BWD_EXAMPLE = Example(
    "rms_norm_bwd",
    run=rms_norm_bwd,
    reference=reference_bwd,
    make_inputs=make_bwd_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
EXAMPLES = [EXAMPLE, BWD_EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
