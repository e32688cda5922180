"""One attention forward kernel per process, for `ncu`; and the Helion 3-D form timed beside the 2-D one.

    ncu --clock-control none --set full -k regex:attention_kernel --launch-skip 2 --launch-count 1 \\
        python3 benchmarks/attention_profile.py tessera          # examples/attention.py, heuristic Config
    ncu ... -k regex:'flash|fmha|sdpa|attn' python3 benchmarks/attention_profile.py sdpa
    python3 benchmarks/attention_profile.py forms --helion PATH/attention.py --out $OUT

`tessera` and `sdpa` run the kernel three times at B4 H32 S4096 D128 bf16 (`--head-dim`,
`--causal`): ncu skips the first two. `forms` times Helion's own `attention` (3-D tiles, `torch.bmm`
and `baddbmm`; the file is read and its `helion` imports renamed in memory, as
benchmarks/helion_examples.py does), Tessera's 2-D `examples/attention.py` and SDPA, each checked
against float32 SDPA, and writes `attention_forms.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import types
from typing import Any, Callable

import torch
import torch.nn.functional as F


def inputs(head_dim: int, dtype: torch.dtype, length: int = 4096) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(4, 32, length, head_dim, device="cuda", dtype=dtype) for _ in range(3))


def load_helion_example(path: str) -> types.ModuleType:
    """Helion's example module with its `helion` imports pointing at tessera (nothing else changed)."""
    from helion_examples import rewrite_imports
    module = types.ModuleType("helion_attention_example")
    module.__file__ = path
    sys.modules[module.__name__] = module
    with open(path) as handle:
        exec(compile(rewrite_imports(handle.read()), path, "exec"), module.__dict__)  # noqa: S102 - a benchmark
    return module


def time_forms(args: argparse.Namespace) -> None:
    from attention_ceiling import measure
    from examples import attention as at
    helion = load_helion_example(args.helion)
    rows: list[dict[str, Any]] = []
    for head_dim in args.head_dims:
        for dtype in (torch.bfloat16, torch.float16):
            q, k, v = inputs(head_dim, dtype)
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
            flops = 4.0 * 4 * 32 * 4096 * 4096 * head_dim
            runs: dict[str, Callable[[], torch.Tensor]] = {
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
                "tessera 2-D (examples/attention.py)": lambda: at.attention(q, k, v),
                "helion 3-D form (Helion's examples/attention.py)": lambda: helion.attention(q, k, v)[0],
            }
            case = f"D{head_dim} {str(dtype).removeprefix('torch.')}"
            rows.extend(measure(case, name, flops, run, ref) for name, run in runs.items())
    with open(os.path.join(args.out, "attention_forms.json"), "w") as handle:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, handle, indent=1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("tessera", "sdpa", "forms"))
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--helion", help="Helion's examples/attention.py (forms)")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128], help="forms: head dims to time")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    if args.what == "forms":
        time_forms(args)
        return 0
    q, k, v = inputs(args.head_dim, torch.bfloat16)
    if args.what == "tessera":
        from examples import attention as at
        at.attention(q, k, v, args.causal)  # compiles outside the profiled launches
        run: Callable[[], Any] = lambda: at.attention(q, k, v, args.causal)
    else:
        run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
