"""A long shape-fuzz run of the variant cache on the GPU, checked call by call against PyTorch.

    python3 benchmarks/fuzz_gpu.py                                  # 400 calls per kernel, seed 0
    python3 benchmarks/fuzz_gpu.py --calls 2000 --seed 3 --budget-s 540 --out $OUT
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 \\
        python3 benchmarks/fuzz_gpu.py --calls 40
    python3 benchmarks/fuzz_gpu.py --device cpu --calls 5           # interpret mode: checks the script

Runs the targets of `tests/test_fuzz.py` (`TARGETS`, `fuzz`: add, softmax, layer_norm_fwd,
layer_norm_bwd, matmul), each a fresh kernel with no cap on variants, on seeded random walks of
sizes, dtypes and layouts, in compiled mode on CUDA (interpret mode on CPU). Prints, per kernel,
the calls made, the variants compiled and the failures, then each failure; exits 1 if any call
failed (a wrong answer or an error), else 0.

Calls run the heuristic Config (TESSERA_AUTOTUNE_EFFORT=none is forced): tuning would start
worker processes, which compute-sanitizer would follow, and the fuzz checks results, not speed.
Under memcheck set PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that every tensor is its own allocation
and an access past a tensor's end is caught rather than landing in the caching allocator's pool.
Generated sources go to a fresh TESSERA_CACHE_DIR unless one is set. `--budget-s` shares a time
limit among the kernels: each stops starting calls when its share is spent.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load_fuzz_module() -> ModuleType:
    """tests/test_fuzz.py, loaded by path: `tests` is no package, and a `tests` package installed
    elsewhere on the path would shadow a namespace import."""
    spec = importlib.util.spec_from_file_location("test_fuzz", ROOT / "tests" / "test_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per kernel (default 400)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random walks (default 0)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--kernels", nargs="+", default=None, help="fuzz only these targets")
    parser.add_argument("--largest", type=int, default=None,
                        help="largest size a walk reaches (default: 2048 on CUDA, 130 on CPU)")
    parser.add_argument("--max-failures", type=int, default=5, help="failing calls per kernel before it stops")
    parser.add_argument("--budget-s", type=float, default=None, help="time limit shared among the kernels")
    parser.add_argument("--out", default=None, help="also write the summary to DIR/fuzz_gpu.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.environ["TESSERA_AUTOTUNE_EFFORT"] = "none"
    os.environ.setdefault("TESSERA_CACHE_DIR", tempfile.mkdtemp(prefix="tessera-fuzz-cache-"))
    sys.path.insert(0, str(ROOT))
    import torch

    from tessera import settings

    fuzz_module = _load_fuzz_module()
    targets = fuzz_module.TARGETS
    names = args.kernels or list(targets)
    unknown = sorted(set(names) - set(targets))
    if unknown:
        print(f"unknown kernels {unknown}; choose from {list(targets)}", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    mode = "compiled" if device.type == "cuda" else "interpret"
    largest = args.largest or fuzz_module.largest_size(device)
    # zero-row layer norms: var_mean warns about zero degrees of freedom, then gives the right (empty) answer
    warnings.filterwarnings("ignore", message=r"var_mean\(\): degrees of freedom")
    print(f"fuzz on {device} ({mode}), seed {args.seed}, {args.calls} calls per kernel, sizes up to {largest}",
          flush=True)
    print(f"{'kernel':<16} {'calls':>6} {'variants':>9} {'failures':>9} {'seconds':>8}", flush=True)
    start = time.monotonic()
    reports = []
    with settings.override(mode=mode):
        for position, name in enumerate(names):
            deadline = None
            if args.budget_s is not None:
                remaining = args.budget_s - (time.monotonic() - start)
                deadline = time.monotonic() + remaining / (len(names) - position)
            began = time.monotonic()
            report = fuzz_module.fuzz(targets[name], device, args.calls, seed=args.seed, largest=largest,
                                      max_failures=args.max_failures, deadline=deadline)
            seconds = time.monotonic() - began
            short = "  (budget spent)" if report.calls < args.calls and not report.failures else ""
            print(f"{name:<16} {report.calls:>6} {report.variants:>9} {len(report.failures):>9} "
                  f"{seconds:>8.1f}{short}", flush=True)
            reports.append((report, seconds))
    failures = [(report.name, failure) for report, _ in reports for failure in report.failures]
    print(f"{'total':<16} {sum(r.calls for r, _ in reports):>6} {sum(r.variants for r, _ in reports):>9} "
          f"{len(failures):>9} {time.monotonic() - start:>8.1f}")
    for name, failure in failures:
        print(f"FAIL {name}: {failure}")
    if args.out:
        summary = {"device": str(device), "mode": mode, "seed": args.seed, "calls_per_kernel": args.calls,
                   "largest": largest, "kernels": [
                       {"name": r.name, "calls": r.calls, "variants": r.variants, "seconds": round(s, 2),
                        "failures": r.failures} for r, s in reports]}
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "fuzz_gpu.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("OK: every call agreed with PyTorch" if not failures else f"FAILED: {len(failures)} call(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
