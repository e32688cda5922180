"""Matrix multiply with a fused epilogue: `activation(x @ y + bias)`.

Shows the canonical 2-D output tiling with a K loop carrying a float32 accumulator
(`torch.addmm` on low-precision tiles accumulates in float32), then an epilogue applied to
the accumulator before the single cast on store. `bias=None` and the activation are
compile-time choices: each combination is its own specialization.
"""

from __future__ import annotations

from typing import Callable

import torch

import tessera
import tessera.language as hl
from examples._harness import DOT_TOLERANCES, Example, run_examples


def identity(value: torch.Tensor) -> torch.Tensor:
    """The default epilogue: leave the accumulator as it is."""
    return value


@tessera.kernel
def matmul(
    x: torch.Tensor,
    y: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: Callable[[torch.Tensor], torch.Tensor] = identity,
) -> torch.Tensor:
    """`activation(x @ y + bias)` for `x` `[m, k]`, `y` `[k, n]` and an optional `bias` `[n]`."""
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch: x is [{m}, {k}] but y is [{k2}, {n}]"
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        if bias is not None:
            acc = acc + bias[tile_n].to(torch.float32)[None, :]
        out[tile_m, tile_n] = activation(acc).to(out.dtype)
    return out


def reference(
    x: torch.Tensor,
    y: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: Callable[[torch.Tensor], torch.Tensor] = identity,
) -> torch.Tensor:
    """The same in float32 PyTorch, cast to the inputs' dtype."""
    acc = x.float() @ y.float()
    if bias is not None:
        acc = acc + bias.float()
    return activation(acc).to(torch.promote_types(x.dtype, y.dtype))


def make_inputs(
    m: int, k: int, n: int, *, epilogue: bool = False, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, ...]:
    """`x` `[m, k]`, `y` `[k, n]` scaled so outputs are O(1); with `epilogue`, a bias and GELU."""
    x = torch.randn(m, k, device=device).to(dtype)
    y = (torch.randn(k, n, device=device) / max(k, 1) ** 0.5).to(dtype)
    if not epilogue:
        return x, y
    bias = torch.randn(n, device=device).to(dtype)
    return x, y, bias, torch.nn.functional.gelu


EXAMPLE = Example(
    "matmul",
    run=matmul,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"m": 128, "k": 256, "n": 192}, "cuda": {"m": 4096, "k": 4096, "n": 4096}},
    tolerances=DOT_TOLERANCES,
)
EPILOGUE_EXAMPLE = Example(
    "matmul_bias_gelu",
    run=matmul,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"m": 128, "k": 256, "n": 192, "epilogue": True},
        "cuda": {"m": 4096, "k": 4096, "n": 4096, "epilogue": True},
    },
    tolerances=DOT_TOLERANCES,
)
EXAMPLES = [EXAMPLE, EPILOGUE_EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
