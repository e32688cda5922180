"""Issue 17 item 3: Configs of the GEMM examples side by side with hand-written Triton at one Config.

    PYTHONPATH=. python3 benchmarks/gemm_probe.py --out $OUT [--compile-only]
    PYTHONPATH=. python3 benchmarks/gemm_probe.py --smoke      # CPU, Triton's interpreter, tiny shapes

For each shape: `examples.matmul` (or `examples.bmm`) under its heuristic Config and under that
Config with some keys replaced (TMA descriptors, persistent programs, stages, l2 grouping, tiles),
and a hand-written Triton matmul (`_triton_kernels.tiled_matmul`: pointer or TMA loads, one tile
per program or persistent) at the heuristic's tiles, warps and stages: what the compiler would
reach if it emitted nothing beyond that kernel. Kernel times from CUDA-graph replay (median of
`do_bench_cudagraph`); every result checked against float32 torch at the benchmark size.
Writes `gemm_probe.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# overrides of the heuristic Config tried at every matmul shape
MATMUL_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"indexing": "tensor_descriptor"},
    {"pid_type": "persistent_interleaved"},
    {"indexing": "tensor_descriptor", "pid_type": "persistent_interleaved"},
    {"indexing": "tensor_descriptor", "num_stages": 4},
    {"l2_grouping": 16},
    {"block_sizes": [128, 128, 64], "num_warps": 8, "num_stages": 4},
    {"block_sizes": [128, 256, 64], "num_warps": 8, "num_stages": 3, "indexing": "tensor_descriptor"},
)
BMM_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"indexing": "tensor_descriptor"},
    {"block_sizes": [1, 128, 128, 64], "num_warps": 8, "num_stages": 4},
    {"block_sizes": [1, 128, 128, 64], "num_warps": 4, "num_stages": 4},
    {"block_sizes": [1, 128, 256, 64], "num_warps": 8, "num_stages": 3, "indexing": "tensor_descriptor"},
)
MATMUL_SHAPES = ((4096, 4096, 4096), (16384, 4096, 4096), (4096, 14336, 4096), (1024, 14336, 4096))
BMM_SHAPES = ((32, 1024, 1024, 1024), (64, 512, 512, 128))
SMOKE_MATMUL = ((64, 96, 80),)
SMOKE_BMM = ((2, 32, 48, 64),)


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
    from examples.bmm import bmm
    from examples.matmul import matmul

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
        for m, n, k in SMOKE_MATMUL if args.smoke else MATMUL_SHAPES:
            x = torch.randn(m, k, device=device).to(dtype)
            y = (torch.randn(k, n, device=device) / k ** 0.5).to(dtype)
            expected = x.float() @ y.float()
            shape, flops = f"{dtype_name} M{m} N{n} K{k}", 2.0 * m * n * k
            heuristic = matmul.choose_config(mode, (x, y), {})
            timed("torch.mm", shape, flops, lambda x=x, y=y: torch.mm(x, y), expected)
            for overrides in MATMUL_VARIANTS:
                config = heuristic.merged(**overrides)
                forced = tessera.kernel(matmul.fn, config=config)
                timed(f"tessera {overrides or 'heuristic'}", shape, flops, lambda f=forced, x=x, y=y: f(x, y), expected)
            blocks = heuristic["block_sizes"]
            for tma in (False, True):
                for persistent in (False, True):
                    label = (f"triton {'tma' if tma else 'pointer'}{' persistent' if persistent else ''} "
                             f"{blocks} w{heuristic['num_warps']} s{heuristic['num_stages']}")
                    timed(label, shape, flops, lambda x=x, y=y, t=tma, p=persistent: run_tiled_matmul(
                        x, y, blocks, heuristic["num_warps"], heuristic["num_stages"], tma=t, persistent=p), expected)
            if not args.smoke:
                print(f"    heuristic {heuristic}", flush=True)
            del x, y, expected
        for batch, m, n, k in SMOKE_BMM if args.smoke else BMM_SHAPES:
            a = torch.randn(batch, m, k, device=device).to(dtype)
            b = (torch.randn(batch, k, n, device=device) / k ** 0.5).to(dtype)
            expected = torch.bmm(a.float(), b.float())
            shape, flops = f"{dtype_name} B{batch} M{m} N{n} K{k}", 2.0 * batch * m * n * k
            heuristic = bmm.choose_config(mode, (a, b), {})
            timed("torch.bmm", shape, flops, lambda a=a, b=b: torch.bmm(a, b), expected)
            for overrides in BMM_VARIANTS:
                forced = tessera.kernel(bmm.fn, config=heuristic.merged(**overrides))
                timed(f"tessera {overrides or 'heuristic'}", shape, flops, lambda f=forced, a=a, b=b: f(a, b), expected)
            if not args.smoke:
                print(f"    heuristic {heuristic}", flush=True)
    if args.compile_only:
        return 0
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gemm_probe_smoke.json" if args.smoke else "gemm_probe.json")
    with open(path, "w") as handle:
        json.dump({"device": torch.cuda.get_device_name() if not args.smoke else "cpu", "rows": rows}, handle, indent=1)
    print(f"wrote {path}")
    return 1 if any(row.get("wrong") for row in rows) else 0


def _kernel_ms(function: Callable[[], Any], smoke: bool) -> float:
    if smoke:
        return float("nan")
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(function, rep=50, return_mode="median"))


if __name__ == "__main__":
    sys.exit(main())
