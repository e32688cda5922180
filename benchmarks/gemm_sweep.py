"""Issue 17 item 3: GEMM across LLM shapes, Tessera against cuBLAS, side by side in one run.

    PYTHONPATH=. python3 benchmarks/gemm_sweep.py --out $OUT [--dtypes bfloat16 float16] [--fp8] [--bmm]
    PYTHONPATH=. python3 benchmarks/gemm_sweep.py --smoke          # CPU: Triton's interpreter, tiny shapes

Rows (each Tessera result checked against float32 torch at the benchmark size, a wrong one is
marked WRONG, never hidden):
- `matmul`: `examples.matmul.matmul` (the Helion-style 2-D tiling with a K loop) against `torch.mm`
  in the same dtype, for M in 1, 16, 128, 1024, 4096, 16384 and (N, K) pairs of LLM layers;
- `fp8` (`--fp8`): an e4m3 kernel with per-tensor and per-row scales (defined below) against
  `torch._scaled_mm` (bf16 output, the second operand column-major as cuBLAS requires);
- `bmm` (`--bmm`): `examples.bmm.bmm` against `torch.bmm`.
`--small-grid` keeps the matmul shapes whose 128 x 128 output tiles are fewer than the H100's 132 SMs
(where split-K applies); `--split-k S ...` also times each matmul shape (CUDA graph) with the heuristic
Config but `split_k` forced to each S, so one run compares the splits side by side.
`--graph` also times both sides replayed from a CUDA graph: the kernels alone, without the host's
dispatch (for products of tens of microseconds the host path, not the kernel, sets the plain time).
Tessera runs its heuristic Config (`TESSERA_AUTOTUNE_EFFORT=none`) unless `--tune N` quick-tunes
the first N shapes of each family as well (effort quick). Times: median of `triton.testing.do_bench` (CUDA events,
L2 flushed). Writes `gemm_sweep.json` and, with matplotlib, `gemm_sweep.png` (ratio per shape).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M_VALUES = (1, 16, 128, 1024, 4096, 16384)
# (N, K) of LLM projections: square, up/gate (N wide), down (K wide), the widest fused up+gate.
NK_PAIRS = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (28672, 4096))
SMOKE_M = (1, 16, 37)
SMOKE_NK = ((48, 64), (64, 80))


@functools.lru_cache(maxsize=None)
def fp8_kernel() -> Any:
    """`(x @ y) * scale_x * scale_y` in bf16 for e4m3 `x` `[m, k]`, `y` `[k, n]`, scales `[m, 1]`, `[1, n]`."""
    import torch

    import tessera
    import tessera.language as hl

    @tessera.kernel
    def fp8_scaled_matmul(x: torch.Tensor, y: torch.Tensor, scale_x: torch.Tensor,
                          scale_y: torch.Tensor) -> torch.Tensor:
        m, k = x.size()
        n = y.size(1)
        out = torch.empty([m, n], dtype=torch.bfloat16, device=x.device)
        for tile_m, tile_n in hl.tile([m, n]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
            out[tile_m, tile_n] = (acc * scale_x[tile_m, :] * scale_y[:, tile_n]).to(torch.bfloat16)
        return out

    return fp8_scaled_matmul


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(_ROOT, "benchmarks", "results", "issue17"))
    parser.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    parser.add_argument("--m", nargs="*", type=int, default=None, help="M values (default: the issue's six)")
    parser.add_argument("--fp8", action="store_true", help="also e4m3 with per-tensor and per-row scales")
    parser.add_argument("--bmm", action="store_true", help="also torch.bmm shapes")
    parser.add_argument("--tune", type=int, default=0, help="quick-tune the first N shapes of each family too")
    parser.add_argument("--graph", action="store_true",
                        help="also time both sides replayed from a CUDA graph (kernel time without host dispatch)")
    parser.add_argument("--budget-s", type=float, default=1e9, help="stop starting new shapes after this long")
    parser.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, tiny shapes")
    parser.add_argument("--small-grid", action="store_true", help="only shapes of fewer 128 x 128 tiles than 132 SMs")
    parser.add_argument("--split-k", nargs="*", type=int, default=[], help="also time the heuristic Config with each split_k")
    parser.add_argument("--compile-only", action="store_true",
                        help="call each kernel once and time nothing: several such processes (--shard) fill the "
                             "compile caches in parallel before the timed run")
    parser.add_argument("--shard", default="0/1", help="I/N: only every N-th shape from the I-th (with --compile-only)")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    sys.path.insert(0, _ROOT)
    import torch

    from examples.bmm import bmm
    from examples.matmul import matmul

    device = "cpu" if args.smoke else "cuda"
    m_values = tuple(args.m) if args.m else (SMOKE_M if args.smoke else M_VALUES)
    nk_pairs = SMOKE_NK if args.smoke else NK_PAIRS
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []

    def bench(function: Callable[[], Any]) -> float:
        if args.smoke:
            begin = time.perf_counter()
            function()
            return (time.perf_counter() - begin) * 1e3
        import triton

        return triton.testing.do_bench(function, warmup=10, rep=50, return_mode="median")

    def bench_graph(function: Callable[[], Any]) -> float | None:
        """The kernel alone: calls replayed from a CUDA graph, so host work (Python dispatch,
        launch) does not hide under or add to the GPU time of kernels of tens of microseconds."""
        if args.smoke or not args.graph:
            return None
        import triton

        return triton.testing.do_bench_cudagraph(function, rep=50, return_mode="median")

    def relative_error(result: Any, expected: Any) -> float:
        return ((result.float() - expected).norm() / expected.norm().clamp_min(1e-30)).item()

    def measure(family: str, shape: str, flops: float, ours: Callable[[], Any], theirs: Callable[[], Any] | None,
                expected: Any, tune: Callable[[], Any] | None) -> None:
        row: dict[str, Any] = {"family": family, "shape": shape, "flops": flops}
        if args.compile_only:
            ours()
            return
        try:
            error = relative_error(ours(), expected)
            row["rel_err"] = error
            row["wrong"] = error > 2e-2
            row["tessera_ms"] = bench(ours)
            row["tessera_graph_ms"] = bench_graph(ours)
        except Exception as failure:  # noqa: BLE001 - one failing shape must not hide the others
            row["error"] = f"{type(failure).__name__}: {str(failure)[:300]}"
        if theirs is not None:
            try:
                row["reference_ms"] = bench(theirs)
                row["reference_graph_ms"] = bench_graph(theirs)
            except Exception as failure:  # noqa: BLE001
                row["reference_error"] = f"{type(failure).__name__}: {str(failure)[:200]}"
        if tune is not None and "error" not in row:
            begin = time.perf_counter()
            try:
                tune()
                row["tune_s"] = time.perf_counter() - begin
                row["tuned_ms"] = bench(ours)
            except Exception as failure:  # noqa: BLE001
                row["tune_error"] = f"{type(failure).__name__}: {str(failure)[:200]}"
        if row.get("tessera_ms") and row.get("reference_ms"):
            row["ratio"] = row["reference_ms"] / row["tessera_ms"]
            if row.get("tessera_graph_ms") and row.get("reference_graph_ms"):
                row["graph_ratio"] = row["reference_graph_ms"] / row["tessera_graph_ms"]
            if row.get("tuned_ms"):
                row["tuned_ratio"] = row["reference_ms"] / row["tuned_ms"]
        rows.append(row)
        print(_format_row(row), flush=True)

    shard, shards = (int(part) for part in args.shard.split("/"))
    counter = iter(range(10 ** 9))

    def out_of_time() -> bool:
        return time.perf_counter() - started > args.budget_s

    def skipped() -> bool:
        """Not this shard's shape, or out of time (each family's loop asks once per shape)."""
        return next(counter) % shards != shard or out_of_time()

    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        shapes = [(m, n, k) for (n, k) in nk_pairs for m in m_values
                  if not args.small_grid or -(-m // 128) * -(-n // 128) < SMALL_GRID_TILES]
        for index, (m, n, k) in enumerate(shapes):
            if skipped():
                continue
            torch.manual_seed(index)
            x = torch.randn(m, k, device=device).to(dtype)
            y = (torch.randn(k, n, device=device) / k ** 0.5).to(dtype)
            expected = x.float() @ y.float()
            ours = lambda x=x, y=y: matmul(x, y)  # noqa: E731 - bound per shape
            tune = (lambda x=x, y=y: matmul.autotune(x, y)) if index < args.tune else None
            measure(f"matmul {dtype_name}", f"M{m} N{n} K{k}", 2.0 * m * n * k, ours,
                    None if args.smoke else (lambda x=x, y=y: torch.mm(x, y)), expected, tune)
            if args.split_k and not args.compile_only:
                rows[-1].update(_split_k_times(args, matmul, x, y, expected, bench, bench_graph, relative_error))
            del x, y, expected
    if args.fp8:
        _fp8_rows(args, torch, device, m_values, nk_pairs, measure, skipped)
    if args.bmm:
        for index, (batch, m, n, k) in enumerate(((32, 1024, 1024, 1024), (16, 4096, 128, 4096),
                                                  (64, 512, 512, 128), (8, 2048, 2048, 2048))
                                                 if not args.smoke else ((3, 17, 32, 48),)):
            if skipped():
                continue
            a = torch.randn(batch, m, k, device=device).to(torch.bfloat16)
            b = (torch.randn(batch, k, n, device=device) / k ** 0.5).to(torch.bfloat16)
            expected = torch.bmm(a.float(), b.float())
            measure("bmm bfloat16", f"B{batch} M{m} N{n} K{k}", 2.0 * batch * m * n * k,
                    lambda a=a, b=b: bmm(a, b), None if args.smoke else (lambda a=a, b=b: torch.bmm(a, b)),
                    expected, (lambda a=a, b=b: bmm.autotune(a, b)) if index < args.tune else None)
    if args.compile_only:
        return 0
    _summarise(rows)
    _write(rows, args, device)
    wrong_split = any(t.get("wrong") for row in rows for t in row.get("split_k_times", {}).values())
    return 1 if wrong_split or any(row.get("wrong") for row in rows) else 0


def _fp8_rows(args: argparse.Namespace, torch: Any, device: str, m_values: tuple, nk_pairs: tuple,
              measure: Callable[..., None], skipped: Callable[[], bool]) -> None:
    kernel = fp8_kernel()
    e4m3 = torch.float8_e4m3fn
    for scaling in ("tensor", "row"):
        for index, (m, n, k) in enumerate((m, n, k) for (n, k) in nk_pairs[:3] for m in m_values):
            if skipped():
                continue
            torch.manual_seed(index)
            x = torch.randn(m, k, device=device).clamp(-4, 4).to(e4m3)
            y = (torch.randn(n, k, device=device).clamp(-4, 4)).to(e4m3).t()  # column-major [k, n]
            if scaling == "tensor":
                scale_x = torch.full((1, 1), 0.5, device=device)
                scale_y = torch.full((1, 1), 1.0 / k ** 0.5, device=device)
                ours_x, ours_y = scale_x.expand(m, 1), scale_y.expand(1, n)
            else:
                scale_x = torch.rand(m, 1, device=device) + 0.5
                scale_y = (torch.rand(1, n, device=device) + 0.5) / k ** 0.5
                ours_x, ours_y = scale_x, scale_y
            expected = (x.float() @ y.float()) * scale_x * scale_y
            reference = None
            if not args.smoke:
                reference = (lambda x=x, y=y, sx=scale_x.reshape(-1) if scaling == "tensor" else scale_x,
                             sy=scale_y.reshape(-1) if scaling == "tensor" else scale_y:
                             torch._scaled_mm(x, y, sx[0] if scaling == "tensor" else sx,
                                              sy[0] if scaling == "tensor" else sy, out_dtype=torch.bfloat16))
            ours = lambda x=x, y=y, sx=ours_x, sy=ours_y: kernel(x, y, sx, sy)  # noqa: E731
            tune = ((lambda x=x, y=y, sx=ours_x, sy=ours_y: kernel.autotune(x, y, sx, sy))
                    if index < args.tune else None)
            measure(f"fp8 e4m3 per-{scaling}", f"M{m} N{n} K{k}", 2.0 * m * n * k, ours, reference, expected, tune)


SMALL_GRID_TILES = 132  # an H100's SMs: a grid of fewer 128 x 128 tiles leaves some idle


def _split_k_times(args: argparse.Namespace, matmul: Any, x: Any, y: Any, expected: Any, bench: Callable,
                   bench_graph: Callable, relative_error: Callable) -> dict[str, Any]:
    """The heuristic Config's split_k, and per forced split_k the kernel time (CUDA graph, else
    plain) and error, each under a kernel given that Config."""
    import tessera

    mode = "interpret" if args.smoke else "compiled"
    heuristic = matmul.choose_config(mode, (x, y), {})
    times: dict[str, Any] = {}
    for splits in args.split_k:
        forced = tessera.kernel(matmul.fn, config=heuristic.merged(split_k=splits))
        try:
            error = relative_error(forced(x, y), expected)
            time_ms = bench_graph(lambda: forced(x, y)) or bench(lambda: forced(x, y))
            times[str(splits)] = {"ms": time_ms, "rel_err": error, "wrong": error > 2e-2}
        except Exception as failure:  # noqa: BLE001 - one failing split must not hide the others
            times[str(splits)] = {"error": f"{type(failure).__name__}: {str(failure)[:300]}"}
    print(f"    heuristic split_k={heuristic.get('split_k', 1)}; forced: "
          + ", ".join(f"{s}: {t.get('ms', float('nan')):.4f} ms{' WRONG' if t.get('wrong') else ''}{' ' + t['error'] if 'error' in t else ''}"
                      for s, t in times.items()), flush=True)
    return {"heuristic_config": repr(heuristic), "heuristic_split_k": heuristic.get("split_k", 1), "split_k_times": times}


def _format_row(row: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        return f"{row[key]:.4f}" if row.get(key) is not None else "-"

    note = row.get("error") or row.get("reference_error") or row.get("tune_error") or ""
    wrong = " WRONG" if row.get("wrong") else ""
    ratio = f"{row['ratio']:.2f}x" if row.get("ratio") else "-"
    tuned_ratio = f" {row['tuned_ratio']:.2f}x" if row.get("tuned_ratio") else ""
    tuned = f" tuned {ms('tuned_ms')} ms{tuned_ratio} ({row.get('tune_s', 0):.1f} s)" if row.get("tuned_ms") else ""
    graph = (f"  graph {ms('tessera_graph_ms')} / {ms('reference_graph_ms')} ms {row['graph_ratio']:.2f}x"
             if row.get("graph_ratio") else "")
    return (f"{row['family']:22s} {row['shape']:22s} tessera {ms('tessera_ms'):>9} ms  reference "
            f"{ms('reference_ms'):>9} ms  {ratio:>6}{graph}{tuned}  err {row.get('rel_err', float('nan')):.1e}"
            f"{wrong} {note}")


def _summarise(rows: list[dict[str, Any]]) -> None:
    families = sorted({row["family"] for row in rows})
    print("\nfamily                  shapes  median ratio  min ratio  graph median  graph min"
          "  (reference / tessera; > 1 is faster)")
    for family in families:
        ratios = [row["ratio"] for row in rows if row["family"] == family and row.get("ratio")]
        graphs = [row["graph_ratio"] for row in rows if row["family"] == family and row.get("graph_ratio")]
        if ratios:
            graph = f"{statistics.median(graphs):12.2f}x {min(graphs):9.2f}x" if graphs else ""
            print(f"{family:22s} {len(ratios):7d} {statistics.median(ratios):12.2f}x {min(ratios):9.2f}x {graph}")


def _write(rows: list[dict[str, Any]], args: argparse.Namespace, device: str) -> None:
    os.makedirs(args.out, exist_ok=True)
    import torch

    meta = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
            "effort": os.environ.get("TESSERA_AUTOTUNE_EFFORT"), "smoke": args.smoke}
    path = os.path.join(args.out, "gemm_sweep_smoke.json" if args.smoke else "gemm_sweep.json")
    with open(path, "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1)
    print(f"wrote {path}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    plotted = [row for row in rows if row.get("ratio")]
    if not plotted:
        return
    figure, axis = plt.subplots(figsize=(max(8, len(plotted) * 0.18), 4))
    axis.bar(range(len(plotted)), [row["ratio"] for row in plotted])
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(plotted)), [f"{row['family'].split()[0]} {row['shape']}" for row in plotted],
                    rotation=90, fontsize=5)
    axis.set_ylabel("reference time / Tessera time")
    figure.tight_layout()
    figure.savefig(path.replace(".json", ".png"), dpi=150)


if __name__ == "__main__":
    sys.exit(main())
