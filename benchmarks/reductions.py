"""Issue 17 items 5 and 6: reductions with heavy epilogues against a device copy, and their tuning.

    PYTHONPATH=<tree> python3 benchmarks/reductions.py --tree <tree> --label new --out $OUT \\
        [--quick] [--full SECONDS] [--configs JSON] [--only layer_norm_bwd ...]
    python benchmarks/reductions.py --tree . --label smoke --smoke      # CPU interpreter, tiny sizes

Cases (bf16): `examples.layer_norm.layer_norm_bwd` 16384 x 4096, `examples.cross_entropy`
(losses kernel + mean) 4096 x 32000, `examples.rms_norm.rms_norm_bwd` 16384 x 4096. Per case:
- `tessera default`: the heuristic Config (`TESSERA_AUTOTUNE_EFFORT=none`), its output checked
  against the example's float32 reference at the benchmark size;
- `device copy`: `copy_` of a uint8 buffer holding the bytes the kernel must move (every input
  read once, every output written once): the HBM ceiling; `of_copy` = copy ms / row ms;
- `--configs '{"case": [{Config kwargs}, ...]}'`: a row per given Config (e.g. a long search's best);
- `--quick`: a quick tuning run (`tessera.autotune.pipeline.tune`, effort quick), its wall time,
  and its Config timed here; `--full S`: a full search of S seconds seeded with `SWEEP[case]`,
  its best Config timed here, every trial written to `reductions_<label>_trials.json`.
Every timed Config's output is checked too. Times: median of `triton.testing.do_bench` (CUDA
events, L2 flushed between repetitions). `--tree` picks the repository copy to import, so two
versions of the compiler can be compared in one device call (run once per tree).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any, Callable

from _timing import median_ms  # benchmarks/, the script's folder

CASES: dict[str, dict[str, Any]] = {
    "layer_norm_bwd": {"module": "examples.layer_norm", "kernel": "layer_norm_bwd", "make": "make_bwd_inputs",
                       "reference": "reference_bwd", "sizes": (16384, 4096), "smoke": (33, 200)},
    "cross_entropy": {"module": "examples.cross_entropy", "kernel": "cross_entropy_losses", "make": "make_inputs",
                      "reference": "reference", "sizes": (4096, 32000), "smoke": (9, 300), "finish": "mean"},
    "rms_norm_bwd": {"module": "examples.rms_norm", "kernel": "rms_norm_bwd", "make": "make_bwd_inputs",
                     "reference": "reference_bwd", "sizes": (16384, 4096), "smoke": (33, 200)},
}

# Seeds of the long search: blocks of rows, rows per step, warps and pipeline depths around the
# heuristic (benchmarks/results/issue17/reductions.md).
_ROWS = [dict(block_sizes=[m, r], num_warps=w, num_stages=s) for m, r, w, s in (
    (64, 1, 8, 1), (64, 1, 8, 2), (64, 1, 8, 3), (64, 1, 8, 4), (32, 1, 8, 2), (32, 1, 8, 3), (128, 1, 8, 3),
    (64, 1, 16, 2), (64, 1, 16, 3), (32, 1, 16, 3), (64, 2, 8, 2), (64, 2, 8, 3), (64, 2, 16, 2), (64, 2, 16, 3),
    (32, 2, 16, 3), (64, 1, 4, 3), (32, 1, 4, 3), (16, 1, 8, 3), (128, 2, 16, 3), (64, 4, 16, 2))]
SWEEP: dict[str, list[dict[str, Any]]] = {
    "layer_norm_bwd": _ROWS,
    "rms_norm_bwd": _ROWS,
    "cross_entropy": [dict(block_sizes=[b], reduction_loops=[c], num_warps=w, num_stages=s) for b, c, w, s in (
        (1, 4096, 8, 1), (1, 4096, 8, 2), (1, 4096, 8, 3), (1, 4096, 8, 4), (1, 4096, 4, 2), (1, 4096, 4, 3),
        (1, 4096, 16, 2), (1, 4096, 16, 3), (1, 8192, 8, 2), (1, 8192, 8, 3), (1, 8192, 16, 2), (1, 8192, 16, 3),
        (1, 2048, 4, 3), (1, 2048, 8, 3), (1, 2048, 4, 4), (1, 16384, 16, 2), (1, None, 16, 1), (1, None, 8, 1),
        (2, 4096, 8, 3), (2, 2048, 8, 3))],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--only", nargs="*", default=())
    parser.add_argument("--quick", action="store_true", help="also a quick tuning run per case")
    parser.add_argument("--full", type=float, default=0.0, help="seconds of a full search per case (0: none)")
    parser.add_argument("--configs", default="{}", help="JSON (or a JSON file): case -> list of Config kwargs to time too")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes (checks the script)")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    os.environ["TESSERA_AUTOTUNE_EFFORT"] = "none"
    sys.path.insert(0, os.path.abspath(args.tree))
    import torch
    import triton

    import tessera
    from examples._harness import assert_close
    device = "cpu" if args.smoke else "cuda"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    given = json.loads(open(args.configs).read() if os.path.isfile(args.configs) else args.configs)
    rows: list[dict[str, Any]] = []
    trials: dict[str, list[dict[str, Any]]] = {}

    def bench(function: Callable[[], Any]) -> float:
        return median_ms(function, args.smoke)

    def write() -> None:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"reductions_{args.label}.json"), "w") as handle:
            json.dump({"label": args.label, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                       "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, handle, indent=1)
        if trials:
            with open(os.path.join(args.out, f"reductions_{args.label}_trials.json"), "w") as handle:
                json.dump(trials, handle, indent=1)

    # timed rows first, tuning afterwards: a tuning run's workers (compiles still finishing after
    # a budget ran out) slowed the host side of rows timed right after it by up to 30 us
    for phase, (name, case) in [(p, item) for p in ("time", "tune") for item in CASES.items()]:
        if args.only and name not in args.only or phase == "tune" and not (args.quick or args.full):
            continue
        try:
            module = importlib.import_module(case["module"])
            kernel = getattr(module, case["kernel"])
        except Exception as error:  # noqa: BLE001 - an older tree may lack the example
            rows.append({"case": name, "impl": "tessera default", "ms": None, "note": f"absent: {error}"[:200]})
            print(f"{name:16s} absent in this tree: {error}", flush=True)
            continue
        inputs = getattr(module, case["make"])(*case["smoke" if args.smoke else "sizes"], dtype=dtype, device=device)
        expected = getattr(module, case["reference"])(*inputs)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        outputs = expected if isinstance(expected, tuple) else (expected,)
        moved = sum(t.nbytes for t in tensors) + sum(t.nbytes for t in outputs)
        tolerance = (2e-2, 2e-2) if dtype == torch.bfloat16 else (1e-4, 1e-4)

        def call_of(chosen: Any) -> Callable[[], Any]:
            if case.get("finish") == "mean":
                return lambda: chosen(*inputs).mean()
            return lambda: chosen(*inputs)

        copy_ms = next((r["ms"] for r in rows if r["case"] == name and r["impl"] == "device copy"), None)
        if device == "cuda" and copy_ms is None:
            source = torch.empty(moved // 2, dtype=torch.uint8, device=device)
            target = torch.empty_like(source)
            copy_ms = bench(lambda: target.copy_(source))
            rows.append({"case": name, "impl": "device copy", "ms": copy_ms, "gbps": moved / copy_ms / 1e6,
                         "of_copy": 1.0, "note": f"{moved / 1e6:.1f} MB read + written"})
            print(f"{name:16s} {'device copy':26s} {copy_ms:8.4f} ms {moved / copy_ms / 1e6:7.0f} GB/s", flush=True)
            del source, target

        def record(impl: str, chosen: Any, config: Any = None, note: str = "", **extra: Any) -> None:
            entry: dict[str, Any] = {"case": name, "impl": impl, "config": repr(config) if config else None,
                                     "ms": None, "note": note, **extra}
            try:
                function = call_of(chosen)
                start = time.perf_counter()
                result = function()
                first = time.perf_counter() - start
                try:
                    assert_close(result, expected, tolerance, name)
                    check = "correct"
                except AssertionError as error:
                    check = f"WRONG: {str(error).splitlines()[0][:150]}"
                entry["ms"] = bench(function)
                entry["gbps"] = moved / entry["ms"] / 1e6
                entry["of_copy"] = round(copy_ms / entry["ms"], 3) if copy_ms else None
                entry["note"] = "; ".join(part for part in (note, check, f"first call {first:.1f}s") if part)
            except Exception as error:  # noqa: BLE001 - one failing row must not hide the others
                entry["note"] = f"{note}; error: {type(error).__name__}: {str(error)[:200]}"
            rows.append(entry)
            print(f"{name:16s} {impl:26s} {entry['ms'] if entry['ms'] is None else round(entry['ms'], 4)!s:>8} ms "
                  f"{entry.get('gbps') or 0:7.0f} GB/s {entry.get('of_copy') or '':>6} of copy  "
                  f"{entry['config'] or ''} {entry['note']}", flush=True)
            write()

        default_config = None
        try:
            from tessera.runtime.tuning import heuristic_for
            default_config = heuristic_for(kernel.bind(*inputs))
        except Exception:  # noqa: BLE001 - informational only
            pass
        if phase == "time":
            record("tessera default", kernel, default_config)
            for options in given.get(name, []):
                record("tessera given config", tessera.kernel(kernel.fn, config=tessera.Config(**options)), options)
        else:
            from tessera.autotune.pipeline import tune
            # the full search first: the quick run then times tuning with the workers already started
            searches = ([("full", {"seeds": [tessera.Config(**c) for c in SWEEP[name]]})] if args.full else []) + \
                       ([("quick", {})] if args.quick else [])
            for effort, extra in searches:
                try:
                    budget = args.full if effort == "full" else 30.0
                    result = tune(kernel.bind(*inputs), effort=effort, budget_seconds=budget, **extra)
                    time.sleep(2)  # let compiles the budget cut off finish
                    trials[f"{name} {effort}"] = [{"config": repr(t.config), "ms": t.time_ms}
                                                  for t in result.search.trials]
                    record(f"tessera {effort}-tuned", tessera.kernel(kernel.fn, config=result.config), result.config,
                           f"tuning {result.seconds:.1f}s, {len(result.search.trials)} candidates, "
                           f"worker time {result.time_ms:.4f} ms", tuning_s=round(result.seconds, 2))
                except Exception as error:  # noqa: BLE001
                    rows.append({"case": name, "impl": f"tessera {effort}-tuned", "ms": None,
                                 "note": f"error: {type(error).__name__}: {str(error)[:300]}"})
                    print(f"{name:16s} {effort}-tuning failed: {error}", flush=True)
                write()
        del inputs, expected
        if device == "cuda":
            torch.cuda.empty_cache()
    write()
    print(f"wrote {os.path.join(args.out, f'reductions_{args.label}.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
