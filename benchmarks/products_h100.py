"""Issue 4's GPU check: matmul 4096^3 bf16 and attention B4 H32 S4096 D128 bf16 with a
hand-picked Config, against torch (cuBLAS, scaled_dot_product_attention) and torch.compile,
timed side by side with triton.testing.do_bench (median, L2 flushed between runs).

    PYTHONPATH=. python3 benchmarks/products_h100.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

import tessera
from examples import attention as attention_example
from examples import matmul as matmul_example

MATMUL_CONFIG = tessera.Config(block_sizes=[128, 256, 64], num_warps=8, num_stages=3, l2_grouping=8)
ATTENTION_CONFIG = tessera.Config(block_sizes=[128, 64], num_warps=8, num_stages=3)


def bench(function) -> float:
    import triton.testing
    return float(triton.testing.do_bench(function, warmup=25, rep=200, return_mode="median"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    rows = []
    torch.manual_seed(0)

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    matmul = tessera.kernel(matmul_example.matmul.fn, config=MATMUL_CONFIG)
    start = time.perf_counter()
    error = float((matmul(a, b).float() - (a @ b).float()).abs().max())
    first_call = time.perf_counter() - start
    compiled_mm = torch.compile(lambda x, y: x @ y)
    flops = 2 * 4096 ** 3
    for name, fn in (("tessera", lambda: matmul(a, b)), ("torch (cuBLAS)", lambda: a @ b),
                     ("torch.compile", lambda: compiled_mm(a, b))):
        ms = bench(fn)
        rows.append({"kernel": "matmul 4096^3 bf16", "impl": name, "ms": ms, "tflops": flops / ms / 1e9})
    rows[-3]["max_abs_error"], rows[-3]["first_call_s"] = error, first_call

    batch, heads, seq, dim = 4, 32, 4096, 128
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    attention = tessera.kernel(attention_example.attention.fn, config=ATTENTION_CONFIG)
    compiled_sdpa = torch.compile(lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c))
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        error = float((attention(q, k, v, causal).float() - expected.float()).abs().max())
        flops = 4 * batch * heads * seq * seq * dim / (2 if causal else 1)
        label = f"attention B4 H32 S4096 D128 bf16{' causal' if causal else ''}"
        for name, fn in (("tessera", lambda: attention(q, k, v, causal)),
                         ("torch SDPA", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                         ("torch.compile", lambda: compiled_sdpa(q, k, v, causal))):
            ms = bench(fn)
            rows.append({"kernel": label, "impl": name, "ms": ms, "tflops": flops / ms / 1e9})
        rows[-3]["max_abs_error"] = error

    print(f"{'kernel':<40} {'impl':<16} {'ms':>8} {'TFLOP/s':>8}")
    for row in rows:
        print(f"{row['kernel']:<40} {row['impl']:<16} {row['ms']:>8.3f} {row['tflops']:>8.1f}"
              + (f"  max err {row['max_abs_error']:.3g}" if "max_abs_error" in row else ""))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "products_h100.json"), "w") as handle:
        json.dump({"device": torch.cuda.get_device_name(), "configs": {"matmul": repr(MATMUL_CONFIG),
                   "attention": repr(ATTENTION_CONFIG)}, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
