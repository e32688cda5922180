"""Layer normalization, forward and backward.

The forward kernel normalizes whole rows and saves each row's mean and 1/std for the
backward. The backward kernel computes `grad_x` row by row, and reduces `grad_weight` and
`grad_bias` over rows in two stages: each block of `m_block` rows accumulates its own partial
sums in registers and writes them to row `mb.id` of a partial buffer, whose columns a second
tile loop sums.
The feature width `n` is specialized (`hl.specialize`), so those accumulators have a fixed
size; any width works, powers of two or not. `@layer_norm_fwd.backward` pairs the two for
autograd, and `layer_norm(x, weight, bias)` is the differentiable function built on them. Both
kernels compute in float32, or float64 for float64 inputs.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples

EPS = 1e-5


@tessera.kernel
def layer_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = EPS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalize each row of `x` `[m, n]`; return `(out, mean, rstd)`, the last two float32 `[m]`."""
    m, n = x.size()
    out = torch.empty_like(x)
    compute = torch.promote_types(x.dtype, torch.float32)
    mean = torch.empty([m], dtype=compute, device=x.device)
    rstd = torch.empty([m], dtype=compute, device=x.device)
    for tile_m in hl.tile(m):
        rows = x[tile_m, :].to(compute)
        row_mean = torch.mean(rows, dim=1)
        centered = rows - row_mean[:, None]
        row_rstd = torch.rsqrt(torch.mean(centered * centered, dim=1) + eps)
        normalized = centered * row_rstd[:, None]
        scaled = normalized * weight[None, :].to(compute) + bias[None, :].to(compute)
        out[tile_m, :] = scaled.to(out.dtype)
        mean[tile_m] = row_mean
        rstd[tile_m] = row_rstd
    return out, mean, rstd


@tessera.kernel
def layer_norm_bwd(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients `(grad_x, grad_weight, grad_bias)` of layer norm, given the forward's mean and rstd."""
    m = x.size(0)
    m_block = hl.register_block_size(m)
    n = hl.specialize(x.size(1))
    num_blocks = (m + m_block - 1) // m_block
    grad_x = torch.empty_like(x)
    compute = torch.promote_types(x.dtype, torch.float32)
    grad_weight_blocks = torch.empty([num_blocks, n], dtype=compute, device=x.device)
    grad_bias_blocks = torch.empty([num_blocks, n], dtype=compute, device=x.device)
    grad_weight = torch.empty_like(weight)
    grad_bias = torch.empty_like(weight)
    for mb in hl.tile(m, block_size=m_block):
        grad_weight_acc = hl.zeros([n], dtype=compute)
        grad_bias_acc = hl.zeros([n], dtype=compute)
        weight_row = weight[None, :].to(compute)
        for row in hl.tile(mb.begin, mb.end):
            dy = grad_out[row, :].to(compute)
            row_rstd = rstd[row][:, None].to(compute)
            x_hat = (x[row, :].to(compute) - mean[row][:, None].to(compute)) * row_rstd
            grad_weight_acc = grad_weight_acc + torch.sum(dy * x_hat, dim=0)
            grad_bias_acc = grad_bias_acc + torch.sum(dy, dim=0)
            weighted_dy = dy * weight_row
            mean_wdy_xhat = torch.sum(weighted_dy * x_hat, dim=1, keepdim=True) / n
            mean_wdy = torch.sum(weighted_dy, dim=1, keepdim=True) / n
            grad_rows = (weighted_dy - (x_hat * mean_wdy_xhat + mean_wdy)) * row_rstd
            grad_x[row, :] = grad_rows.to(grad_x.dtype)
        grad_weight_blocks[mb.id, :] = grad_weight_acc
        grad_bias_blocks[mb.id, :] = grad_bias_acc
    # the second stage, one launch for both: host code summing the partials (torch's sum and cast,
    # four launches) cost 25 us of a 175 us call on the H100 at 16384 x 4096
    # (literal block sizes: the source scan sees they take no Config entry)
    for tile_n in hl.tile(n, block_size=16):  # 16 columns of the partials per program
        weight_sum = hl.zeros([tile_n], dtype=compute)
        bias_sum = hl.zeros([tile_n], dtype=compute)
        for blocks in hl.tile(num_blocks, block_size=64):  # any count of blocks, one variant
            weight_sum = weight_sum + torch.sum(grad_weight_blocks[blocks, tile_n], dim=0)
            bias_sum = bias_sum + torch.sum(grad_bias_blocks[blocks, tile_n], dim=0)
        grad_weight[tile_n] = weight_sum.to(grad_weight.dtype)
        grad_bias[tile_n] = bias_sum.to(grad_bias.dtype)
    return grad_x, grad_weight, grad_bias


@layer_norm_fwd.backward(nondifferentiable_outputs=(1, 2))
def layer_norm_backward(ctx: tessera.BackwardContext, grad_out: torch.Tensor, _grad_mean: torch.Tensor,
                        _grad_rstd: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """layer_norm_fwd's gradient rule: the backward kernel on the saved row statistics."""
    x, weight, _bias = ctx.inputs[:3]
    _out, mean, rstd = ctx.output
    grad_x, grad_weight, grad_bias = layer_norm_bwd(grad_out.contiguous(), x, mean, rstd, weight)
    return (grad_x, grad_weight, grad_bias) + (None,) * (len(ctx.inputs) - 3)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Layer norm over the last dimension of `x` `[m, n]`, differentiable (Tessera kernels both ways).

    >>> layer_norm(x.requires_grad_(), weight, bias).sum().backward()   # doctest: +SKIP
    """
    return layer_norm_fwd(x, weight, bias, eps)[0]


def reference_fwd(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = EPS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`torch.nn.functional.layer_norm` in float32, plus the row statistics."""
    x32 = x.float()
    out = torch.nn.functional.layer_norm(x32, (x.size(1),), weight.float(), bias.float(), eps)
    variance, mean = torch.var_mean(x32, dim=1, correction=0)
    return out.to(x.dtype), mean, torch.rsqrt(variance + eps)


def reference_bwd(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same gradients from autograd through `torch.nn.functional.layer_norm` (eps = EPS)."""
    x32 = x.float().requires_grad_()
    weight32 = weight.float().requires_grad_()
    bias32 = torch.zeros_like(weight32, requires_grad=True)
    out = torch.nn.functional.layer_norm(x32, (x.size(1),), weight32, bias32, EPS)
    out.backward(grad_out.float())
    return x32.grad.to(x.dtype), weight32.grad.to(weight.dtype), bias32.grad.to(weight.dtype)


def make_fwd_inputs(
    m: int, n: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """Activations `[m, n]` off-center, weight and bias `[n]`, and eps."""
    x = (0.5 + 2 * torch.randn(m, n, device=device)).to(dtype)
    weight = (1 + 0.1 * torch.randn(n, device=device)).to(dtype)
    bias = (0.1 * torch.randn(n, device=device)).to(dtype)
    return x, weight, bias, EPS


def make_bwd_inputs(
    m: int, n: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, ...]:
    """`(grad_out, x, mean, rstd, weight)`, with the statistics a forward pass would save."""
    x, weight, _, eps = make_fwd_inputs(m, n, dtype=dtype, device=device)
    variance, mean = torch.var_mean(x.float(), dim=1, correction=0)
    grad_out = torch.randn(m, n, device=device).to(dtype)
    return grad_out, x, mean, torch.rsqrt(variance + eps), weight


FWD_EXAMPLE = Example(
    "layer_norm_fwd",
    run=layer_norm_fwd,
    reference=reference_fwd,
    make_inputs=make_fwd_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
BWD_EXAMPLE = Example(
    "layer_norm_bwd",
    run=layer_norm_bwd,
    reference=reference_bwd,
    make_inputs=make_bwd_inputs,
    sizes={"cpu": {"m": 512, "n": 1000}, "cuda": {"m": 8192, "n": 4096}},
)
EXAMPLES = [FWD_EXAMPLE, BWD_EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
