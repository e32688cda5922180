"""Cross-entropy loss from logits and integer class labels.

Shows a gather with a computed index tensor: each row's label logit is read with
`hl.load` from the flattened logits at `row * v + label`, next to a whole-row log-sum-exp.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def cross_entropy_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-row losses `logsumexp(logits[i]) - logits[i, labels[i]]` as float32 `[n]`."""
    n, v = logits.size()
    losses = torch.empty([n], dtype=torch.float32, device=logits.device)
    logits_flat = logits.view(-1)
    for tile_n in hl.tile(n):
        label_logits = hl.load(logits_flat, [tile_n.index * v + labels[tile_n]]).to(torch.float32)
        rows = logits[tile_n, :].to(torch.float32)
        row_max = torch.amax(rows, dim=1)
        sum_exp = torch.sum(torch.exp(rows - row_max[:, None]), dim=1)
        losses[tile_n] = row_max + torch.log(sum_exp) - label_logits
    return losses


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy loss (a 0-d float32 tensor), like `F.cross_entropy(logits, labels)`."""
    return cross_entropy_losses(logits.contiguous(), labels).mean()


def reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`torch.nn.functional.cross_entropy` in float32."""
    return torch.nn.functional.cross_entropy(logits.float(), labels)


def make_inputs(n: int, v: int, *, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits `[n, v]` and int64 labels in `[0, v)`."""
    logits = (3 * torch.randn(n, v, device=device)).to(dtype)
    labels = torch.randint(0, v, (n,), device=device, dtype=torch.int64)
    return logits, labels


EXAMPLE = Example(
    "cross_entropy",
    run=cross_entropy,
    reference=reference,
    make_inputs=make_inputs,
    sizes={"cpu": {"n": 256, "v": 4000}, "cuda": {"n": 4096, "v": 32000}},
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
