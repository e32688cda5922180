"""Where the grouped GEMM's time goes: Tessera's call against a raw Triton launch of the same code.

    PYTHONPATH=<tree> python3 benchmarks/grouped_probe.py --tree <tree> --label new --out $OUT

For the MoE-like cases of `benchmarks/issue17.py` (same inputs: same generator seed, skewed and
empty groups), with the heuristic Config of the tree named by `--tree`:

- `tessera`: `grouped_gemm_impl(*flat buffers)`, the Python call (what issue17.py times);
- `raw`: the launch that call makes, replayed as `kernel[grid](...)` on the generated module,
  so the runtime (dispatch, launcher) is out of the picture;
- `profiled`: the kernel's own device time in `torch.profiler` over the Tessera calls.

If `raw` and `tessera` agree, a difference between two trees is in the generated kernel (or the
GPU), not in dispatch. Also writes each case's generated source and Config under `--out`.
Times: median of `triton.testing.do_bench` (L2 flushed), as in issue17.py.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Any

SEED_SHAPES = ((1024, 512, 2048), (512, 1024, 2048), (1024, 2048, 4096), (4096, 2048, 4096))
MOE_CASES = ((8, 4096, 2048, 16384), (64, 2048, 7168, 32768), (16, 7168, 4096, 8192))


def moe_inputs(groups: int, k: int, n: int, tokens: int, generator: Any, device: str) -> tuple[list, list]:
    """issue17.py's MoE groups: skewed token counts, some experts empty."""
    import torch
    weights = torch.rand(groups, generator=generator) ** 3
    counts = (weights / weights.sum() * tokens).long()
    counts[torch.randperm(groups, generator=generator)[: max(1, groups // 8)]] = 0
    counts[0] += tokens - int(counts.sum())
    x = torch.randn(int(counts.sum()), k, device=device).to(torch.bfloat16)
    w = (torch.randn(groups, k, n, device=device) / k ** 0.5).to(torch.bfloat16)
    return list(torch.split(x, counts.tolist())), list(w.unbind(0))


def raw_launch(record: Any) -> Any:
    """A thunk launching `record` (a plan's LaunchRecord) through Triton's own `kernel[grid]`."""
    spec = importlib.util.spec_from_file_location(f"probe_{abs(hash(record.source_path))}", record.source_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, record.function_name)
    grid = tuple(int(g) for g in record.grid)
    return lambda: function[grid](*record.arguments, num_warps=record.num_warps, num_stages=record.num_stages)


def profiled_ms(call: Any, name: str, calls: int = 20) -> float:
    """Mean device time (ms) of the kernels named like `name` per call, from torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    total_us = sum(e.device_time_total for e in prof.key_averages() if name in e.key)
    return total_us / calls / 1e3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--configs", default="", help="a Python list of Config kwargs dicts: a row for each too")
    parser.add_argument("--seed", action="store_true", help="also the seed-000 shapes (4 groups, bf16)")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, one tiny case (checks the script)")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    from benchmarks._timing import median_ms  # this script's tree (older trees lack it)
    sys.path.insert(0, os.path.abspath(args.tree))
    import torch

    from examples import grouped_gemm as gg
    from tessera.runtime.tuning import heuristic_for

    os.makedirs(args.out, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"

    def bench(function: Any) -> float:
        return median_ms(function, args.smoke, warmup=10, rep=60)
    generator = torch.Generator().manual_seed(17)
    rows = []
    import tessera
    extra = eval(args.configs) if args.configs else []  # noqa: S307 - the developer's own
    cases = [(4, 32, 16, 40)] if args.smoke else list(MOE_CASES)
    if args.seed:
        cases.insert(0, "seed")
    for item in cases:
        if item == "seed":
            As, Bs = gg.make_inputs(SEED_SHAPES, dtype=torch.bfloat16, device=device)
            groups, case = 4, "seed000 4 groups"
        else:
            groups, k, n, tokens = item
            As, Bs = moe_inputs(groups, k, n, tokens, generator, device)
            case = f"moe G{groups} K{k} N{n} T{tokens}"
        arguments, _ = gg.flatten_groups(As, Bs)
        bound = gg.grouped_gemm_impl.bind(*arguments)
        config = heuristic_for(bound)
        call = lambda: gg.grouped_gemm_impl(*arguments)  # noqa: E731
        call()
        plan = bound.plan(config)
        record = plan.launches[0]
        with open(record.source_path) as handle:
            source = handle.read()
        with open(os.path.join(args.out, f"probe_{args.label}_G{groups}.py"), "w") as handle:
            handle.write(source)
        raw = raw_launch(record)
        raw()
        row = {"case": case, "tree": args.label, "config": repr(config), "grid": list(map(int, record.grid)),
               "arguments": [f"{a.dtype} ptr%16={a.data_ptr() % 16}" if isinstance(a, torch.Tensor) else repr(a)
                             for a in record.arguments], "warps_stages": [record.num_warps, record.num_stages],
               "tessera_ms": bench(call), "raw_ms": bench(raw)}
        if not args.smoke:
            row.update(profiled_ms=profiled_ms(call, record.function_name),
                       raw_profiled_ms=profiled_ms(raw, record.function_name))
        for options in extra:
            configured = tessera.kernel(gg.grouped_gemm_impl.fn, config=tessera.Config(**options))
            configured(*arguments)
            row[f"config {options}"] = bench(lambda: configured(*arguments))  # noqa: B023 - called at once
        rows.append(row)
        print(json.dumps(row), flush=True)
        del As, Bs, arguments
        if not args.smoke:
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, f"probe_{args.label}.json"), "w") as handle:
        json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
