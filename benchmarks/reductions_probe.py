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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    from examples.cross_entropy import cross_entropy_losses, make_inputs
    from examples.softmax import softmax
    device = "cpu" if args.smoke else "cuda"
    mode = "interpret" if args.smoke else "compiled"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    n, v = (9, 300) if args.smoke else (4096, 32000)
    rows: list[dict[str, Any]] = []

    def bench(function: Callable[[], Any]) -> float:
        return median_ms(function, args.smoke)

    def copy_ms(moved: int) -> float | None:
        if args.smoke:
            return None
        source = torch.empty(moved // 2, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        return bench(lambda: target.copy_(source))

    def record(case: str, function: Callable[[], Any], expected: torch.Tensor, moved: int, copy: float | None) -> None:
        entry: dict[str, Any] = {"case": case, "ms": None}
        try:
            result = function()
            error = float((result.float() - expected.float()).abs().max())
            scale = float(expected.float().abs().max())
            entry["check"] = "correct" if error <= 2e-2 * max(scale, 1.0) else f"WRONG: max error {error:.3g}"
            entry["ms"] = bench(function)
            entry["gbps"] = moved / entry["ms"] / 1e6
            entry["of_copy"] = round(copy / entry["ms"], 3) if copy else None
        except Exception as error:  # noqa: BLE001 - one failing row must not hide the others
            entry["check"] = f"error: {type(error).__name__}: {str(error)[:200]}"
        rows.append(entry)
        print(f"{case:44s} {entry['ms'] if entry['ms'] is None else round(entry['ms'], 4)!s:>8} ms "
              f"{entry.get('of_copy') or '':>6} of copy  {entry['check']}", flush=True)

    with tessera.settings.override(mode=mode):
        logits, labels = make_inputs(n, v, dtype=dtype, device=device)
        losses = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        moved = logits.nbytes + labels.nbytes + losses.nbytes
        copy = copy_ms(moved)
        rows.append({"case": "cross_entropy device copy", "ms": copy})
        print(f"{'cross_entropy device copy':44s} {copy} ms", flush=True)
        record("losses kernel alone", lambda: cross_entropy_losses(logits, labels), losses, moved, copy)
        record("losses + mean", lambda: cross_entropy_losses(logits, labels).mean(), losses.mean(), moved, copy)
        record("label gather last + mean", lambda: losses_gather_last(logits, labels).mean(), losses.mean(), moved,
               copy)
        record("torch cross_entropy (bf16 logits)", lambda: torch.nn.functional.cross_entropy(logits, labels),
               losses.mean(), moved, copy)
        del logits, labels, losses
        shape = (9, 300) if args.smoke else (4096, 32768)
        x = torch.randn(*shape, device=device).to(dtype)
        expected = torch.softmax(x.float(), -1)
        chunked = tessera.kernel(softmax.fn, config=tessera.Config(block_sizes=[1], reduction_loops=[4096 if not
                                                                    args.smoke else 128], num_warps=8, num_stages=3))
        moved = 2 * x.nbytes
        copy = copy_ms(moved)
        rows.append({"case": "softmax device copy", "ms": copy})
        record("softmax 4096 x 32768 chunks of 4096, 8 warps", lambda: chunked(x), expected, moved, copy)
        record("torch softmax", lambda: torch.softmax(x, -1), expected, moved, copy)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"reductions_probe_{args.label}.json"), "w") as handle:
        json.dump({"label": args.label, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                   "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
