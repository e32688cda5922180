"""Gallery kernels at realistic sizes: Tessera against torch eager and torch.compile, side by side.

    PYTHONPATH=. python benchmarks/run.py [--only softmax matmul] [--out DIR] [--budget-s 330]
    PYTHONPATH=. python benchmarks/run.py --smoke     # CPU: tiny sizes, Triton's interpreter, eager torch

Every case is an `Example` from `examples/` (its `make_inputs`, `run` and `reference`), so no
kernel is written twice. For each case and implementation the same timing function is used:
on CUDA `triton.testing.do_bench` (CUDA events, warm-up, L2 flushed between repetitions, median);
on CPU the median wall time of a few calls. Reported: ms, GB/s for memory-bound kernels (bytes of
all inputs and outputs, read or written once) or TFLOP/s for matmul and attention, and the ratio
to torch.compile (> 1 means faster than torch.compile). Memory-bound cases also time a plain
device copy of the same number of bytes (`device copy`, the HBM ceiling on this GPU in this
run); `of_copy` in the JSON is each row's speed as a fraction of it.

Implementations per case:
- tessera: the kernel with its default config (what a user gets with no tuning);
- tessera tuned: after `kernel.autotune(*inputs)` when the kernel has that method; its wall time
  is reported as the tuning time. Without an autotuner the row says so;
- torch eager: the natural PyTorch op in the input dtype (`x + y`, `torch.softmax`,
  `F.rms_norm`, `x @ y`, `F.scaled_dot_product_attention`, ...), else the example's reference;
- torch.compile: that same function under `torch.compile` (its compile time is reported).
  Skipped on CPU unless --compile-on-cpu (it needs a C++ compiler and is slow).

Tessera's output is checked against the example's reference at the benchmark size; a wrong
result is reported, not hidden. Writes `results.json` (or `smoke.json`) and, when matplotlib is
importable, `speedup.png` under --out (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark: an example at a size, and how to count its work."""

    name: str                      # the Example's name
    module: str                    # examples.<module>
    sizes: dict[str, Any]          # realistic (GPU) sizes
    smoke_sizes: dict[str, Any]    # tiny sizes for the CPU interpreter
    flops: Callable[[dict[str, Any]], float] | None = None  # None: memory-bound, report GB/s
    torch_op: str | None = None    # key of _TORCH_OPS; None: the example's reference


def _matmul_flops(s: dict[str, Any]) -> float:
    return 2.0 * s["m"] * s["n"] * s["k"]


def _attention_flops(s: dict[str, Any]) -> float:
    full = 4.0 * s["batch"] * s["heads"] * s["m"] * s["n"] * s["head_dim"]
    return full / 2 if s.get("causal") else full


ROWS_16K = {"m": 16384, "n": 4096}
ATTENTION = {"batch": 4, "heads": 32, "m": 4096, "n": 4096, "head_dim": 128}
ATTENTION_SMOKE = {"batch": 1, "heads": 2, "m": 32, "n": 32, "head_dim": 16}

# The brief's cases first: a time budget cuts the list from the end.
CASES: tuple[Case, ...] = (
    Case("softmax", "softmax", ROWS_16K, {"m": 16, "n": 64}, torch_op="softmax"),
    Case("rms_norm", "rms_norm", ROWS_16K, {"m": 16, "n": 64}, torch_op="rms_norm"),
    Case("layer_norm_fwd", "layer_norm", ROWS_16K, {"m": 16, "n": 64}),
    Case("add", "add", {"m": 8192, "n": 8192}, {"m": 16, "n": 64}, torch_op="add"),
    Case("matmul", "matmul", {"m": 4096, "k": 4096, "n": 4096}, {"m": 32, "k": 32, "n": 32},
         flops=_matmul_flops, torch_op="matmul"),
    Case("attention", "attention", ATTENTION, ATTENTION_SMOKE, flops=_attention_flops, torch_op="attention"),
    Case("attention_causal", "attention", {**ATTENTION, "causal": True}, {**ATTENTION_SMOKE, "causal": True},
         flops=_attention_flops, torch_op="attention"),
    Case("cross_entropy", "cross_entropy", {"n": 4096, "v": 32000}, {"n": 16, "v": 64}),
    Case("embedding", "embedding", {"batch": 32, "seq": 1024, "vocab": 32000, "dim": 1024},
         {"batch": 2, "seq": 8, "vocab": 64, "dim": 32}),
    Case("welford", "welford", ROWS_16K, {"m": 16, "n": 64}),
    Case("layer_norm_bwd", "layer_norm", ROWS_16K, {"m": 16, "n": 64}),
    Case("softmax_two_pass", "softmax", {"m": 4096, "n": 32768}, {"m": 16, "n": 128}, torch_op="softmax"),
    Case("matmul_bias_gelu", "matmul", {"m": 4096, "k": 4096, "n": 4096, "epilogue": True},
         {"m": 32, "k": 32, "n": 32, "epilogue": True}, flops=_matmul_flops),
    Case("bmm", "bmm", {"batch": 32, "m": 1024, "k": 1024, "n": 1024}, {"batch": 2, "m": 32, "k": 32, "n": 32},
         flops=lambda s: 2.0 * s["batch"] * s["m"] * s["n"] * s["k"], torch_op="bmm"),
    Case("jagged_mean", "jagged_mean", {"num_rows": 2048, "max_length": 512, "features": 512},
         {"num_rows": 8, "max_length": 8, "features": 16}),
    Case("grouped_gemm", "grouped_gemm",
         {"shapes": ((1024, 512, 2048), (512, 1024, 2048), (1024, 2048, 4096), (4096, 2048, 4096))},
         {"shapes": ((32, 16, 16), (16, 32, 16))},
         flops=lambda s: sum(2.0 * m * k * n for m, k, n in s["shapes"])),
)


def _torch_ops() -> dict[str, Callable[..., Any]]:
    """Natural PyTorch ops, in the input dtype, with the example's argument order."""
    import torch
    import torch.nn.functional as F

    def add(x: Any, y: Any) -> Any:
        return x + y

    def softmax(x: Any) -> Any:
        return torch.softmax(x, dim=-1)

    def rms_norm(x: Any, weight: Any, eps: float = 1e-5) -> Any:
        return F.rms_norm(x, (x.size(-1),), weight, eps)

    def matmul(x: Any, y: Any) -> Any:
        return x @ y

    def bmm(a: Any, b: Any) -> Any:
        return torch.bmm(a, b)

    def attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return {"add": add, "softmax": softmax, "rms_norm": rms_norm, "matmul": matmul, "bmm": bmm,
            "attention": attention}


def _tensors(value: Any) -> list[Any]:
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _bytes_moved(case: Case, inputs: tuple, output: Any) -> float:
    """Bytes of every input and output tensor, each read or written once."""
    if case.name == "embedding":  # only the looked-up rows of the table are read
        indices, _ = inputs
        return float(indices.nbytes + 2 * sum(t.nbytes for t in _tensors(output)))
    return float(sum(t.nbytes for t in _tensors(inputs)) + sum(t.nbytes for t in _tensors(output)))


def _timer(device: str, smoke_repeats: int) -> Callable[[Callable[[], Any]], float]:
    """The one timing function every implementation goes through; returns milliseconds."""
    if device == "cuda":
        import triton.testing

        def bench(function: Callable[[], Any]) -> float:
            return float(triton.testing.do_bench(function, warmup=25, rep=100, return_mode="median"))
        return bench

    def bench_cpu(function: Callable[[], Any]) -> float:
        function()
        samples = []
        for _ in range(smoke_repeats):
            start = time.perf_counter()
            function()
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)
    return bench_cpu


def _short_error(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text if len(text) <= 120 else text[:117] + "..."


def _run_case(case: Case, device: str, dtype: Any, smoke: bool, bench: Callable[[Callable[[], Any]], float],
              compile_torch: bool, tune: bool, verbose: bool) -> list[dict[str, Any]]:
    """Rows (one per implementation) for one case."""
    import torch

    from examples._harness import assert_close
    module = importlib.import_module(f"examples.{case.module}")
    example = next(e for e in module.EXAMPLES if e.name == case.name)
    sizes = case.smoke_sizes if smoke else case.sizes
    inputs = example.inputs(device, dtype, **sizes)
    reference_output = example.reference(*inputs)
    work = case.flops(sizes) if case.flops else _bytes_moved(case, inputs, reference_output)
    unit = "TFLOP/s" if case.flops else "GB/s"
    size_text = ", ".join(f"{k}={v}" for k, v in sizes.items() if k != "shapes") or f"{len(sizes['shapes'])} groups"
    rows: list[dict[str, Any]] = []

    def row(impl: str, function: Callable[[], Any] | None, note: str = "", **extra: Any) -> None:
        entry = {"kernel": case.name, "size": size_text, "dtype": str(dtype).replace("torch.", ""), "impl": impl,
                 "ms": None, "rate": None, "unit": unit, "note": note, **extra}
        if function is not None:
            try:
                entry["ms"] = bench(function)
                entry["rate"] = work / (entry["ms"] * 1e-3) / 1e12 if case.flops else work / (entry["ms"] * 1e-3) / 1e9
            except Exception as error:  # one failing implementation must not hide the others
                if verbose:
                    traceback.print_exc()
                entry["note"] = f"error: {_short_error(error)}"
        rows.append(entry)

    kernel = example.run
    tessera_call = lambda: kernel(*inputs)  # noqa: E731
    check = ""
    try:
        start = time.perf_counter()
        output = kernel(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        first_call_s = time.perf_counter() - start
        assert_close(output, reference_output, example.tolerances[dtype], case.name)
        check = f"correct; first call (compile) {first_call_s:.1f}s"
    except AssertionError as error:
        check = f"WRONG: {_short_error(error)}"
    except Exception as error:
        if verbose:
            traceback.print_exc()
        row("tessera", None, f"error: {_short_error(error)}")
        tessera_call = None
    if tessera_call is not None:
        row("tessera", tessera_call, f"default config; {check}")
    if tessera_call is not None and hasattr(kernel, "autotune"):
        if tune:
            try:
                start = time.perf_counter()
                chosen = kernel.autotune(*inputs)
                tuning_s = time.perf_counter() - start
                row("tessera tuned", tessera_call, f"config {chosen!r}" if chosen is not None else "",
                    tuning_s=round(tuning_s, 2))
            except Exception as error:
                if verbose:
                    traceback.print_exc()
                row("tessera tuned", None, f"error in autotune: {_short_error(error)}")
        else:
            row("tessera tuned", None, "skipped (--no-tune)")
    elif tessera_call is not None:
        row("tessera tuned", None, "no kernel.autotune yet: the tessera row is the default config")

    eager = _torch_ops()[case.torch_op] if case.torch_op else example.reference
    eager_name = case.torch_op or f"{case.module}.reference"
    row("torch eager", lambda: eager(*inputs), f"{eager_name}")
    if compile_torch:
        try:
            torch._dynamo.reset()
            compiled = torch.compile(eager)
            start = time.perf_counter()
            compiled(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - start
            row("torch.compile", lambda: compiled(*inputs), f"compile {compile_s:.1f}s", compile_s=round(compile_s, 2))
        except Exception as error:
            if verbose:
                traceback.print_exc()
            row("torch.compile", None, f"error: {_short_error(error)}")
    else:
        row("torch.compile", None, "skipped on CPU (use --compile-on-cpu)")
    if not case.flops and device == "cuda":
        # the ceiling for a memory-bound kernel: a plain device copy moving the same bytes
        source = torch.empty(int(work) // 2, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        row("device copy", lambda: target.copy_(source), "same bytes moved (read + write): the HBM ceiling")
    baseline = next((r["ms"] for r in rows if r["impl"] == "torch.compile" and r["ms"]), None)
    ceiling = next((r["ms"] for r in rows if r["impl"] == "device copy" and r["ms"]), None)
    for entry in rows:
        entry["vs_compile"] = round(baseline / entry["ms"], 3) if baseline and entry["ms"] else None
        entry["of_copy"] = round(ceiling / entry["ms"], 3) if ceiling and entry["ms"] else None
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("kernel", "size", "impl", "ms", "rate", "vs compile", "note")
    cells = [header]
    for r in rows:
        rate = f"{r['rate']:.1f} {r['unit']}" if r["rate"] is not None else "-"
        ms = f"{r['ms']:.4f}" if r["ms"] is not None else "-"
        ratio = f"{r['vs_compile']:.2f}x" if r["vs_compile"] is not None else "-"
        cells.append((r["kernel"], r["size"], r["impl"], ms, rate, ratio, r["note"]))
    widths = [max(len(str(c[i])) for c in cells) for i in range(len(header) - 1)]
    for index, line in enumerate(cells):
        print(" | ".join(str(c).ljust(w) for c, w in zip(line[:-1], widths)) + " | " + str(line[-1]))
        if index == 0:
            print("-+-".join("-" * w for w in widths) + "-+-----")


def _plot(rows: list[dict[str, Any]], path: str) -> str:
    """Grouped bars: speed relative to torch.compile per kernel. Returns a note for the log."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed"
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    impls = ["tessera", "tessera tuned", "torch eager", "torch.compile"]
    width = 0.2
    figure, axes = plt.subplots(figsize=(max(8, 1.1 * len(kernels)), 4.5))
    for offset, impl in enumerate(impls):
        values = []
        for kernel in kernels:
            match = next((r for r in rows if r["kernel"] == kernel and r["impl"] == impl), None)
            values.append(match["vs_compile"] if match and match["vs_compile"] else 0.0)
        positions = [i + (offset - 1.5) * width for i in range(len(kernels))]
        axes.bar(positions, values, width, label=impl)
    axes.axhline(1.0, color="gray", linewidth=0.8)
    axes.set_xticks(range(len(kernels)))
    axes.set_xticklabels(kernels, rotation=30, ha="right")
    axes.set_ylabel("speed relative to torch.compile (higher is faster)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return f"wrote {path}"


def _write_json(rows: list[dict[str, Any]], args: argparse.Namespace, device: str, started: float) -> str:
    import torch
    import triton
    result = {"rows": rows, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpret)",
              "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
              "smoke": args.smoke, "wall_s": round(time.perf_counter() - started, 1),
              "timing": "triton.testing.do_bench median (CUDA events, L2 flush)" if device == "cuda"
              else "median wall time of 2 calls"}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{'smoke' if args.smoke else 'results'}.json")
    with open(path, "w") as handle:
        json.dump(result, handle, indent=2, default=str)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, Triton's interpreter")
    parser.add_argument("--only", nargs="*", default=(), help="case names to run (default: all)")
    parser.add_argument("--dtype", default=None, help="default bfloat16 (smoke: float32)")
    parser.add_argument("--out", default=os.path.join(_HERE, "results"), help="directory of JSON and PNG")
    parser.add_argument("--budget-s", type=float, default=math.inf,
                        help="start no new case after this many seconds (the rest are listed as skipped)")
    parser.add_argument("--no-tune", action="store_true", help="do not call kernel.autotune")
    parser.add_argument("--compile-on-cpu", action="store_true", help="also run torch.compile in --smoke")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks")
    args = parser.parse_args(argv)
    if args.smoke:  # Triton's mode is fixed when it is imported: set it first
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    import torch
    if not args.smoke and not torch.cuda.is_available():
        print("run.py benchmarks CUDA kernels; no GPU here (use --smoke to check the script on CPU)")
        return 2
    device = "cpu" if args.smoke else "cuda"
    dtype = getattr(torch, args.dtype or ("float32" if args.smoke else "bfloat16"))
    bench = _timer(device, smoke_repeats=2)
    compile_torch = device == "cuda" or args.compile_on_cpu
    cases = [c for c in CASES if not args.only or c.name in args.only]
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for case in cases:
        if time.perf_counter() - started > args.budget_s:
            rows.append({"kernel": case.name, "size": "", "dtype": "", "impl": "-", "ms": None, "rate": None,
                         "unit": "", "vs_compile": None, "note": "skipped: time budget spent"})
            continue
        print(f"[run.py] {case.name} ({time.perf_counter() - started:.0f}s)", file=sys.stderr, flush=True)
        try:
            rows.extend(_run_case(case, device, dtype, args.smoke, bench, compile_torch, not args.no_tune,
                                  args.verbose))
        except Exception as error:  # inputs or reference failed: report the case and go on
            if args.verbose:
                traceback.print_exc()
            rows.append({"kernel": case.name, "size": "", "dtype": "", "impl": "-", "ms": None, "rate": None,
                         "unit": "", "vs_compile": None, "note": f"error: {_short_error(error)}"})
        if device == "cuda":
            torch.cuda.empty_cache()
        path = _write_json(rows, args, device, started)  # after every case: a killed run keeps its rows
    _print_table(rows)
    print(f"wrote {path}")
    stem = "smoke" if args.smoke else "results"
    print(_plot(rows, os.path.join(args.out, f"{stem}_speedup.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
