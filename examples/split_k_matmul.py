"""Split-K matrix multiply: several programs share one output tile, each summing part of K.

For a tall K and a small output (few `[m, n]` tiles), tiling only `m` and `n` leaves most of the
GPU idle. Split-K adds the K splits to the launch grid: the outer tile loop runs over
`[m, n, k]` with the K block set to the split length, an inner loop walks the split's own range
(`hl.tile(outer_k.begin, outer_k.end)`), and each program adds its partial product into a zeroed
float32 output with `hl.atomic_add`. The atomics make the sum order vary between runs, which
float32 keeps harmless; the host wrapper casts the result to the inputs' dtype.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import DOT_TOLERANCES, Example, run_examples


@tessera.kernel
def split_k_matmul_kernel(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, split_size: int) -> torch.Tensor:
    """Adds `x @ y` into `out` (`[m, n]` float32, zeroed), K cut into splits of `split_size`."""
    m, k = x.size()
    n = y.size(1)
    split = hl.specialize(split_size)  # the K block of the outer loop must be a compile-time int
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, split]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in hl.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, x[tile_m, inner_k], y[inner_k, tile_n])
        hl.atomic_add(out, [tile_m, tile_n], acc)
    return out


def split_length(k: int, splits: int) -> int:
    """The K range of one split: `k / splits` rounded up to a power of two (at least 16), so
    nearby sizes share a compiled variant; a kernel may then use fewer splits than asked."""
    per_split = -(-max(k, 1) // max(splits, 1))
    return max(16, 1 << (per_split - 1).bit_length())


def split_k_matmul(x: torch.Tensor, y: torch.Tensor, splits: int = 4) -> torch.Tensor:
    """`x @ y` for `x` `[m, k]`, `y` `[k, n]`, summing about `splits` K ranges in parallel."""
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch: x is [{m}, {k}] but y is [{k2}, {n}]"
    out = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    split_k_matmul_kernel(x, y, out, split_length(k, splits))
    return out.to(torch.promote_types(x.dtype, y.dtype))


def reference(x: torch.Tensor, y: torch.Tensor, splits: int = 4) -> torch.Tensor:
    """`x @ y` in float32, cast to the inputs' dtype (`splits` does not change the result)."""
    return (x.float() @ y.float()).to(torch.promote_types(x.dtype, y.dtype))


def make_inputs(
    m: int, k: int, n: int, splits: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`x` `[m, k]` and `y` `[k, n]`, scaled so outputs are O(1), and the number of splits."""
    x = torch.randn(m, k, device=device).to(dtype)
    y = (torch.randn(k, n, device=device) / max(k, 1) ** 0.5).to(dtype)
    return x, y, splits


EXAMPLE = Example(
    "split_k_matmul",
    run=split_k_matmul,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"m": 64, "k": 1024, "n": 64, "splits": 4},
        "cuda": {"m": 256, "k": 65536, "n": 256, "splits": 32},
    },
    tolerances=DOT_TOLERANCES,
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
