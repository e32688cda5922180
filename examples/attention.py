"""Flash attention: softmax(q k^T * scale) v without materializing the score matrix.

Shows the online softmax: for a tile of queries, a running row max `m_i`, a running
denominator `l_i` and an output accumulator `acc` are carried across the loop over key/value
tiles, rescaled whenever the max grows. `causal` is a compile-time flag: keys before a query
tile need no mask, the tiles on the diagonal mask keys after each query (`torch.where` on tile
indices, no data-dependent branching), and keys past the tile's last query are never visited. The head dimension is
specialized so the accumulator has a fixed width; each program handles one (batch, head)
pair (`block_size=[1, None]`, indexed with `tile_b.begin` so every tile is 2-D) and a tunable
block of queries (`block_sizes[1]`); both key loops share one registered key block (`block_sizes[0]`).
"""

from __future__ import annotations

import math

import torch

import tessera
import tessera.language as hl
from examples._harness import DOT_TOLERANCES, Example, run_examples


def _attend(q_tile: torch.Tensor, k_tile: torch.Tensor, v_tile: torch.Tensor, m_i: torch.Tensor,
            l_i: torch.Tensor, acc: torch.Tensor, qk_scale: float,
            visible: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the online softmax over a tile of keys: (new row max, denominator, accumulator)."""
    scores = hl.dot(q_tile, k_tile, out_dtype=torch.float32) * qk_scale
    if visible is not None:
        scores = torch.where(visible, scores, float("-inf"))
    m_new = torch.maximum(m_i, torch.amax(scores, dim=-1))
    p = torch.exp2(scores - m_new[:, None])
    alpha = torch.exp2(m_i - m_new)
    l_i = l_i * alpha + torch.sum(p, dim=-1)
    acc = hl.dot(p.to(v_tile.dtype), v_tile, acc=acc * alpha[:, None])
    return m_new, l_i, acc


@tessera.kernel
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Scaled dot-product attention for `q` `[..., m, d]` and `k`, `v` `[..., n, d]`."""
    m_dim, n_dim = q.size(-2), k.size(-2)
    head_dim = hl.specialize(q.size(-1))
    q_view = q.reshape(-1, m_dim, head_dim)
    k_view = k.reshape(-1, n_dim, head_dim).transpose(1, 2)
    v_view = v.reshape(-1, n_dim, head_dim)
    out = torch.empty_like(q_view)
    # exp2 is the cheaper instruction: fold log2(e) into the softmax scale.
    qk_scale = 1.4426950408889634 / math.sqrt(head_dim)
    split_at_diagonal = causal and m_dim <= n_dim  # with m > n, tile_m.end could pass the last key
    block_n = hl.register_block_size(n_dim)  # one key block for both key loops (block_sizes[0])
    for tile_b, tile_m in hl.tile([q_view.size(0), m_dim], block_size=[1, None]):
        b = tile_b.begin  # one (batch, head) pair per program: index it, so tiles stay 2-D
        m_i = hl.full([tile_m], float("-inf"), dtype=torch.float32)
        l_i = hl.zeros([tile_m], dtype=torch.float32)
        acc = hl.zeros([tile_m, head_dim], dtype=torch.float32)
        q_tile = q_view[b, tile_m, :]
        # causal: keys before the tile's first query are visible to all of its queries (no mask);
        # keys from there to its last query are masked per pair; later keys are never visited
        for tile_n in hl.tile(0, tile_m.begin if split_at_diagonal else n_dim, block_size=block_n):
            visible = tile_m.index[:, None] >= tile_n.index[None, :] if causal and not split_at_diagonal else None
            m_i, l_i, acc = _attend(q_tile, k_view[b, :, tile_n], v_view[b, tile_n, :], m_i, l_i, acc, qk_scale,
                                    visible)
        if split_at_diagonal:
            for tile_n in hl.tile(tile_m.begin, tile_m.end, block_size=block_n):
                visible = tile_m.index[:, None] >= tile_n.index[None, :]
                m_i, l_i, acc = _attend(q_tile, k_view[b, :, tile_n], v_view[b, tile_n, :], m_i, l_i, acc,
                                        qk_scale, visible)
        out[b, tile_m, :] = (acc / l_i[:, None]).to(out.dtype)
    return out.view(q.size())


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """`torch.nn.functional.scaled_dot_product_attention` in float32 (causal: keys j <= query i)."""
    out = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    return out.to(q.dtype)


def make_inputs(
    batch: int,
    heads: int,
    m: int,
    n: int,
    head_dim: int,
    *,
    causal: bool = False,
    dtype: torch.dtype,
    device: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """`q` `[batch, heads, m, head_dim]`, `k`, `v` `[batch, heads, n, head_dim]`, and the flag."""
    q, k, v = (torch.randn(batch, heads, length, head_dim, device=device).to(dtype) for length in (m, n, n))
    return q, k, v, causal


EXAMPLE = Example(
    "attention",
    run=attention,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"batch": 1, "heads": 4, "m": 128, "n": 128, "head_dim": 64},
        "cuda": {"batch": 4, "heads": 16, "m": 2048, "n": 2048, "head_dim": 128},
    },
    tolerances=DOT_TOLERANCES,
)
CAUSAL_EXAMPLE = Example(
    "attention_causal",
    run=attention,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"batch": 1, "heads": 4, "m": 128, "n": 128, "head_dim": 64, "causal": True},
        "cuda": {"batch": 4, "heads": 16, "m": 2048, "n": 2048, "head_dim": 128, "causal": True},
    },
    tolerances=DOT_TOLERANCES,
)
EXAMPLES = [EXAMPLE, CAUSAL_EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
