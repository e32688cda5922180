"""Autotuner smoke test on a GPU: quick-tuning wall time, and heuristic vs tuned kernel time.

    python -m benchmarks.tune_smoke                       # softmax, add, rms_norm, layer_norm, matmul, attention
    python -m benchmarks.tune_smoke softmax add --effort quick --out $OUT

For each kernel at its `sizes["cuda"]` (bf16): time the heuristic Config (autotune_effort="none"),
run one tuning pass in a fresh cache directory (so it really tunes), time the tuned Config the
same way, and print a table (and `--out DIR`: DIR/tune_smoke.json). All kernels tune in one
process, so only the first pays for starting the worker pool. Targets (issue 7): quick tuning
<= 10 s per kernel on an H100, heuristic within 1.5x of tuned. The tuning time seen by a user's
first call, and the disk-cache hit of a second process, are measured by `tune_cache_hit.py`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time

import torch

from tessera import settings

KERNELS = {
    "softmax": ("examples.softmax", "EXAMPLE"),
    "add": ("examples.add", "EXAMPLE"),
    "rms_norm": ("examples.rms_norm", "EXAMPLE"),
    "layer_norm": ("examples.layer_norm", "FWD_EXAMPLE"),
    "matmul": ("examples.matmul", "EXAMPLE"),
    "attention": ("examples.attention", "EXAMPLE"),
}


def _median_ms(function) -> float:
    import triton.testing
    return float(triton.testing.do_bench(function, warmup=25, rep=200, return_mode="median"))


def _one(name: str, effort: str, budget: float, show_progress: bool) -> dict:
    from examples._harness import max_error
    from tessera.autotune.pipeline import TuneOptions, tune
    from tessera.runtime.tuning import heuristic_for
    module_name, attribute = KERNELS[name]
    example = getattr(importlib.import_module(module_name), attribute)
    inputs = example.make_inputs(**example.sizes["cuda"], dtype=torch.bfloat16, device="cuda")
    bound = example.run.bind(*inputs)
    heuristic = heuristic_for(bound)
    heuristic_ms = _median_ms(lambda: bound.run(heuristic))
    started = time.perf_counter()
    result = tune(bound, effort=effort, budget_seconds=budget, options=TuneOptions(progress=show_progress or None))
    tune_s = time.perf_counter() - started
    tuned_ms = _median_ms(lambda: bound.run(result.config))
    error = max_error(bound.run(result.config), example.reference(*inputs))
    return {"kernel": name, "tune_s": tune_s, "candidates": len(result.search.trials),
            "failed": sum(result.failures.values()), "heuristic_ms": heuristic_ms, "tuned_ms": tuned_ms,
            "ratio": heuristic_ms / tuned_ms, "max_err": error, "heuristic": heuristic, "tuned": result.config,
            "phases": result.phases}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=list(KERNELS))
    parser.add_argument("--effort", default="quick", choices=("quick", "full"))
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--out", help="write DIR/tune_smoke.json")
    parser.add_argument("--progress", action="store_true", help="draw progress bars (default: only on a terminal)")
    options = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as cache, settings.override(cache_dir=cache):
        for name in options.kernels:
            try:
                rows.append(_one(name, options.effort, options.budget, options.progress))
            except Exception as error:  # noqa: BLE001 - report and go on to the next kernel
                print(f"{name}: FAILED {type(error).__name__}: {error}", file=sys.stderr)
    print(f"{'kernel':<11} {'tune s':>7} {'cands':>5} {'fail':>4} {'heur ms':>9} {'tuned ms':>9} {'heur/tuned':>10} {'max err':>8}")
    for row in rows:
        print(f"{row['kernel']:<11} {row['tune_s']:>7.1f} {row['candidates']:>5} {row['failed']:>4} "
              f"{row['heuristic_ms']:>9.4f} {row['tuned_ms']:>9.4f} {row['ratio']:>10.2f} {row['max_err']:>8.3g}")
    for row in rows:
        print(f"{row['kernel']}: heuristic {row['heuristic']}\n{' ' * len(row['kernel'])}  tuned     {row['tuned']}")
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    if options.out:
        os.makedirs(options.out, exist_ok=True)
        with open(os.path.join(options.out, "tune_smoke.json"), "w", encoding="utf-8") as handle:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "effort": options.effort,
                       "kernels": rows}, handle, indent=1, default=str)


if __name__ == "__main__":
    main()
