"""Mixture-of-experts layer, top-k routed: gather tokens, one GEMM per expert, scatter-add back.

The host sorts the (token, expert, gate) assignments by expert, so expert `e` owns the slots
`expert_offsets[e]:expert_offsets[e + 1]`. One program per expert (`hl.grid`) reads its slot
range with `hl.load`, gathers its tokens with an index tensor (`x[tokens, tile_k]`), multiplies
them by its own weight `w[e]`, scales by the gates and adds the rows into `out[tokens]` with
`hl.atomic_add` (a token routed to k experts receives k additions).
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import DOT_TOLERANCES, Example, run_examples


@tessera.kernel
def moe_kernel(x: torch.Tensor, w: torch.Tensor, token_of_slot: torch.Tensor, gate_of_slot: torch.Tensor,
               expert_offsets: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`out[t] += gate * (x[t] @ w[e])` for each slot (t, e, gate); `out` is float32 and zeroed."""
    num_experts, hidden, out_features = w.size()
    for expert in hl.grid(num_experts):
        start = hl.load(expert_offsets, [expert])
        end = hl.load(expert_offsets, [expert + 1])
        for tile_s, tile_n in hl.tile([start, 0], [end, out_features]):
            tokens = token_of_slot[tile_s]
            acc = hl.zeros([tile_s, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(hidden):
                acc = torch.addmm(acc, x[tokens, tile_k], w[expert, tile_k, tile_n])
            gates = gate_of_slot[tile_s].to(torch.float32)
            hl.atomic_add(out, [tokens, tile_n], acc * gates[:, None])
    return out


def route(router_logits: torch.Tensor, top_k: int, num_experts: int) -> tuple[torch.Tensor, ...]:
    """Top-k routing, sorted by expert: (token of each slot, gate of each slot, expert offsets)."""
    gates, experts = torch.topk(torch.softmax(router_logits.float(), dim=-1), top_k, dim=-1)
    order = torch.argsort(experts.reshape(-1), stable=True)
    token_of_slot = torch.arange(router_logits.size(0), device=router_logits.device).repeat_interleave(top_k)[order]
    counts = torch.bincount(experts.reshape(-1), minlength=num_experts)
    expert_offsets = torch.zeros(num_experts + 1, dtype=torch.int64, device=router_logits.device)
    expert_offsets[1:] = torch.cumsum(counts, dim=0)
    return token_of_slot, gates.reshape(-1)[order], expert_offsets


def moe(x: torch.Tensor, w: torch.Tensor, router_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """The layer: `[tokens, hidden]` -> `[tokens, out_features]` in `x.dtype`."""
    token_of_slot, gate_of_slot, expert_offsets = route(router_logits, top_k, w.size(0))
    out = torch.zeros(x.size(0), w.size(2), dtype=torch.float32, device=x.device)
    return moe_kernel(x, w, token_of_slot, gate_of_slot, expert_offsets, out).to(x.dtype)


def reference(x: torch.Tensor, w: torch.Tensor, router_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """The same routing, then one float32 matmul per (token, expert) pair."""
    gates, experts = torch.topk(torch.softmax(router_logits.float(), dim=-1), top_k, dim=-1)
    out = torch.zeros(x.size(0), w.size(2), dtype=torch.float32, device=x.device)
    for choice in range(top_k):
        per_token_weight = w.float()[experts[:, choice]]  # [tokens, hidden, out_features]
        out += gates[:, choice, None] * torch.bmm(x.float()[:, None, :], per_token_weight)[:, 0]
    return out.to(x.dtype)


def make_inputs(
    tokens: int, hidden: int, out_features: int, num_experts: int, top_k: int, *, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Tokens, per-expert weights `[experts, hidden, out_features]`, router logits, and k."""
    x = torch.randn(tokens, hidden).to(dtype)
    w = (torch.randn(num_experts, hidden, out_features) / hidden ** 0.5).to(dtype)
    router_logits = torch.randn(tokens, num_experts)
    return x.to(device), w.to(device), router_logits.to(device), top_k


EXAMPLE = Example(
    "moe",
    run=moe,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"tokens": 64, "hidden": 64, "out_features": 48, "num_experts": 4, "top_k": 2},
        "cuda": {"tokens": 4096, "hidden": 1024, "out_features": 1024, "num_experts": 8, "top_k": 2},
    },
    tolerances=DOT_TOLERANCES,
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
