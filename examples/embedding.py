"""Embedding lookup: gather rows of a table with an index tensor.

Shows indexing a tensor with a loaded tile of indices (`weight[ids, tile_e]`): each program
copies a block of looked-up rows, one tile of the embedding dimension at a time.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import Example, run_examples


@tessera.kernel
def embedding(indices: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`weight[indices]` for integer `indices` of any shape and a 2-D table `weight` `[v, e]`."""
    flat_indices = indices.reshape(-1)
    _, embedding_dim = weight.size()
    out = torch.empty([flat_indices.size(0), embedding_dim], dtype=weight.dtype, device=weight.device)
    for tile_b, tile_e in hl.tile([flat_indices.size(0), embedding_dim]):
        ids = flat_indices[tile_b]
        out[tile_b, tile_e] = weight[ids, tile_e]
    return out.view(*indices.shape, embedding_dim)


def reference(indices: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`torch.nn.functional.embedding`."""
    return torch.nn.functional.embedding(indices, weight)


def make_inputs(
    batch: int, seq: int, vocab: int, dim: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids `[batch, seq]` (int64) and a table `[vocab, dim]`."""
    indices = torch.randint(0, vocab, (batch, seq), device=device, dtype=torch.int64)
    weight = torch.randn(vocab, dim, device=device).to(dtype)
    return indices, weight


EXAMPLE = Example(
    "embedding",
    run=embedding,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"batch": 8, "seq": 128, "vocab": 8000, "dim": 256},
        "cuda": {"batch": 32, "seq": 1024, "vocab": 32000, "dim": 1024},
    },
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
