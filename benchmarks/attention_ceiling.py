"""What a hand-written Triton attention forward reaches on this GPU, feature by feature, next to
`F.scaled_dot_product_attention` and Tessera's `examples/attention.py` under chosen Configs.

    PYTHONPATH=. python3 benchmarks/attention_ceiling.py --out $OUT [--quick]

The hand-written kernel below (written for this probe) switches one feature at a time: pointer
loads or TMA tensor descriptors, the key block, software-pipeline stages, `tl.range`'s warp
specialization. Its rows say which of them the generated code needs to match SDPA; the Tessera
rows say which Config reaches what. Writes `attention_ceiling.json` and each Tessera kernel's
generated code (`code_*.py`) under `--out`. Every result is checked against float32 SDPA.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable

import torch
import triton
import triton.language as tl


@triton.jit
def _block_step(q, k, v, m_i, l_i, acc, scale, offs_m, start_n, BN: tl.constexpr, MASKED: tl.constexpr):
    scores = tl.dot(q, tl.trans(k))
    if MASKED:
        keys = start_n + tl.arange(0, BN)
        scores = tl.where(offs_m[:, None] >= keys[None, :], scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1) * scale)
    p = tl.math.exp2(scores * scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _load_kv(K, V, k_desc, v_desc, first_row, offs_d, BN: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    if TMA:
        k = k_desc.load([first_row, 0])
        v = v_desc.load([first_row, 0])
    else:
        keys = first_row + tl.arange(0, BN)
        k = tl.load(K + keys[:, None] * D + offs_d[None, :])
        v = tl.load(V + keys[:, None] * D + offs_d[None, :])
    return k, v


@triton.jit
def probe_attention(Q, K, V, O, seq, scale, rows, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
                    CAUSAL: tl.constexpr, TMA: tl.constexpr, WS: tl.constexpr, STAGES: tl.constexpr):
    """One (query block, batch-head) per program over `[batch * heads * seq, D]` rows."""
    start_m = tl.program_id(0) * BM
    row0 = tl.program_id(1) * seq
    offs_m = start_m + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    if TMA:
        q_desc = tl.make_tensor_descriptor(Q, shape=[rows, D], strides=[D, 1], block_shape=[BM, D])
        k_desc = tl.make_tensor_descriptor(K, shape=[rows, D], strides=[D, 1], block_shape=[BN, D])
        v_desc = tl.make_tensor_descriptor(V, shape=[rows, D], strides=[D, 1], block_shape=[BN, D])
        q = q_desc.load([row0 + start_m, 0])
    else:
        k_desc = K  # unused without TMA
        v_desc = V
        q = tl.load(Q + (row0 + offs_m)[:, None] * D + offs_d[None, :])
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    end = start_m if CAUSAL else seq
    for start_n in tl.range(0, end, BN, num_stages=STAGES, warp_specialize=WS):
        k, v = _load_kv(K, V, k_desc, v_desc, row0 + start_n, offs_d, BN, D, TMA)
        m_i, l_i, acc = _block_step(q, k, v, m_i, l_i, acc, scale, offs_m, start_n, BN, False)
    if CAUSAL:
        for start_n in tl.range(start_m, start_m + BM, BN):
            k, v = _load_kv(K, V, k_desc, v_desc, row0 + start_n, offs_d, BN, D, TMA)
            m_i, l_i, acc = _block_step(q, k, v, m_i, l_i, acc, scale, offs_m, start_n, BN, True)
    out = (acc / l_i[:, None]).to(O.dtype.element_ty)
    tl.store(O + (row0 + offs_m)[:, None] * D + offs_d[None, :], out)


def run_probe(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, *, block_n: int, tma: bool,
              ws: bool, stages: int, warps: int = 8, block_m: int = 128) -> torch.Tensor:
    batch, heads, seq, dim = q.shape
    out = torch.empty_like(q)
    grid = (seq // block_m, batch * heads)
    probe_attention[grid](q, k, v, out, seq, 1.4426950408889634 / math.sqrt(dim), batch * heads * seq,
                          BM=block_m, BN=block_n, D=dim, CAUSAL=causal, TMA=tma, WS=ws, STAGES=stages,
                          num_warps=warps)
    return out


def measure(case: str, impl: str, flops: float, function: Callable[[], Any], ref: torch.Tensor) -> dict[str, Any]:
    """One printed row: `function`'s error against `ref`, its median time and TFLOP/s (or its error)."""
    entry: dict[str, Any] = {"case": case, "impl": impl}
    try:
        result = function()
        entry["rel_err"] = ((result.float() - ref).norm() / ref.norm()).item()
        entry["ms"] = triton.testing.do_bench(function, warmup=10, rep=50, return_mode="median")
        entry["tflops"] = flops / entry["ms"] / 1e9
    except Exception as error:  # noqa: BLE001 - one failing variant must not hide the others
        entry["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    print(json.dumps(entry), flush=True)
    return entry


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true", help="fewer probe variants")
    parser.add_argument("--skip-probe", action="store_true")
    parser.add_argument("--configs", default="", help="a Python list of Config kwargs dicts for Tessera rows")
    args = parser.parse_args()
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    import tessera
    from examples import attention as at
    import torch.nn.functional as F

    def allocate(size: int, alignment: int, stream: Any) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device="cuda")
    triton.set_allocator(allocate)
    rows: list[dict[str, Any]] = []

    def record(case: str, impl: str, flops: float, function: Callable[[], Any], ref: torch.Tensor) -> None:
        rows.append(measure(case, impl, flops, function, ref))

    variants = [(64, False, False, 3), (128, False, False, 3), (64, True, False, 3), (128, True, False, 3),
                (128, True, True, 3), (64, True, True, 3), (128, True, False, 2), (128, True, True, 2)]
    if args.quick:
        variants = [(128, False, False, 3), (128, True, False, 3), (128, True, True, 3)]
    configs = eval(args.configs) if args.configs else []  # noqa: S307 - a developer's command line
    for dim, causal in ((128, False), (128, True), (64, False), (64, True)):
        q, k, v = (torch.randn(4, 32, 4096, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        flops = 4.0 * 4 * 32 * 4096 * 4096 * dim / (2 if causal else 1)
        case = f"D{dim}{' causal' if causal else ''}"
        record(case, "sdpa", flops, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), ref)
        record(case, "tessera heuristic", flops, lambda: at.attention(q, k, v, causal), ref)
        bound = at.attention.bind(q, k, v, causal)
        from tessera.runtime.tuning import heuristic_for
        rows.append({"case": case, "impl": "heuristic config", "config": repr(heuristic_for(bound))})
        print(rows[-1], flush=True)
        with open(os.path.join(args.out, f"code_{dim}_{int(causal)}_heuristic.py"), "w") as handle:
            handle.write(bound.to_triton_code(heuristic_for(bound)))
        for index, options in enumerate(configs):
            kernel = tessera.kernel(at.attention.fn, config=tessera.Config(**options))
            record(case, f"tessera {options}", flops, lambda: kernel(q, k, v, causal), ref)
            if index == 0:
                with open(os.path.join(args.out, f"code_{dim}_{int(causal)}_config0.py"), "w") as handle:
                    handle.write(kernel.bind(q, k, v, causal).to_triton_code())
        if not args.skip_probe:
            for block_n, tma, ws, stages in variants:
                name = f"probe BN{block_n} {'tma' if tma else 'ptr'}{' ws' if ws else ''} st{stages}"
                record(case, name, flops, lambda: run_probe(q, k, v, causal, block_n=block_n, tma=tma, ws=ws,
                                                            stages=stages), ref)
        del q, k, v, ref
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "attention_ceiling.json"), "w") as handle:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
