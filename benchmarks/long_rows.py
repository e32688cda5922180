"""Row softmax with the row in one block vs in chunks (`Config.reduction_loops`), on long rows.

    PYTHONPATH=. python benchmarks/long_rows.py [--out benchmarks/results]

GPU only. For each shape (bf16) it times torch.softmax, torch.compile and Tessera's
`examples.softmax` under hand-written Configs: one block (rows up to 32768) and chunks of
1024..8192, at 4/8/16 warps, with CUDA-event timing (`triton.testing.do_bench`). Prints one JSON
line per shape and writes `long_rows_h100.json`. GB/s counts one read and one write of x.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import triton

import tessera
from examples.softmax import softmax

SHAPES = [(16384, 4096), (4096, 32768), (1024, 131072)]
CHUNKS = (None, 1024, 2048, 4096, 8192)
WARPS = (4, 8, 16)


def time_ms(function: Any) -> float:
    return triton.testing.do_bench(function, warmup=25, rep=100)


def measure(m: int, n: int) -> dict[str, Any]:
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    expected = torch.softmax(x.float(), -1).to(x.dtype)
    compiled = torch.compile(lambda t: torch.softmax(t, -1))
    compiled(x)
    entry: dict[str, Any] = {"shape": [m, n], "torch_ms": time_ms(lambda: torch.softmax(x, -1)),
                             "compile_ms": time_ms(lambda: compiled(x))}
    bound = softmax.bind(x)
    for chunk in CHUNKS:
        if chunk is None and n > 32768:
            continue  # one block of more than 32768 lanes: not offered by the space
        for warps in WARPS:
            config = tessera.Config(block_sizes=[1], num_warps=warps, num_stages=1, reduction_loops=[chunk])
            error = (bound.run(config).float() - expected.float()).abs().max().item()
            entry[f"chunk{chunk}_w{warps}"] = [time_ms(lambda: bound.run(config)), error]
    best = min(value[0] for key, value in entry.items() if key.startswith("chunk"))
    entry["best_ms"] = best
    entry["GBps_best"] = 2 * m * n * x.element_size() / (best * 1e-3) / 1e9
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    rows = []
    for m, n in SHAPES:
        rows.append(measure(m, n))
        print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(args.out, "long_rows_h100.json"), "w") as handle:
        json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
