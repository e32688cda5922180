"""Issue 17 item 3: Configs of the GEMM examples side by side with hand-written Triton at one Config.

    PYTHONPATH=. python3 benchmarks/gemm_probe.py --out $OUT [--compile-only]
    PYTHONPATH=. python3 benchmarks/gemm_probe.py --smoke      # CPU, Triton's interpreter, tiny shapes

For each case of `CASES` (a shape of `examples.matmul`, `examples.bmm` or the sweep's fp8 kernel
with per-tensor scales): the torch call, the kernel under its heuristic Config and under that
Config with some keys replaced (tiles, stages, TMA descriptors, persistent programs, split_k), and
at 4096^3 a hand-written Triton matmul (`_triton_kernels.tiled_matmul`: pointer loads, or TMA
and persistent) at the heuristic's tiles, warps and stages: what the compiler would reach if it
emitted nothing beyond that kernel. Kernel times from CUDA-graph replay (median of
`do_bench_cudagraph`); every result checked against float32 torch at the benchmark size.
Writes `gemm_probe.json`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (family, shape, overrides of the heuristic Config): the gaps of session 11's first sweep
# (results/issue17/gemm_session11.md) and the candidates for each
CASES: tuple[tuple[str, tuple[int, ...], tuple[dict[str, Any], ...]], ...] = (
    ("matmul", (4096, 4096, 4096), ({}, {"num_stages": 4}, {"block_sizes": [256, 128, 64]}, {"l2_grouping": 4},
                                    {"indexing": "tensor_descriptor", "pid_type": "persistent_interleaved"})),
    ("matmul", (128, 11008, 4096), ({}, {"block_sizes": [128, 64, 128], "num_warps": 4, "num_stages": 4},
                                    {"block_sizes": [128, 64, 64], "num_warps": 4, "num_stages": 4},
                                    {"block_sizes": [64, 128, 128], "num_warps": 4, "num_stages": 4},
                                    {"split_k": 2})),
    ("bmm", (32, 1024, 1024, 1024), ({}, {"indexing": "tensor_descriptor"}, {"num_stages": 4},
                                     {"block_sizes": [128, 128, 64], "num_warps": 8, "num_stages": 4})),
    ("bmm", (64, 512, 512, 128), ({}, {"block_sizes": [128, 128, 128], "num_warps": 8, "num_stages": 2},
                                  {"block_sizes": [128, 128, 64], "num_warps": 4, "num_stages": 3},
                                  {"block_sizes": [64, 128, 128], "num_warps": 4, "num_stages": 2})),
    ("bmm", (8, 2048, 2048, 2048), ({}, {"indexing": "tensor_descriptor"})),
    ("fp8", (128, 11008, 4096), ({}, {"block_sizes": [128, 128, 64]},
                                 {"block_sizes": [128, 64, 128], "num_warps": 4, "num_stages": 4})),
    ("fp8", (128, 4096, 11008), ({}, {"block_sizes": [64, 64, 256]}, {"split_k": 2},
                                 {"block_sizes": [128, 64, 128], "num_warps": 4, "num_stages": 4})),
    ("fp8", (16, 4096, 4096), ({}, {"block_sizes": [16, 64, 256]}, {"split_k": 4})),
)
SMOKE_SHAPES = {"matmul": (64, 96, 80), "bmm": (2, 32, 48, 64), "fp8": (16, 64, 96)}
HAND_WRITTEN_AT = (4096, 4096, 4096)  # the matmul shape also timed as hand-written Triton


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(_ROOT, "benchmarks", "results", "issue17"))
    parser.add_argument("--dtypes", nargs="*", default=["bfloat16"])
    parser.add_argument("--compile-only", action="store_true", help="run each variant once, time nothing")
    parser.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, tiny shapes")
    args = parser.parse_args()
    if args.smoke:
        if args.dtypes == ["bfloat16"]:  # Triton 3.6's interpreter computes bf16 dots of raw Triton wrongly
            args.dtypes = ["float16"]
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    sys.path.insert(0, _ROOT)
    import torch

    import tessera
    from benchmarks._triton_kernels import run_tiled_matmul

    device = "cpu" if args.smoke else "cuda"
    mode = "interpret" if args.smoke else "compiled"
    rows: list[dict[str, Any]] = []

    def timed(label: str, shape: str, flops: float, function: Callable[[], Any], expected: Any) -> None:
        row: dict[str, Any] = {"variant": label, "shape": shape}
        try:
            result = function()
            if args.compile_only:
                return
            error = ((result.float() - expected).norm() / expected.norm()).item()
            row.update(rel_err=error, wrong=error > 2e-2, ms=_kernel_ms(function, args.smoke))
            row["tflops"] = flops / row["ms"] / 1e9
        except Exception as failure:  # noqa: BLE001 - one failing variant must not hide the others
            row["error"] = f"{type(failure).__name__}: {str(failure)[:300]}"
        rows.append(row)
        print(f"{shape:26s} {label:70s} {row.get('ms', float('nan')):9.4f} ms {row.get('tflops', 0):7.1f} TFLOP/s"
              f"{' WRONG' if row.get('wrong') else ''} {row.get('error', '')}", flush=True)

    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for family, full_shape, variants in CASES:
            shape = SMOKE_SHAPES[family] if args.smoke else full_shape
            kernel, inputs, expected, reference = _case(torch, family, shape, dtype, device, args.smoke)
            label = f"{family} {dtype_name if family != 'fp8' else 'e4m3'} {' x '.join(map(str, shape))}"
            flops = 2.0 * math.prod(shape)
            heuristic = kernel.choose_config(mode, inputs, {})
            if reference is not None:
                timed("torch", label, flops, reference, expected)
            for overrides in variants:
                forced = tessera.kernel(kernel.fn, config=heuristic.merged(**overrides))
                timed(f"tessera {overrides or 'heuristic'}", label, flops,
                      lambda f=forced, inputs=inputs: f(*inputs), expected)
            if family == "matmul" and (args.smoke or full_shape == HAND_WRITTEN_AT):
                blocks = heuristic["block_sizes"]
                for tma, persistent in ((False, False), (True, True)):
                    timed(f"triton {'tma persistent' if tma else 'pointer'} {blocks} w{heuristic['num_warps']} "
                          f"s{heuristic['num_stages']}", label, flops,
                          lambda x=inputs[0], y=inputs[1], t=tma, p=persistent: run_tiled_matmul(
                              x, y, blocks, heuristic["num_warps"], heuristic["num_stages"], tma=t, persistent=p),
                          expected)
            print(f"    heuristic {heuristic}", flush=True)
    if args.compile_only:
        return 0
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gemm_probe_smoke.json" if args.smoke else "gemm_probe.json")
    with open(path, "w") as handle:
        json.dump({"device": torch.cuda.get_device_name() if not args.smoke else "cpu", "rows": rows}, handle, indent=1)
    print(f"wrote {path}")
    return 1 if any(row.get("wrong") for row in rows) else 0


def _case(torch: Any, family: str, shape: tuple[int, ...], dtype: Any, device: str, smoke: bool) -> tuple:
    """(kernel, inputs, float32 expected result, the torch call it is compared with or None)."""
    if family == "bmm":
        from examples.bmm import bmm

        batch, m, n, k = shape
        a = torch.randn(batch, m, k, device=device).to(dtype)
        b = (torch.randn(batch, k, n, device=device) / k ** 0.5).to(dtype)
        return bmm, (a, b), torch.bmm(a.float(), b.float()), lambda: torch.bmm(a, b)
    m, n, k = shape
    if family == "matmul":
        from examples.matmul import matmul

        x = torch.randn(m, k, device=device).to(dtype)
        y = (torch.randn(k, n, device=device) / k ** 0.5).to(dtype)
        return matmul, (x, y), x.float() @ y.float(), lambda: torch.mm(x, y)
    from benchmarks.gemm_sweep import fp8_kernel  # per-tensor scales, as the sweep's fp8 rows

    e4m3 = torch.float8_e4m3fn
    x = torch.randn(m, k, device=device).clamp(-4, 4).to(e4m3)
    y = torch.randn(n, k, device=device).clamp(-4, 4).to(e4m3).t()
    scale_x, scale_y = torch.full((1, 1), 0.5, device=device), torch.full((1, 1), 1.0 / k ** 0.5, device=device)
    expected = (x.float() @ y.float()) * scale_x * scale_y
    reference = None if smoke else (lambda: torch._scaled_mm(x, y, scale_x[0, 0], scale_y[0, 0], out_dtype=torch.bfloat16))
    return fp8_kernel(), (x, y, scale_x.expand(m, 1), scale_y.expand(1, n)), expected, reference


def _kernel_ms(function: Callable[[], Any], smoke: bool) -> float:
    if smoke:
        return float("nan")
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(function, rep=50, return_mode="median"))


if __name__ == "__main__":
    sys.exit(main())
