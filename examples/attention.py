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
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              return_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention for `q` `[..., m, d]` and `k`, `v` `[..., n, d]`.

    `return_lse=True` also returns each query's log-sum-exp of its scaled scores, in base 2
    (`[batch * heads, m]`, float32): what the backward needs to rebuild the probabilities."""
    m_dim, n_dim = q.size(-2), k.size(-2)
    head_dim = hl.specialize(q.size(-1))
    q_view = q.reshape(-1, m_dim, head_dim)
    k_view = k.reshape(-1, n_dim, head_dim).transpose(1, 2)
    v_view = v.reshape(-1, n_dim, head_dim)
    out = torch.empty_like(q_view)
    lse = torch.empty([q_view.size(0), m_dim], dtype=torch.float32, device=q.device) if return_lse else None
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
        if return_lse:
            lse[b, tile_m] = m_i + torch.log2(l_i)
    return (out.view(q.size()), lse) if return_lse else out.view(q.size())


def _probabilities(scores: torch.Tensor, lse: torch.Tensor, qk_scale: float,
                   visible: torch.Tensor | None) -> torch.Tensor:
    """softmax's probabilities rebuilt from raw scores and the forward's base-2 log-sum-exp
    (already broadcast to the scores' layout); hidden pairs are 0."""
    probabilities = torch.exp2(scores * qk_scale - lse)
    return probabilities if visible is None else torch.where(visible, probabilities, 0.0)


@tessera.kernel
def attention_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of `attention(q, k, v, causal)` from its output and base-2 `lse`.

    FlashAttention-2's scheme in three launches: `delta = rowsum(dO * O)` per query; then per
    block of keys, dk and dv summed over query blocks; then per block of queries, dq summed over
    key blocks. Each recomputes the probabilities `P = exp2(q k^T * scale - lse)` it needs, so no
    score matrix is stored. Causal: only the blocks on the diagonal are masked.
    """
    m_dim, n_dim = q.size(-2), k.size(-2)
    head_dim = hl.specialize(q.size(-1))
    q_view, out_view, do_view = (t.reshape(-1, m_dim, head_dim) for t in (q, out, grad_out))
    k_view, v_view = k.reshape(-1, n_dim, head_dim), v.reshape(-1, n_dim, head_dim)
    heads = q_view.size(0)
    sm_scale = 1.0 / math.sqrt(head_dim)
    qk_scale = 1.4426950408889634 * sm_scale
    split = causal and m_dim == n_dim  # a block's diagonal range then stays inside both lengths
    delta = torch.empty([heads, m_dim], dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q_view), torch.empty_like(k_view), torch.empty_like(v_view)
    for tile_b, tile_m in hl.tile([heads, m_dim], block_size=[1, None]):
        b = tile_b.begin
        delta[b, tile_m] = torch.sum(do_view[b, tile_m, :].to(torch.float32) * out_view[b, tile_m, :].to(torch.float32),
                                     dim=-1)
    block_m = hl.register_block_size(m_dim)  # the query blocks of the dk/dv loops
    for tile_b, tile_n in hl.tile([heads, n_dim], block_size=[1, None]):
        b = tile_b.begin
        k_tile, v_tile = k_view[b, tile_n, :], v_view[b, tile_n, :]
        dk_acc = hl.zeros([tile_n, head_dim], dtype=torch.float32)
        dv_acc = hl.zeros([tile_n, head_dim], dtype=torch.float32)
        # causal: queries before the block's first key see none of it; the diagonal range is
        # masked per pair; every later query sees the whole block
        for tile_m in hl.tile(tile_n.begin if split else 0, tile_n.end if split else m_dim, block_size=block_m):
            visible = tile_m.index[None, :] >= tile_n.index[:, None] if causal else None
            dk_acc, dv_acc = _key_block_step(q_view[b, tile_m, :], do_view[b, tile_m, :], lse[b, tile_m],
                                             delta[b, tile_m], k_tile, v_tile, dk_acc, dv_acc, qk_scale, visible)
        if split:
            for tile_m in hl.tile(tile_n.end, m_dim, block_size=block_m):
                dk_acc, dv_acc = _key_block_step(q_view[b, tile_m, :], do_view[b, tile_m, :], lse[b, tile_m],
                                                 delta[b, tile_m], k_tile, v_tile, dk_acc, dv_acc, qk_scale, None)
        dk[b, tile_n, :] = (dk_acc * sm_scale).to(dk.dtype)
        dv[b, tile_n, :] = dv_acc.to(dv.dtype)
    block_n = hl.register_block_size(n_dim)  # the key blocks of the dq loops
    for tile_b, tile_m in hl.tile([heads, m_dim], block_size=[1, None]):
        b = tile_b.begin
        q_tile, do_tile = q_view[b, tile_m, :], do_view[b, tile_m, :]
        lse_rows, delta_rows = lse[b, tile_m][:, None], delta[b, tile_m][:, None]
        dq_acc = hl.zeros([tile_m, head_dim], dtype=torch.float32)
        for tile_n in hl.tile(0, tile_m.begin if split else n_dim, block_size=block_n):
            visible = tile_m.index[:, None] >= tile_n.index[None, :] if causal and not split else None
            dq_acc = _query_block_step(q_tile, do_tile, lse_rows, delta_rows, k_view[b, tile_n, :],
                                       v_view[b, tile_n, :], dq_acc, qk_scale, visible)
        if split:
            for tile_n in hl.tile(tile_m.begin, tile_m.end, block_size=block_n):
                visible = tile_m.index[:, None] >= tile_n.index[None, :]
                dq_acc = _query_block_step(q_tile, do_tile, lse_rows, delta_rows, k_view[b, tile_n, :],
                                           v_view[b, tile_n, :], dq_acc, qk_scale, visible)
        dq[b, tile_m, :] = (dq_acc * sm_scale).to(dq.dtype)
    return dq.view(q.size()), dk.view(k.size()), dv.view(v.size())


def _key_block_step(q_tile: torch.Tensor, do_tile: torch.Tensor, lse_cols: torch.Tensor, delta_cols: torch.Tensor,
                    k_tile: torch.Tensor, v_tile: torch.Tensor, dk_acc: torch.Tensor, dv_acc: torch.Tensor,
                    qk_scale: float, visible: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One block of queries' share of dk and dv for a block of keys (transposed: keys are rows)."""
    p_t = _probabilities(hl.dot(k_tile, q_tile.T, out_dtype=torch.float32), lse_cols[None, :], qk_scale, visible)
    dv_acc = hl.dot(p_t.to(do_tile.dtype), do_tile, acc=dv_acc)
    dp_t = hl.dot(v_tile, do_tile.T, out_dtype=torch.float32)
    ds_t = p_t * (dp_t - delta_cols[None, :])
    dk_acc = hl.dot(ds_t.to(q_tile.dtype), q_tile, acc=dk_acc)
    return dk_acc, dv_acc


def _query_block_step(q_tile: torch.Tensor, do_tile: torch.Tensor, lse_rows: torch.Tensor, delta_rows: torch.Tensor,
                      k_tile: torch.Tensor, v_tile: torch.Tensor, dq_acc: torch.Tensor, qk_scale: float,
                      visible: torch.Tensor | None) -> torch.Tensor:
    """One block of keys' share of dq for a block of queries."""
    p = _probabilities(hl.dot(q_tile, k_tile.T, out_dtype=torch.float32), lse_rows, qk_scale, visible)
    ds = p * (hl.dot(do_tile, v_tile.T, out_dtype=torch.float32) - delta_rows)
    return hl.dot(ds.to(k_tile.dtype), k_tile, acc=dq_acc)


@attention.backward(nondifferentiable_outputs=(1,))
def attention_backward(ctx: tessera.BackwardContext, grad_out: torch.Tensor,
                       *_grad_lse: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """attention's gradient rule: `attention_bwd` on the saved inputs, output and log-sum-exp
    (recomputed when the forward was called without `return_lse=True`)."""
    q, k, v = ctx.inputs[:3]
    causal = ctx.inputs[3] if len(ctx.inputs) > 3 else ctx.kwargs.get("causal", False)
    if isinstance(ctx.output, tuple):
        out, lse = ctx.output
    else:
        with torch.no_grad():
            out, lse = attention(q, k, v, causal, True)
    dq, dk, dv = attention_bwd(grad_out.contiguous(), q, k, v, out, lse, causal)
    return (dq, dk, dv) + (None,) * (len(ctx.inputs) - 3)


def attention_trainable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Differentiable attention: the forward saves its log-sum-exp for `attention_bwd`.

    >>> attention_trainable(q.requires_grad_(), k, v).sum().backward()   # doctest: +SKIP
    """
    return attention(q, k, v, causal, True)[0]


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
