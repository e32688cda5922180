"""Issue 17.6: does quick tuning find what a long search finds, fast, and is the default close?

    PYTHONPATH=. python3 benchmarks/tune_quality.py --out $OUT --long 20            # every case
    PYTHONPATH=. python3 benchmarks/tune_quality.py --only softmax matmul_4096 --long 0 --long-from prev.json
    PYTHONPATH=. python3 benchmarks/tune_quality.py --smoke --only softmax --long 5 # CPU check of the script

Per case (bf16, issue-17 sizes; one process, a fresh tuning each time, no disk cache):
1. the default Config: the heuristic one, what an untuned call runs;
2. quick tuning (`effort="quick"`): its wall time, and the heuristic's time in its own final round
   (`TuneResult.default_ms`: the tuned Config is never slower than that, by construction);
3. a long search (`effort="full"` with `--long` seconds: the quick search, then mutants, random
   points, pattern moves and crossover), or with
   `--long-from JSON` the long searches' winners of an earlier run, timed again here.
Then the three Configs are timed side by side (`--rounds` rounds, alternating order, the mean of
each one's medians) and each checked against the case's float32 reference at the benchmark size.
Ratios (targets of issue 17.6): `quick_vs_long` = long ms / quick ms (>= 0.97),
`default_vs_tuned` = best tuned ms / default ms (>= 0.8), and `quick_s` (<= 10 s per kernel).
Writes `<out>/tune_quality.json` and `<out>/tune_quality.md` (also after each case, so a run cut
off by its time limit keeps the cases it finished).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from benchmarks._timing import median_ms  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
    """A kernel call to tune: `make()` -> (bound kernel arguments, reference outputs thunk)."""

    name: str
    kernel: Callable[[], Any]            # the tessera kernel (imported lazily)
    make: Callable[[bool, Any], tuple]   # (smoke, dtype) -> (args, reference(): outputs to compare)
    tolerance: tuple[float, float] = (3e-2, 3e-2)


def _matmul(m: int, k: int, n: int, small: tuple[int, int, int]) -> Callable[[bool, Any], tuple]:
    def make(smoke: bool, dtype: Any) -> tuple:
        from examples import matmul
        sizes = small if smoke else (m, k, n)
        args = matmul.make_inputs(*sizes, dtype=dtype, device=_device(smoke))
        return args, lambda: matmul.reference(*args)
    return make


def _example(module: str, attribute: str, **cuda_sizes: Any) -> Callable[[bool, Any], tuple]:
    """Inputs and reference of `examples.<module>.<attribute>` (its CPU sizes under smoke)."""
    def make(smoke: bool, dtype: Any) -> tuple:
        import importlib
        example = getattr(importlib.import_module(f"examples.{module}"), attribute)
        sizes = example.sizes["cpu"] if smoke else {**example.sizes["cuda"], **cuda_sizes}
        args = example.make_inputs(**sizes, dtype=dtype, device=_device(smoke))
        return args, lambda: example.reference(*args)
    return make


def _cross_entropy(smoke: bool, dtype: Any) -> tuple:
    import torch

    from examples import cross_entropy
    sizes = cross_entropy.EXAMPLE.sizes["cpu" if smoke else "cuda"]
    logits, labels = cross_entropy.make_inputs(**sizes, dtype=dtype, device=_device(smoke))
    return (logits, labels), lambda: torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")


def _grouped_gemm(smoke: bool, dtype: Any) -> tuple:
    import torch

    from examples import grouped_gemm
    sizes = grouped_gemm.EXAMPLE.sizes["cpu" if smoke else "cuda"]
    As, Bs = grouped_gemm.make_inputs(**sizes, dtype=dtype, device=_device(smoke))
    args, _ = grouped_gemm.flatten_groups(As, Bs)
    return args, lambda: torch.cat([r.reshape(-1) for r in grouped_gemm.reference(As, Bs)])


def _kernel(module: str, name: str) -> Callable[[], Any]:
    def get() -> Any:
        import importlib
        return getattr(importlib.import_module(f"examples.{module}"), name)
    return get


CASES = [
    Case("matmul_4096", _kernel("matmul", "matmul"), _matmul(4096, 4096, 4096, (128, 256, 192))),
    Case("matmul_m16", _kernel("matmul", "matmul"), _matmul(16, 14336, 4096, (16, 512, 128))),
    Case("attention_d128", _kernel("attention", "attention"),
         _example("attention", "EXAMPLE", heads=32, m=4096, n=4096)),
    Case("layer_norm_fwd", _kernel("layer_norm", "layer_norm_fwd"), _example("layer_norm", "FWD_EXAMPLE")),
    Case("layer_norm_bwd", _kernel("layer_norm", "layer_norm_bwd"), _example("layer_norm", "BWD_EXAMPLE")),
    Case("softmax", _kernel("softmax", "softmax"), _example("softmax", "EXAMPLE")),
    Case("cross_entropy", _kernel("cross_entropy", "cross_entropy_losses"), _cross_entropy),
    Case("rms_norm", _kernel("rms_norm", "rms_norm"), _example("rms_norm", "EXAMPLE")),
    Case("grouped_gemm", _kernel("grouped_gemm", "grouped_gemm_impl"), _grouped_gemm),
]


def _device(smoke: bool) -> str:
    return "cpu" if smoke else "cuda"


def _side_by_side(runs: dict[str, Callable[[], Any]], rounds: int, smoke: bool) -> dict[str, float]:
    """Each run's mean of `rounds` medians, the order reversed every other round (drift shared),
    after an untimed warm-up round (call 1 timed one Config 13% slower in the first slot of its
    first round than in the next two slots)."""
    names = list(runs)
    for name in names:
        median_ms(runs[name], smoke, warmup=25, rep=50)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            samples[name].append(median_ms(runs[name], smoke, warmup=25, rep=150))
    return {name: sum(values) / len(values) for name, values in samples.items()}


def _error(actual: Any, expected: Any, tolerance: tuple[float, float]) -> float:
    """The largest |actual - expected| in units of (atol + rtol * |expected|): <= 1 passes."""
    from tessera.autotune.bench_worker import flatten_tensors
    worst = 0.0
    for got, want in zip(flatten_tensors(actual), flatten_tensors(expected), strict=True):
        got, want = got.double().reshape(-1), want.double().reshape(-1).to(got.device)
        worst = max(worst, float(((got - want).abs() / (tolerance[0] + tolerance[1] * want.abs())).max()))
    return worst


def run_case(case: Case, args: argparse.Namespace, earlier: dict[str, Any]) -> dict[str, Any]:
    import torch

    from tessera import Config
    from tessera.autotune.pipeline import TuneOptions, tune
    from tessera.runtime.tuning import heuristic_for
    torch.manual_seed(0)
    arguments, reference = case.make(args.smoke, torch.bfloat16)
    bound = case.kernel().bind(*arguments)
    expected = reference()
    default = heuristic_for(bound)
    options = TuneOptions(progress=False)
    row: dict[str, Any] = {"case": case.name, "default": repr(default)}
    started = time.perf_counter()
    quick = tune(bound, effort="quick", budget_seconds=args.quick_budget, options=options)
    row.update(quick_s=time.perf_counter() - started, quick=repr(quick.config), quick_candidates=len(quick.search.trials),
               quick_failed=sum(quick.failures.values()), quick_failures=quick.failures,
               quick_default_ms=quick.default_ms, quick_ms=quick.time_ms, quick_phases=quick.phases)
    configs = {"default": default, "quick": quick.config}
    if args.long > 0:
        started = time.perf_counter()
        long = tune(bound, effort="full", budget_seconds=args.long, options=options)
        row.update(long_s=time.perf_counter() - started, long=repr(long.config), long_candidates=len(long.search.trials),
                   long_failed=sum(long.failures.values()), long_failures=long.failures,
                   long_top=[(repr(t.config), t.time_ms) for t in long.search.ranked()[:5]])
        configs["long"] = long.config
    elif case.name in earlier:
        row.update({key: earlier[case.name][key] for key in ("long", "long_s", "long_candidates", "long_top")
                    if key in earlier[case.name]})
        row["long_from"] = args.long_from
        configs["long"] = eval(earlier[case.name]["long"], {"Config": Config})  # noqa: S307 - our own JSON
    row["errors"] = {name: _error(bound.run(config), expected, case.tolerance) for name, config in configs.items()}
    # one timing per distinct Config (quick and long often pick the default one)
    distinct = {name: config for name, config in reversed(configs.items())}
    distinct = {repr(config): name for name, config in distinct.items()}
    timed = _side_by_side({name: (lambda c=configs[name]: bound.run(c)) for name in distinct.values()},
                          args.rounds, args.smoke)
    times = {name: timed[distinct[repr(config)]] for name, config in configs.items()}
    row["ms"] = times
    tuned = min(times[name] for name in configs if name != "default")
    row["default_vs_tuned"] = tuned / times["default"]
    if "long" in times:
        row["quick_vs_long"] = times["long"] / times["quick"]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    def cell(row: dict[str, Any], value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    lines = ["| case | default ms | quick ms | long ms | quick s (cands) | long s (cands) | long/quick | "
             "tuned/default | default ms in quick's run | max err (tol units) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ms = row["ms"]
        lines.append(" | ".join([
            f"| {row['case']}", f"{ms['default']:.4f}", f"{ms['quick']:.4f}", cell(row, ms.get("long"), ".4f"),
            f"{row['quick_s']:.1f} ({row['quick_candidates']})",
            f"{cell(row, row.get('long_s'), '.1f')} ({row.get('long_candidates', '-')})",
            cell(row, row.get("quick_vs_long"), ".3f"), f"{row['default_vs_tuned']:.3f}",
            cell(row, row.get("quick_default_ms"), ".4f"), f"{max(row['errors'].values()):.2g} |"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[case.name for case in CASES])
    parser.add_argument("--quick-budget", type=float, default=30.0)
    parser.add_argument("--long", type=float, default=20.0, help="seconds of each long search (0: none)")
    parser.add_argument("--long-from", default="", help="a tune_quality.json whose long winners to time again")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default="tune_quality")
    parser.add_argument("--out", default="benchmarks/results/issue17")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes (checks the script)")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    import tempfile

    import torch

    from tessera import settings
    earlier = {}
    if args.long_from:
        with open(args.long_from, encoding="utf-8") as handle:
            earlier = {row["case"]: row for row in json.load(handle)["rows"] if "long" in row}
    rows: list[dict[str, Any]] = []
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache, settings.override(cache_dir=cache):
        for case in (c for c in CASES if c.name in args.only):
            try:
                rows.append(run_case(case, args, earlier))
            except Exception as error:  # noqa: BLE001 - report and go on to the next case
                print(f"{case.name}: FAILED {type(error).__name__}: {error}", file=sys.stderr, flush=True)
                continue
            print(json.dumps(rows[-1], default=str), flush=True)
            gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
            with open(os.path.join(args.out, f"{args.label}.json"), "w", encoding="utf-8") as handle:
                json.dump({"gpu": gpu, "torch": torch.__version__, "long_s": args.long, "rows": rows}, handle,
                          indent=1, default=str)
            with open(os.path.join(args.out, f"{args.label}.md"), "w", encoding="utf-8") as handle:
                handle.write(f"GPU: {gpu}, torch {torch.__version__}\n\n{table(rows)}\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
