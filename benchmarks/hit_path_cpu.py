"""The stages of a cache-hit call of examples/add.py, each timed alone, launch stubbed (CPU only).

    PYTHONPATH=. python benchmarks/hit_path_cpu.py [--calls 3000] [--repeats 9] [--clock thread] [--out DIR]

What issue 17 item 7 asks to cut, split the way the call runs. After a first call compiles in
interpret mode, every variant's loaded kernel is replaced by dispatch_overhead_cpu.py's stub,
whose direct launch is the compiled mode's generated one around a C launch call that does
nothing. Rows (each the median over `--repeats` samples of `--calls` back-to-back calls):

- the whole call `add(x, y)` on [1, 16] + [1, 16] float32, and torch's `x + y` for scale;
- `RepeatedCalls.decide`: the fast check of the arguments that finds the call's decision;
- `run_compiled`: the usual path after the decision (a runner, the host code with its
  `hl.tile` and the launch's own memo check, the direct launch);
- its parts alone: add.py's host code as plain torch, `hl.tile(out.size())`, the launch
  (`CompiledRunner.launch`: the launch memo's fast check, the remembered decision, the direct
  launch), and the direct launch given data pointers;
- where the runtime has host replay (runtime/host_replay.py): the replay alone, which a repeated
  call runs instead of `run_compiled`, and `torch.empty_strided`, its one allocation.

The same command on two trees (`PYTHONPATH=<tree>`) gives a before/after table; rows a tree
lacks are left out. Writes `hit_path_cpu.json` (or `--name`) under `--out`.
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

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from _results import write_json  # noqa: E402 - benchmarks/, the script's folder
import dispatch_overhead_cpu  # noqa: E402
from dispatch_overhead_cpu import (_CLOCKS, _StubLaunch, _capture_launch, _stub_variants, _tile_call,  # noqa: E402
                                   per_call_us)



def measure(calls: int, repeats: int) -> list[dict[str, Any]]:
    from examples.add import add
    from tessera.runtime.compiled import run_compiled

    x, y = torch.randn(1, 16), torch.randn(1, 16)
    assert torch.equal(add(x, y), x + y), "add is wrong before stubbing"
    _stub_variants(add)
    for _ in range(5):  # the decisions, their fast checks and (where there is one) the replay
        add(x, y)
    decision = add.config_choices.calls.decide((x, y))
    assert decision is not None, "a repeated call found no decision"
    rows: list[dict[str, Any]] = []

    def row(name: str, function: Callable[[], Any]) -> None:
        rows.append({"name": name, "us": round(per_call_us(function, calls, repeats), 3)})

    def host_code(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)  # examples/add.py's host code, as plain torch
        return torch.empty(a.shape, dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)

    row("torch x + y", lambda: x + y)
    row("tessera add(x, y), launch stubbed", lambda: add(x, y))
    row("  RepeatedCalls.decide (fast check of the arguments)", lambda: add.config_choices.calls.decide((x, y)))
    row("  run_compiled (runner, host code, hl.tile, launch)",
        lambda: run_compiled(add, decision.mode, (x, y), {}, decision.config, decision.device, None, decision.stamp))
    row("    add.py host code alone (broadcast, promote, empty)", lambda: host_code(x, y))
    launch = _capture_launch(add, (x, y))
    if launch is not None:
        runner, tile_range, body = launch
        row("    hl.tile(out.size())", _tile_call(runner, decision.config, x))
        row("    CompiledRunner.launch (fast check, remembered launch)", lambda: runner.launch(tile_range, body))
        remembered = _remembered(add)
        if remembered is not None and getattr(remembered, "pointer_direct", None) is not None:
            out = torch.empty_like(x)
            pointers = (out.data_ptr(), x.data_ptr(), y.data_ptr())
            row("      direct launch given data pointers", lambda: remembered.pointer_direct(pointers))
    replay = getattr(decision, "replay", None)
    if callable(replay):
        row("  host replay (allocate, pointers, direct launch)", lambda: replay((x, y)))
        row("    torch.empty_strided alone", lambda: torch.empty_strided((1, 16), (16, 1), dtype=x.dtype,
                                                                            device=x.device))
    assert _StubLaunch.launches > 0
    return rows


def _remembered(kernel: Any) -> Any:
    for memo in kernel.store.memos.values():
        for remembered in memo.values():
            return remembered
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="back-to-back calls per sample")
    parser.add_argument("--repeats", type=int, default=9, help="samples; the median is reported")
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="thread",
                        help="the thread's CPU time (default: steadier on a shared machine) or wall time")
    parser.add_argument("--out", default=os.path.join(_HERE, "results"), help="directory of the JSON result")
    parser.add_argument("--name", default="hit_path_cpu", help="JSON file name without .json")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(_HERE))
    dispatch_overhead_cpu._clock = _CLOCKS[args.clock]  # what per_call_us reads
    rows = measure(args.calls, args.repeats)
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}} | {r['us']:7.2f} us")
    import tessera
    write_json({"rows": rows, "tessera": os.path.dirname(tessera.__file__), "python": platform.python_version(),
                "torch": torch.__version__, "calls": args.calls, "repeats": args.repeats, "clock": args.clock},
               args.out, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
