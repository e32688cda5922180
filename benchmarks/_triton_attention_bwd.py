"""A hand-written Triton attention backward to profile Tessera's `attention_bwd` against (issue 17).

Its structure is the usual FlashAttention-2 backward as Triton's fused-attention tutorial lays it
out (written here for this probe): `delta = rowsum(dO * O)` first, then ONE launch in which each
program computes dk and dv for a block of BLOCK_N1 keys (a loop over query blocks of BLOCK_M1)
and then dq for a block of BLOCK_M2 queries (a loop over key blocks of BLOCK_N2). Tessera runs the
two halves as two launches. Causal: only blocks on the diagonal are masked. Inputs are contiguous
`[batch * heads, seq, D]`; `lse` is the forward's base-2 log-sum-exp (`examples/attention.py`).

    dq, dk, dv = attention_bwd_reference(grad_out, q, k, v, out, lse, causal, blocks=(64, 128, 128, 64),
                                         num_warps=8, num_stages=3)
"""
from __future__ import annotations

import math
from typing import Any

import triton
import triton.language as tl


@triton.jit
def _delta_rows(O, DO, Delta, D: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, D)
    o = tl.load(O + rows[:, None] * D + cols[None, :]).to(tl.float32)
    do = tl.load(DO + rows[:, None] * D + cols[None, :]).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, axis=1))


@triton.jit
def _keys_step(k, v, dk, dv, Q, DO, Lse, Delta, first_query, first_key, qk_scale, D: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, MASKED: tl.constexpr):
    """One query block's share of a key block's dk and dv; scores are held transposed (keys x queries)."""
    queries = first_query + tl.arange(0, BM)
    cols = tl.arange(0, D)
    q = tl.load(Q + queries[:, None] * D + cols[None, :])
    do = tl.load(DO + queries[:, None] * D + cols[None, :])
    lse = tl.load(Lse + queries)
    p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
    if MASKED:
        keys = first_key + tl.arange(0, BN)
        p_t = tl.where(queries[None, :] >= keys[:, None], p_t, 0.0)
    dv = tl.dot(p_t.to(do.dtype), do, dv)
    dp_t = tl.dot(v, tl.trans(do))
    ds_t = p_t * (dp_t - tl.load(Delta + queries)[None, :])
    dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def _queries_step(q, do, lse, delta, dq, K, V, first_key, first_query, qk_scale, D: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, MASKED: tl.constexpr):
    """One key block's share of a query block's dq."""
    keys = first_key + tl.arange(0, BN)
    cols = tl.arange(0, D)
    k = tl.load(K + keys[:, None] * D + cols[None, :])
    v = tl.load(V + keys[:, None] * D + cols[None, :])
    p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
    if MASKED:
        queries = first_query + tl.arange(0, BM)
        p = tl.where(queries[:, None] >= keys[None, :], p, 0.0)
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
    return tl.dot(ds.to(k.dtype), k, dq)


@triton.jit
def attention_bwd_fused(Q, K, V, DO, DQ, DK, DV, Lse, Delta, seq, qk_scale, sm_scale, D: tl.constexpr,
                        BM1: tl.constexpr, BN1: tl.constexpr, BM2: tl.constexpr, BN2: tl.constexpr,
                        CAUSAL: tl.constexpr, STAGES: tl.constexpr):
    """Program (i, bh): dk, dv of keys [i * BN1, +BN1) and dq of queries [i * BM2, +BM2) of head bh."""
    head = tl.program_id(1).to(tl.int64)
    Q += head * seq * D
    K += head * seq * D
    V += head * seq * D
    DO += head * seq * D
    Lse += head * seq
    Delta += head * seq
    cols = tl.arange(0, D)
    # dk, dv of one key block
    first_key = tl.program_id(0) * BN1
    keys = first_key + tl.arange(0, BN1)
    k = tl.load(K + keys[:, None] * D + cols[None, :])
    v = tl.load(V + keys[:, None] * D + cols[None, :])
    dk = tl.zeros([BN1, D], tl.float32)
    dv = tl.zeros([BN1, D], tl.float32)
    start = 0
    if CAUSAL:
        for first_query in tl.range(first_key, first_key + BN1, BM1):
            dk, dv = _keys_step(k, v, dk, dv, Q, DO, Lse, Delta, first_query, first_key, qk_scale, D, BM1, BN1, True)
        start = first_key + BN1
    for first_query in tl.range(start, seq, BM1, num_stages=STAGES):
        dk, dv = _keys_step(k, v, dk, dv, Q, DO, Lse, Delta, first_query, first_key, qk_scale, D, BM1, BN1, False)
    tl.store(DK + head * seq * D + keys[:, None] * D + cols[None, :], (dk * sm_scale).to(DK.dtype.element_ty))
    tl.store(DV + head * seq * D + keys[:, None] * D + cols[None, :], dv.to(DV.dtype.element_ty))
    # dq of one query block
    first_query = tl.program_id(0) * BM2
    queries = first_query + tl.arange(0, BM2)
    q = tl.load(Q + queries[:, None] * D + cols[None, :])
    do = tl.load(DO + queries[:, None] * D + cols[None, :])
    lse = tl.load(Lse + queries)
    delta = tl.load(Delta + queries)
    dq = tl.zeros([BM2, D], tl.float32)
    end = first_query if CAUSAL else seq
    for first in tl.range(0, end, BN2, num_stages=STAGES):
        dq = _queries_step(q, do, lse, delta, dq, K, V, first, first_query, qk_scale, D, BM2, BN2, False)
    if CAUSAL:
        for first in tl.range(first_query, first_query + BM2, BN2):
            dq = _queries_step(q, do, lse, delta, dq, K, V, first, first_query, qk_scale, D, BM2, BN2, True)
    tl.store(DQ + head * seq * D + queries[:, None] * D + cols[None, :], (dq * sm_scale).to(DQ.dtype.element_ty))


def attention_bwd_reference(grad_out: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, causal: bool = False, *,
                            blocks: tuple[int, int, int, int] = (64, 128, 128, 64), num_warps: int = 8,
                            num_stages: int = 3) -> tuple[Any, Any, Any]:
    """(dq, dk, dv) for `[..., seq, D]` tensors with m == n (`blocks` = BM1, BN1, BM2, BN2; seq a
    multiple of each and BN1 == BM2, so the grid covers keys and queries alike)."""
    import torch

    seq, head_dim = q.shape[-2], q.shape[-1]
    q3, k3, v3, do3, o3 = (t.reshape(-1, seq, head_dim).contiguous() for t in (q, k, v, grad_out, out))
    heads = q3.shape[0]
    bm1, bn1, bm2, bn2 = blocks
    assert bn1 == bm2 and all(seq % b == 0 for b in blocks), "the probe handles whole blocks only"
    delta = torch.empty(heads, seq, dtype=torch.float32, device=q.device)
    _delta_rows[(heads * seq // 128,)](o3, do3, delta, D=head_dim, BLOCK=128, num_warps=8)
    dq, dk, dv = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
    sm_scale = 1.0 / math.sqrt(head_dim)
    attention_bwd_fused[(seq // bn1, heads)](
        q3, k3, v3, do3, dq, dk, dv, lse.contiguous(), delta, seq, sm_scale * 1.4426950408889634, sm_scale,
        D=head_dim, BM1=bm1, BN1=bn1, BM2=bm2, BN2=bn2, CAUSAL=causal, STAGES=num_stages, num_warps=num_warps,
        num_stages=num_stages)
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)
