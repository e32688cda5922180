"""Helion's int4_gemm example under several Configs on the H100, beside torch (issue 15, session 13).

    PYTHONPATH=. python3 benchmarks/int4_gemm_configs.py .helion_examples --out $OUT
    PYTHONPATH=. python3 benchmarks/int4_gemm_configs.py /path/to/helion/examples --smoke   # CPU interpreter

The example file is read from the given folder and its imports rewritten in memory, as the examples
runner does (benchmarks/helion_examples.py); nothing of it is saved. At the example's large size
(8192^3, bf16 x packed int4) the heuristic Config ran 4.23 ms against torch's 1.66 ms (session 12).
Read offline for sm_90 (session 13): the heuristic's [Kp 64, M 128, N 256], 8 warps, 3 stages takes
255 registers a thread and 196608 B of shared memory, so one program runs per SM, and the unpacked
operand is stored to shared memory each step and the product waited on at once (`pendings = 0`):
the unpacking and the tensor cores take turns. The candidates below trade tile size for two programs
per SM (each one's unpacking beside the other's products); ptxas's registers / Triton's shared bytes,
offline: [32, 128, 128] w8 s4 124 regs 94208 B; w4 233 regs; [32, 128, 256] w8 s3 221 regs 98304 B;
[64, 128, 128] w8 s3 180 regs 147456 B.

Each row: Config, median ms (`do_bench`), ratio torch / Tessera, and whether the result matched the
example's reference (a wrong result is printed WRONG, never hidden). Writes int4_gemm_configs.json.
"""
from __future__ import annotations

import argparse
import ast
import os
import pathlib
import sys
import types
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._results import write_json  # noqa: E402
from benchmarks._timing import median_ms  # noqa: E402
from benchmarks.helion_examples import rewrite_imports  # noqa: E402

# block_sizes are [K packed (the hl.register_block_size), M, N]
CANDIDATES = (
    dict(block_sizes=[64, 128, 256], num_warps=8, num_stages=3),
    dict(block_sizes=[32, 128, 128], num_warps=8, num_stages=4),
    dict(block_sizes=[32, 128, 128], num_warps=4, num_stages=4),
    dict(block_sizes=[64, 128, 128], num_warps=8, num_stages=3),
    dict(block_sizes=[32, 128, 256], num_warps=8, num_stages=3),
    dict(block_sizes=[32, 128, 256], num_warps=8, num_stages=4),
    dict(block_sizes=[64, 128, 128], num_warps=4, num_stages=4),
    dict(block_sizes=[32, 256, 128], num_warps=8, num_stages=3),
)
SIZES = ((8192, 8192, 8192), (4, 8192, 7168))
SMOKE_SIZES = ((37, 64, 48),)


def load_example(folder: str) -> types.ModuleType:
    path = pathlib.Path(folder) / "int4_gemm.py"
    module = types.ModuleType("int4_gemm_example")
    module.__file__ = str(path)
    exec(compile(ast.parse(rewrite_imports(path.read_text()), filename=str(path)), str(path), "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("examples", help="a Helion checkout's examples/ folder")
    parser.add_argument("--out", default=".")
    parser.add_argument("--smoke", action="store_true", help="CPU: Triton's interpreter, a tiny size")
    args = parser.parse_args()
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    import torch

    import tessera
    from tessera.runtime.tuning import heuristic_for
    example = load_example(args.examples)
    device = "cpu" if args.smoke else "cuda"
    mode = "interpret" if args.smoke else "compiled"
    rows: list[dict[str, Any]] = []
    for m, k, n in SMOKE_SIZES if args.smoke else SIZES:
        torch.manual_seed(0)
        a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        b = example._pack_int4_matrix(torch.randint(-8, 8, (k, n), dtype=torch.int8, device=device))
        expected = example.reference_matmul_bf16_int4(a, b)
        torch_ms = median_ms(lambda: example.reference_matmul_bf16_int4(a, b), args.smoke)
        print(f"M={m} K={k} N={n}: torch {torch_ms:.4f} ms", flush=True)
        configs: list[Any] = [None, *(tessera.Config(**c) for c in CANDIDATES)]
        for config in configs:
            kernel = tessera.kernel(example.matmul_bf16_int4.fn, static_shapes=False, mode=mode,
                                    **({"config": config} if config is not None else {}))
            name = "heuristic" if config is None else str(config)
            try:
                result = kernel(a, b)
                right = bool(torch.allclose(result.float(), expected.float(), rtol=1e-2, atol=1e-1))
                ms = median_ms(lambda: kernel(a, b), args.smoke)
            except Exception as error:  # a Config that does not fit is a row, not the end of the sweep
                print(f"  {name}: {type(error).__name__}: {str(error).splitlines()[0][:160]}", flush=True)
                rows.append({"size": [m, k, n], "config": name, "error": str(error)[:300]})
                continue
            if config is None:
                name += f" {heuristic_for(kernel.bind(a, b), interpreted=args.smoke)}"
            print(f"  {name}: {ms:.4f} ms  torch/tessera {torch_ms / ms:.2f}{'' if right else '  WRONG'}", flush=True)
            rows.append({"size": [m, k, n], "config": name, "ms": ms, "torch_ms": torch_ms, "right": right})
    print(write_json(rows, args.out, "int4_gemm_configs"))


if __name__ == "__main__":
    main()
