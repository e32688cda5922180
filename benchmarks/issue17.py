"""Issue 17: grouped GEMM (seed 000) and MoE-like groups, Tessera against torch, one tree per process.

    PYTHONPATH=<tree> python3 benchmarks/issue17.py --tree <tree> --label new --out $OUT

`--tree` is the repository copy whose `tessera` and `examples` are imported (to compare two
versions of the compiler in one device call, run this once per tree). Rows, printed and written to
`$OUT/issue17_<label>.json`:

- grouped_gemm seed shapes (fp16 and bf16): `examples.grouped_gemm.grouped_gemm` (the seed's host
  code: flatten, metadata to the device, one launch), the kernel alone on prepared flat buffers,
  a loop of per-group `torch.mm` in the inputs' dtype, and the same loop in float32 (what the
  example's `reference` does, the baseline of the issue's first table).
- MoE-like groups (bf16, 8 and 64 experts, skewed and empty groups, K, N in 2048..7168): the seed's
  kernel on the flat token buffer, the `torch.mm` loop, and `torch._grouped_mm` where it runs.

- attention (`--attention`): `examples.attention` against `F.scaled_dot_product_attention`;
  `--attention-backward`: `attention_bwd` (kernel alone and through autograd) against SDPA's
  autograd backward, gradients checked against float32 SDPA's (`--attention-shapes S:D:causal,...`,
  `--backward-configs`, `--tune-backward CASE`).

Every Tessera result is checked against float32 torch at the benchmark size. Times: the median of
`triton.testing.do_bench` (CUDA events, L2 flushed). The heuristic Config is used (no tuning) unless
`--tune CASE...`, which adds a quick-tuned row for the kernel-alone call of those cases.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--tune", nargs="*", default=(), help="case names (prefixes) to quick-tune too")
    parser.add_argument("--skip-moe", action="store_true")
    parser.add_argument("--skip-grouped", action="store_true")
    parser.add_argument("--attention", action="store_true", help="also examples.attention against SDPA")
    parser.add_argument("--tune-attention", default="", help="an attention case name to quick-tune too")
    parser.add_argument("--attention-backward", action="store_true",
                        help="also examples.attention's backward against SDPA's")
    parser.add_argument("--tune-backward", default="", help="an attention backward case name to quick-tune too")
    parser.add_argument("--backward-configs", default="",
                        help="a Python list of Config kwargs dicts: attention_bwd rows under each too")
    parser.add_argument("--attention-shapes", default="",
                        help="attention cases as `S:D:causal,...` (default: S4096 at D128 and D64, both masks)")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes (checks the script)")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    sys.path.insert(0, os.path.abspath(args.tree))
    import torch
    import triton

    from examples import grouped_gemm as gg

    device = "cpu" if args.smoke else "cuda"
    rows: list[dict[str, Any]] = []

    def bench(function: Callable[[], Any]) -> float:
        if args.smoke:
            start = time.perf_counter()
            function()
            return (time.perf_counter() - start) * 1e3
        return triton.testing.do_bench(function, warmup=10, rep=60, return_mode="median")

    def record(case: str, impl: str, flops: float, function: Callable[[], Any] | None, note: str = "") -> None:
        entry: dict[str, Any] = {"case": case, "impl": impl, "tree": args.label, "ms": None, "tflops": None,
                                 "note": note}
        if function is not None:
            try:
                entry["ms"] = bench(function)
                entry["tflops"] = flops / (entry["ms"] * 1e-3) / 1e12
            except Exception as error:  # noqa: BLE001 - one failing row must not hide the others
                entry["note"] = f"error: {type(error).__name__}: {str(error)[:200]}"
        rows.append(entry)
        print(f"{case:44s} {impl:34s} {args.label:5s} "
              f"{entry['ms'] if entry['ms'] is None else round(entry['ms'], 4)!s:>10} ms "
              f"{'' if entry['tflops'] is None else round(entry['tflops'], 1)!s:>8} TFLOP/s  {entry['note']}",
              flush=True)

    def flat_call(As: list[Any], Bs: list[Any]) -> tuple[Callable[[], Any], Callable[[], list[Any]], tuple]:
        """The kernel alone on prepared flat buffers, and its result split per group."""
        arguments, metadata = gg.flatten_groups(As, Bs)
        return (lambda: gg.grouped_gemm_impl(*arguments)), (lambda: gg.split_groups(arguments[2], metadata)), arguments

    def check(results: list[Any], As: list[Any], Bs: list[Any]) -> str:
        worst = 0.0
        for out, A, B in zip(results, As, Bs):
            ref = A.float() @ B.float()
            if ref.numel():
                worst = max(worst, ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item())
        return f"rel err {worst:.1e}" + ("" if worst < 2e-2 else " WRONG")

    def grouped_rows(case: str, As: list[Any], Bs: list[Any], dtype: Any) -> None:
        flops = sum(2.0 * A.shape[0] * A.shape[1] * B.shape[1] for A, B in zip(As, Bs))
        kernel, split, arguments = flat_call(As, Bs)
        try:
            start = time.perf_counter()
            kernel()
            if device == "cuda":
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - start
            note = f"{check(split(), As, Bs)}; first call {compile_s:.1f}s"
            record(case, "tessera kernel (flat buffers)", flops, kernel, note)
        except Exception as error:  # noqa: BLE001
            record(case, "tessera kernel (flat buffers)", flops, None, f"error: {type(error).__name__}: {error}"[:300])
        if any(case.startswith(prefix) for prefix in args.tune):
            record_tuned(record, case, "tessera kernel tuned", flops, gg.grouped_gemm_impl,
                         lambda: gg.grouped_gemm_impl.autotune(*arguments), kernel, lambda: check(split(), As, Bs))
        if args.label == "new":
            record(case, f"torch.mm loop ({str(dtype).replace('torch.', '')})", flops,
                   lambda: [torch.mm(A, B) for A, B in zip(As, Bs)])

    seed_shapes = ((1024, 512, 2048), (512, 1024, 2048), (1024, 2048, 4096), (4096, 2048, 4096))
    if args.smoke:
        seed_shapes = ((32, 16, 16), (16, 32, 24), (0, 16, 16))
    for dtype in () if args.skip_grouped else (torch.float16, torch.bfloat16):
        As, Bs = gg.make_inputs(seed_shapes, dtype=dtype, device=device)
        case = f"seed000 4 groups {str(dtype).replace('torch.', '')}"
        flops = sum(2.0 * m * k * n for m, k, n in seed_shapes)
        results = gg.grouped_gemm(As, Bs)
        record(case, "tessera grouped_gemm (seed host code)", flops, lambda: gg.grouped_gemm(As, Bs),
               check(results, As, Bs))
        grouped_rows(case, As, Bs, dtype)
        if args.label == "new":
            record(case, "torch.mm loop in float32 (old baseline)", flops,
                   lambda: [A.float() @ B.float() for A, B in zip(As, Bs)])
        del As, Bs

    generator = torch.Generator().manual_seed(17)
    moe = ((8, 4096, 2048, 16384), (64, 2048, 7168, 32768), (16, 7168, 4096, 8192))
    if args.smoke:
        moe = ((4, 32, 16, 40),)
    for groups, k, n, tokens in () if args.skip_moe or args.skip_grouped else moe:
        weights = torch.rand(groups, generator=generator) ** 3  # skewed
        counts = (weights / weights.sum() * tokens).long()
        counts[torch.randperm(groups, generator=generator)[: max(1, groups // 8)]] = 0  # empty groups
        counts[0] += tokens - int(counts.sum())
        dtype = torch.bfloat16
        x = torch.randn(int(counts.sum()), k, device=device).to(dtype)
        w = (torch.randn(groups, k, n, device=device) / k ** 0.5).to(dtype)
        As = list(torch.split(x, counts.tolist()))
        Bs = list(w.unbind(0))
        case = f"moe G{groups} K{k} N{n} T{tokens} bf16"
        flops = 2.0 * x.shape[0] * k * n
        grouped_rows(case, As, Bs, dtype)
        if args.label == "new":
            offs = torch.cumsum(counts, 0).to(torch.int32).to(device)
            grouped_mm = getattr(torch, "_grouped_mm", None)
            if grouped_mm is None:
                record(case, "torch._grouped_mm", flops, None, "absent in this torch")
            else:
                try:
                    out = grouped_mm(x, w, offs=offs)
                    pieces = list(torch.split(out, counts.tolist()))
                    record(case, "torch._grouped_mm", flops, lambda: grouped_mm(x, w, offs=offs), check(pieces, As, Bs))
                except Exception as error:  # noqa: BLE001
                    record(case, "torch._grouped_mm", flops, None, f"error: {type(error).__name__}: {error}"[:300])
        del x, w, As, Bs
        if device == "cuda":
            torch.cuda.empty_cache()

    if args.attention:
        attention_rows(args, record, device, check_dtype=torch.bfloat16)
    if args.attention_backward:
        attention_backward_rows(args, record, device)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"issue17_{args.label}.json")
    with open(path, "w") as handle:
        json.dump({"label": args.label, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                   "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, handle, indent=1)
    print(f"wrote {path}")
    return 0


def record_tuned(record: Callable[..., None], case: str, impl: str, flops: float, kernel: Any,
                 tune: Callable[[], Any], run: Callable[[], Any], checked: Callable[[], str] | None = None) -> None:
    """Quick-tune `kernel` (`tune()` returns the Config), then record `run` timed under it; a failure
    is a row. The tuned choice is forgotten afterwards: it is kept per size bucket, not per shape,
    so every later call of `kernel` with the same dtypes would run it too. In session 9 the MoE rows
    after `--tune "seed000 4 groups bfloat16"` ran the seed's tuned Config (128 x 256, flat) under
    the heuristic label: 0.401 / 0.925 ms at G8 / G16, where that tree's heuristic Config runs
    0.66 / 1.63 ms (results/issue17/moe_session12.md)."""
    from tessera.runtime.tuning import forget
    try:
        start = time.perf_counter()
        os.environ["TESSERA_AUTOTUNE_EFFORT"] = "quick"
        config = tune()
        note = f"{config!r}; tuning {time.perf_counter() - start:.0f}s"
        record(case, impl, flops, run, note + (f"; {checked()}" if checked is not None else ""))
    except Exception as error:  # noqa: BLE001
        record(case, impl, flops, None, f"error: {type(error).__name__}: {error}"[:300])
    finally:
        os.environ["TESSERA_AUTOTUNE_EFFORT"] = "none"
        forget(kernel)


def attention_rows(args: argparse.Namespace, record: Callable[..., None], device: str, check_dtype: Any) -> None:
    """examples.attention (heuristic Config) against F.scaled_dot_product_attention, B4 H32."""
    import torch
    import torch.nn.functional as F

    from examples import attention as at
    for length, head_dim, causal in attention_shapes(args):
        for dtype in (torch.bfloat16, torch.float16) if head_dim == 128 and not causal else (check_dtype,):
            q, k, v, _ = at.make_inputs(4 if not args.smoke else 1, 32 if not args.smoke else 2, length, length,
                                        head_dim, causal=causal, dtype=dtype, device=device)
            flops = 4.0 * q.shape[0] * q.shape[1] * length * length * head_dim / (2 if causal else 1)
            case = f"attention S{length} D{head_dim}{' causal' if causal else ''} {str(dtype).replace('torch.', '')}"
            try:
                start = time.perf_counter()
                out = at.attention(q, k, v, causal)
                if device == "cuda":
                    torch.cuda.synchronize()
                first = time.perf_counter() - start
                ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
                error = ((out.float() - ref).norm() / ref.norm()).item()
                record(case, "tessera (heuristic config)", flops, lambda: at.attention(q, k, v, causal),
                       f"rel err {error:.1e}{'' if error < 2e-2 else ' WRONG'}; first call {first:.1f}s")
            except Exception as error:  # noqa: BLE001
                record(case, "tessera (heuristic config)", flops, None, f"error: {type(error).__name__}: {error}"[:300])
            if args.tune_attention and args.label == "new" and case == args.tune_attention:
                record_tuned(record, case, "tessera quick-tuned", flops, at.attention,
                             lambda: at.attention.autotune(q, k, v, causal),
                             lambda: at.attention(q, k, v, causal))
            if args.label == "new":
                record(case, "F.scaled_dot_product_attention", flops,
                       lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            del q, k, v


def attention_shapes(args: argparse.Namespace) -> list[tuple[int, int, bool]]:
    """(sequence, head_dim, causal) of the attention rows."""
    if args.smoke:
        return [(64, 16, True), (40, 16, False)]
    if args.attention_shapes:
        return [(int(s), int(d), c in ("1", "causal", "True")) for s, d, c in
                (item.split(":") for item in args.attention_shapes.split(","))]
    return [(4096, 128, False), (4096, 128, True), (4096, 64, False), (4096, 64, True)]


def attention_backward_rows(args: argparse.Namespace, record: Callable[..., None], device: str) -> None:
    """examples.attention's backward (heuristic Configs) against SDPA's, B4 H32 bf16: the backward
    kernel alone on the saved output and log-sum-exp, the autograd call, and SDPA's autograd
    backward. FLOPs are the usual 2.5x the forward's (five products; Tessera's dq pass recomputes
    two more). Gradients are checked against float32 SDPA's."""
    import torch
    import torch.nn.functional as F

    import tessera
    from examples import attention as at
    batch, heads = (1, 2) if args.smoke else (4, 32)
    for length, head_dim, causal in attention_shapes(args):
        dtype = torch.bfloat16
        q, k, v, _ = at.make_inputs(batch, heads, length, length, head_dim, causal=causal, dtype=dtype, device=device)
        grad_out = torch.randn_like(q)
        flops = 2.5 * 4.0 * batch * heads * length * length * head_dim / (2 if causal else 1)
        case = f"attention backward S{length} D{head_dim}{' causal' if causal else ''} bfloat16"
        leaves32 = [t.float().requires_grad_() for t in (q, k, v)]
        expected = torch.autograd.grad(F.scaled_dot_product_attention(*leaves32, is_causal=causal), leaves32,
                                       grad_out.float())
        del leaves32
        try:
            out, lse = at.attention(q, k, v, causal, True)
            grads = at.attention_bwd(grad_out, q, k, v, out, lse, causal)
            errors = [((g.float() - e).norm() / e.norm()).item() for g, e in zip(grads, expected)]
            worst = max(errors)
            note = "rel err dq/dk/dv " + "/".join(f"{e:.1e}" for e in errors) + ("" if worst < 2e-2 else " WRONG")
            record(case, "tessera attention_bwd (kernel)", flops,
                   lambda: at.attention_bwd(grad_out, q, k, v, out, lse, causal), note)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            trained = at.attention_trainable(*leaves, causal)
            record(case, "tessera autograd backward", flops,
                   lambda: torch.autograd.grad(trained, leaves, grad_out, retain_graph=True))
            if case == args.tune_backward:
                record_tuned(record, case, "tessera attention_bwd quick-tuned", flops, at.attention_bwd,
                             lambda: at.attention_bwd.autotune(grad_out, q, k, v, out, lse, causal),
                             lambda: at.attention_bwd(grad_out, q, k, v, out, lse, causal))
            for options in eval(args.backward_configs) if args.backward_configs else ():  # noqa: S307 - the developer's own
                configured = tessera.kernel(at.attention_bwd.fn, config=tessera.Config(**options))
                record(case, f"tessera attention_bwd {options}", flops,
                       lambda: configured(grad_out, q, k, v, out, lse, causal))
        except Exception as error:  # noqa: BLE001
            record(case, "tessera attention_bwd (kernel)", flops, None, f"error: {type(error).__name__}: {error}"[:300])
        if args.label == "new":
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            try:
                sdpa_out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                record(case, "SDPA autograd backward", flops,
                       lambda: torch.autograd.grad(sdpa_out, leaves, grad_out, retain_graph=True))
            except Exception as error:  # noqa: BLE001 - the CPU's SDPA may lack a bf16 backward
                record(case, "SDPA autograd backward", flops, None, f"error: {type(error).__name__}: {error}"[:300])
        del q, k, v, grad_out, expected
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
