"""Tessera's host cost per cache-hit call for four kinds of kernel, launches stubbed (CPU only).

    PYTHONPATH=. python benchmarks/dispatch_cases_cpu.py [--calls 2000] [--repeats 7] [--clock thread]
        [--out DIR] [--name NAME] [--profile CASE]

Each case is compiled by a first call in interpret mode; then every variant's loaded kernel is
replaced by `_StubLaunch` (dispatch_overhead_cpu.py), whose direct launch is the compiled mode's
generated one around a C launch call that does nothing. What is timed is Tessera's own host work
on a hit, plus the kernel's host code (allocation etc.), which a hand-written wrapper also runs:

- `add`: examples/add.py on [1, 16] (broadcast, promote, allocate, one launch);
- `matmul`: examples/matmul.py on [16, 16] x [16, 16];
- `matmul, closure epilogue per call`: a matmul kernel taking an epilogue function, called with a
  new `lambda acc, tile: acc + bias[tile[1]]` on every call (a closure over `bias`);
- `split-K matmul`: examples/matmul.py with `Config(split_k=4)` on [16, 128] x [128, 16], whose
  launch takes scratch buffers (kept between launches as on a GPU: a stubbed launch writes none).

Per-call times are medians over `--repeats` runs of `--calls` back-to-back calls; `--clock
thread` counts the thread's CPU time only (steadier on a shared machine). Writes `<name>.json`
(default `dispatch_cases_cpu`) under `--out` (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Callable

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TESSERA_MODE", "interpret")

import torch  # noqa: E402

from _results import write_json  # noqa: E402 - benchmarks/, the script's folder

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

import dispatch_overhead_cpu as overhead  # noqa: E402
import _dispatch_kernels  # noqa: E402


def cases() -> list[tuple[str, Any, Callable[[], Any], Callable[[], torch.Tensor]]]:
    """(name, kernel, one call, its reference) per case."""
    from examples.add import add
    x, y = torch.randn(1, 16), torch.randn(1, 16)
    return [("add", add, lambda: add(x, y), lambda: x + y), *_dispatch_kernels.matmul_cases("cpu")]


def _keep_scratch_as_on_a_gpu() -> None:
    """Scratch buffers are kept between launches on a GPU only (runtime/scratch.py); a stubbed
    launch changes no buffer, so the CPU may keep them too, and split-K's hit path is the GPU's."""
    try:
        from tessera.runtime import scratch
    except ImportError:  # an older runtime: scratch buffers are made on every launch
        return
    scratch.keeps_scratch = lambda device: True
    scratch.stream_handle = lambda device: 0


def measure(calls: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name, kernel, call, reference in cases():
        torch.testing.assert_close(call(), reference(), rtol=1e-4, atol=1e-4)  # compiles, checks the answer
        overhead._stub_variants(kernel)
        if name.startswith("split-K"):
            _keep_scratch_as_on_a_gpu()
        before = overhead._StubLaunch.launches
        call()
        assert overhead._StubLaunch.launches == before + 1, f"{name}: a hit call must launch the stub once"
        us = overhead.per_call_us(call, calls, repeats)
        rows.append({"name": name, "us": round(us, 3), "cache_info": list(kernel.cache_info())})
    return rows


def profile(case: str, calls: int) -> str:
    for name, kernel, call, reference in cases():
        if name.startswith(case):
            call()
            overhead._stub_variants(kernel)
            if name.startswith("split-K"):
                _keep_scratch_as_on_a_gpu()
            call()
            from _profiling import top_functions
            return top_functions(call, calls, 30)
    raise SystemExit(f"no case {case!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="back-to-back calls per sample")
    parser.add_argument("--repeats", type=int, default=7, help="samples; the median is reported")
    parser.add_argument("--clock", choices=sorted(overhead._CLOCKS), default="wall")
    parser.add_argument("--out", default=os.path.join(_HERE, "results"), help="directory of the JSON result")
    parser.add_argument("--name", default="dispatch_cases_cpu", help="JSON file name without .json")
    parser.add_argument("--profile", default=None, help="print cProfile's view of the case starting with this")
    args = parser.parse_args(argv)
    overhead._clock = overhead._CLOCKS[args.clock]
    if args.profile:
        print(profile(args.profile, args.calls))
        return 0
    rows = measure(args.calls, args.repeats)
    for row in rows:
        print(f"{row['name']:<40} | {row['us']:8.2f} us   cache_info {row['cache_info']}")
    result = {"rows": rows, "python": platform.python_version(), "torch": torch.__version__, "calls": args.calls,
              "repeats": args.repeats, "clock": args.clock, "launch": "stubbed (interpret mode, direct launch generated)"}
    write_json(result, args.out, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
