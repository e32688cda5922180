"""Issue 17 item 5, cross-entropy: what the rows of `benchmarks/reductions.py` do not separate.

    PYTHONPATH=<tree> python3 benchmarks/reductions_probe.py --label new --out $OUT
    python benchmarks/reductions_probe.py --label smoke --smoke     # CPU interpreter, tiny sizes

Rows (bf16, 4096 x 32000 unless named; each checked against float32 torch in the same run):
- `losses kernel alone`: `examples.cross_entropy.cross_entropy_losses` without the host's `.mean()`;
- `losses + mean`: what reductions.py times (the extra launch of torch's mean, 16 KB);
- `label gather last`: the same kernel with the label logit gathered after the row's
  log-sum-exp (the row is then in L2, and the chunk loop does not wait for the label's address);
- `torch cross_entropy`: `F.cross_entropy(logits, labels)` on the bf16 logits;
- `softmax 4096 x 32768 chunks of 4096` and `torch softmax`: the online sum's other user.
`of_copy` divides a device copy of the bytes each row must move (timed in the same run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable

from _timing import median_ms  # benchmarks/, the script's folder

os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")  # heuristic Configs, as reductions.py times them
import torch  # noqa: E402

import tessera  # noqa: E402
import tessera.language as hl  # noqa: E402


@tessera.kernel
def losses_gather_last(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`examples.cross_entropy.cross_entropy_losses` with the label's logit read last."""
    n, v = logits.size()
    losses = torch.empty([n], dtype=torch.float32, device=logits.device)
    logits_flat = logits.view(-1)
    for tile_n in hl.tile(n):
        rows = logits[tile_n, :].to(torch.float32)
        row_max = torch.amax(rows, dim=1)
        sum_exp = torch.sum(torch.exp(rows - row_max[:, None]), dim=1)
        label_logits = hl.load(logits_flat, [tile_n.index * v + labels[tile_n]]).to(torch.float32)
        losses[tile_n] = row_max + torch.log(sum_exp) - label_logits
    return losses


NORM_CONFIGS: dict[str, list[dict[str, Any] | None]] = {  # None: the heuristic Config
    "layer_norm_bwd": [None, dict(block_sizes=[64, 2], num_warps=8, num_stages=3),
                       dict(block_sizes=[64, 1], num_warps=4, num_stages=3),
                       dict(block_sizes=[64, 4], num_warps=16, num_stages=2)],
    "rms_norm_bwd": [None, dict(block_sizes=[64, 2], num_warps=8, num_stages=3),
                     dict(block_sizes=[64, 1], num_warps=4, num_stages=3)],
    "cross_entropy_losses": [None, dict(block_sizes=[1], reduction_loops=[4096], num_warps=8, num_stages=4)],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--parts", nargs="*", default=["cross_entropy", "softmax"],
                        help="cross_entropy, softmax, kernel_time (the norms' and cross-entropy's launches "
                             "timed plain, replayed from a CUDA graph, and by the profiler)")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    from examples._harness import assert_close
    device = "cpu" if args.smoke else "cuda"
    mode = "interpret" if args.smoke else "compiled"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    rows: list[dict[str, Any]] = []

    def bench(function: Callable[[], Any]) -> float:
        return median_ms(function, args.smoke)

    def copy_ms(moved: int) -> float | None:
        if args.smoke:
            return None
        source = torch.empty(moved // 2, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        return bench(lambda: target.copy_(source))

    def record(case: str, function: Callable[[], Any], expected: Any, moved: int, copy: float | None,
               kernel_time: bool = False) -> None:
        entry: dict[str, Any] = {"case": case, "ms": None}
        try:
            try:
                assert_close(function(), expected, (2e-2, 2e-2), case)
                entry["check"] = "correct"
            except AssertionError as error:
                entry["check"] = f"WRONG: {str(error).splitlines()[0][:150]}"
            entry["ms"] = bench(function)
            entry["gbps"] = moved / entry["ms"] / 1e6
            entry["of_copy"] = round(copy / entry["ms"], 3) if copy else None
            if kernel_time and not args.smoke:
                entry.update(_kernel_times(function, bench, copy))
        except Exception as error:  # noqa: BLE001 - one failing row must not hide the others
            entry["check"] = f"error: {type(error).__name__}: {str(error)[:200]}"
        rows.append(entry)
        extra = "".join(f"  {k} {v}" for k, v in entry.items() if k.startswith(("graph", "kernels")))
        print(f"{case:44s} {entry['ms'] if entry['ms'] is None else round(entry['ms'], 4)!s:>8} ms "
              f"{entry.get('of_copy') or '':>6} of copy  {entry['check']}{extra}", flush=True)

    with tessera.settings.override(mode=mode):
        if "cross_entropy" in args.parts:
            _cross_entropy_rows(record, copy_ms, dtype, device, args.smoke)
        if "softmax" in args.parts:
            _softmax_rows(record, copy_ms, dtype, device, args.smoke)
        if "kernel_time" in args.parts:
            _kernel_time_rows(record, copy_ms, dtype, device, args.smoke)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"reductions_probe_{args.label}.json"), "w") as handle:
        json.dump({"label": args.label, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                   "rows": rows}, handle, indent=1)
    return 0


def _cross_entropy_rows(record: Callable[..., None], copy_ms: Callable[[int], Any], dtype: torch.dtype,
                        device: str, smoke: bool) -> None:
    from examples.cross_entropy import cross_entropy_losses, make_inputs
    logits, labels = make_inputs(*((9, 300) if smoke else (4096, 32000)), dtype=dtype, device=device)
    losses = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    moved = logits.nbytes + labels.nbytes + losses.nbytes
    copy = copy_ms(moved)
    print(f"{'cross_entropy device copy':44s} {copy} ms", flush=True)
    record("losses kernel alone", lambda: cross_entropy_losses(logits, labels), losses, moved, copy)
    record("losses + mean", lambda: cross_entropy_losses(logits, labels).mean(), losses.mean(), moved, copy)
    record("label gather last + mean", lambda: losses_gather_last(logits, labels).mean(), losses.mean(), moved, copy)
    record("torch cross_entropy (bf16 logits)", lambda: torch.nn.functional.cross_entropy(logits, labels),
           losses.mean().to(logits.dtype), moved, copy)  # torch returns the logits' dtype


def _softmax_rows(record: Callable[..., None], copy_ms: Callable[[int], Any], dtype: torch.dtype,
                  device: str, smoke: bool) -> None:
    from examples.softmax import softmax
    x = torch.randn(*((9, 300) if smoke else (4096, 32768)), device=device).to(dtype)
    expected = torch.softmax(x.float(), -1).to(dtype)
    chunked = tessera.kernel(softmax.fn, config=tessera.Config(block_sizes=[1], reduction_loops=[128 if smoke else 4096],
                                                               num_warps=8, num_stages=3))
    moved = 2 * x.nbytes
    copy = copy_ms(moved)
    record("softmax 4096 x 32768 chunks of 4096, 8 warps", lambda: chunked(x), expected, moved, copy)
    record("torch softmax", lambda: torch.softmax(x, -1), expected, moved, copy)


def _kernel_time_rows(record: Callable[..., None], copy_ms: Callable[[int], Any], dtype: torch.dtype,
                      device: str, smoke: bool) -> None:
    import importlib
    for name, (module_name, make, reference, sizes) in {
            "layer_norm_bwd": ("examples.layer_norm", "make_bwd_inputs", "reference_bwd", (16384, 4096)),
            "rms_norm_bwd": ("examples.rms_norm", "make_bwd_inputs", "reference_bwd", (16384, 4096)),
            "cross_entropy_losses": ("examples.cross_entropy", "make_inputs", None, (4096, 32000))}.items():
        module = importlib.import_module(module_name)
        inputs = getattr(module, make)(*((33, 200) if smoke else sizes), dtype=dtype, device=device)
        if reference is None:
            expected: Any = torch.nn.functional.cross_entropy(inputs[0].float(), inputs[1], reduction="none")
        else:
            expected = getattr(module, reference)(*inputs)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        moved = sum(t.nbytes for t in tensors) + sum(t.nbytes for t in (expected if isinstance(expected, tuple)
                                                                         else (expected,)))
        copy = copy_ms(moved)
        kernel = getattr(module, name)
        for options in NORM_CONFIGS[name]:
            chosen = kernel if options is None else tessera.kernel(kernel.fn, config=tessera.Config(**options))
            record(f"{name} {options or 'heuristic'}", lambda chosen=chosen: chosen(*inputs), expected, moved, copy,
                   kernel_time=True)
        del inputs, expected
        if device == "cuda":
            torch.cuda.empty_cache()


def _kernel_times(function: Callable[[], Any], bench: Callable[[Callable[[], Any]], float],
                  copy: float | None) -> dict[str, Any]:
    """The call replayed from a CUDA graph (no host work between launches), and the profiler's
    device time of each kernel a call launches (mean over 20 calls, without L2 flushes)."""
    result: dict[str, Any] = {}
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            function()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            function()
        result["graph_ms"] = round(bench(graph.replay), 4)
        result["graph_of_copy"] = round(copy / result["graph_ms"], 3) if copy else None
    except Exception as error:  # noqa: BLE001
        result["graph_ms"] = f"error: {type(error).__name__}: {str(error)[:120]}"
    try:
        from torch.profiler import ProfilerActivity, profile
        function()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                function()
            torch.cuda.synchronize()
        from torch.autograd import DeviceType
        events = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
        per_call = len(events) // 20
        kernels = [(events[j].name[:40], round(sum(e.time_range.elapsed_us() for e in events[j::per_call]) / 20, 2))
                   for j in range(per_call)]  # the launches of one call in order, microseconds each
        result["kernels_us"] = kernels
    except Exception as error:  # noqa: BLE001 - no profiler there: the timed rows stand
        result["kernels_us"] = f"error: {type(error).__name__}: {str(error)[:120]}"
    return result


if __name__ == "__main__":
    sys.exit(main())
