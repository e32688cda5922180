"""Per-call host cost of a tiny kernel: Tessera against the same work in hand-written Triton.

    PYTHONPATH=. python benchmarks/dispatch.py [--calls 2000] [--repeats 15] [--out DIR]
    PYTHONPATH=. python benchmarks/dispatch.py --smoke        # CPU, Triton's interpreter, few calls
    PYTHONPATH=. python benchmarks/dispatch.py --profile      # also cProfile's view of tessera add's hit path

The kernel is an add of two [1, 16] tensors: one program, so the GPU finishes each launch long
before the host can issue the next and the time per call is the host's. Two Tessera kernels are
each measured against a hand-written Triton wrapper that runs the same host code around the
same `@triton.jit` add (`_triton_kernels.add_2d`) launched the usual way (JITFunction.run: bind,
specialize, key, launch):

- `tessera add_same_shape(x, y)` (host code: allocate the output) against "triton wrapper
  (allocate + launch)";
- `tessera add(x, y)` of examples/add.py (host code: broadcast, promote dtypes, allocate)
  against "triton wrapper (broadcast + promote + allocate + launch)".

Other rows, for scale: torch eager `x + y` (issue 17's goal: tessera add <= 2x of it); add.py's
host code alone (broadcast, promote, allocate: the part of that cost no launcher can remove);
the Triton launch alone into a preallocated output;
the usual path of tessera add after its call's decision, which host replay (runtime/host_replay.py)
skips; the add_same_shape pair with a new width (1..97) on every call, where Tessera's exact-facts memo
misses; a 16x16 matmul (examples/matmul.py), the same with a closure epilogue made on every call,
and a split-K matmul, beside torch.mm; Tessera's launcher alone (the arguments captured from a real call: its keyed path, and the
direct launch a memo hit calls), when the runtime has one.

Method: after warm-up calls (compiles), each sample synchronizes, times `--calls` back-to-back
calls with `time.perf_counter`, synchronizes again before stopping the clock, and divides. No
CUDA graphs. Rows are sampled in turns (one sample of each per round), and the median of `--repeats`
samples is reported with the quartiles (`us_p25`, `us_p75`): a difference inside that spread is noise. Writes `<name>.json` under `--out`
(default benchmarks/results; name `dispatch_<gpu>` on CUDA, e.g. `dispatch_h100`, `dispatch_cpu_smoke` with --smoke).
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

from _results import write_json  # benchmarks/, the script's folder

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)


def _setup(smoke: bool) -> None:
    """Pick Triton's mode before anything imports it."""
    if smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    for path in (_ROOT, _HERE):
        if path not in sys.path:
            sys.path.insert(0, path)


def sample_per_call(function: Callable[[], Any], calls: int, synchronize: Callable[[], None]) -> float:
    """Wall time of `calls` back-to-back calls, divided by `calls`, in microseconds."""
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        function()
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def interleaved_samples(functions: list[Callable[[], Any]], calls: int, repeats: int,
                        synchronize: Callable[[], None]) -> list[list[float]]:
    """`repeats` samples of each function, taken in turns (one of each per round), so that a slow
    drift of the machine's speed touches every row alike."""
    samples: list[list[float]] = [[] for _ in functions]
    for _ in range(repeats):
        for function, taken in zip(functions, samples):
            taken.append(sample_per_call(function, calls, synchronize))
    return samples


def _capture_tessera_launch(kernel: Any, args: tuple) -> tuple[Any, tuple, list, Any, list, Any] | None:
    """(launcher, grid, arguments, direct launch, captured values, the direct launch given the
    tensors' data pointers or None) of the single launch of `kernel(*args)`, a memo hit, if its
    runtime has remembered launches with a launcher."""
    import torch
    try:
        from tessera.runtime.variants import RememberedLaunch
    except ImportError:
        return None
    captured: list[tuple[Any, list]] = []
    original = RememberedLaunch.run

    def recording(self: Any, runner: Any, values: list, *rest: Any) -> None:
        captured.append((self, list(values)))
        original(self, runner, values, *rest)

    RememberedLaunch.run = recording  # type: ignore[method-assign]
    try:
        kernel(*args)
        usual = _usual_path(kernel, args) if not captured else None
        if usual is not None:  # a replayed call (host_replay.py) runs no remembered launch
            usual()
    finally:
        RememberedLaunch.run = original  # type: ignore[method-assign]
    if not captured:
        return None
    remembered, values = captured[0]
    launcher = getattr(remembered.variant.loaded, "launcher", None)
    if launcher is None:
        return None
    arguments = list(remembered.arguments)
    for position, index in remembered.tensor_slots:
        arguments[position] = values[index]
    pointer_direct = getattr(remembered, "pointer_direct", None)
    pointers = tuple(value.data_ptr() for value in values if isinstance(value, torch.Tensor))
    with_pointers = (lambda: pointer_direct(pointers)) if pointer_direct is not None else None
    return launcher, remembered.grid, arguments, remembered.direct, values, with_pointers


def _usual_path(kernel: Any, args: tuple) -> Callable[[], Any] | None:
    """A call of `kernel(*args)` that finds its decision and then runs the host code the usual
    way, as before host replay (runtime/host_replay.py); None where the runtime has neither."""
    try:
        from tessera.runtime.compiled import run_compiled
    except ImportError:
        return None
    calls = kernel.config_choices.calls
    decision = calls.decide(args)
    if decision is None or not hasattr(decision, "replay"):
        return None

    def usual() -> Any:
        decided = calls.decide(args)
        return run_compiled(kernel, decided.mode, args, {}, decided.config, decided.device, None, decided.stamp)
    return usual


def measure(device: str, calls: int, repeats: int, warmup: int) -> dict[str, Any]:
    import torch

    import _triton_kernels
    import tessera
    import tessera.language as hl
    from examples.add import add

    def synchronize() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    x = torch.randn(1, 16, device=device)
    y = torch.randn(1, 16, device=device)
    out = torch.empty_like(x)
    block = 32
    grid = (1, 1)

    def triton_launch() -> None:
        _triton_kernels.add_2d[grid](x, y, out, 1, 16, 16, 16, 16, BLOCK_M=block, BLOCK_N=block)

    def triton_wrapper(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        result = torch.empty(a.shape, dtype=a.dtype, device=a.device)
        m, n = result.shape
        launch_grid = (triton.cdiv(m, block), triton.cdiv(n, block))
        _triton_kernels.add_2d[launch_grid](a, b, result, m, n, a.stride(0), b.stride(0), result.stride(0),
                                            BLOCK_M=block, BLOCK_N=block)
        return result

    def triton_broadcasting_wrapper(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)  # examples/add.py's host code, line for line
        result = torch.empty(a.shape, dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
        m, n = result.shape
        launch_grid = (triton.cdiv(m, block), triton.cdiv(n, block))
        _triton_kernels.add_2d[launch_grid](a, b, result, m, n, a.stride(0), b.stride(0), result.stride(0),
                                            BLOCK_M=block, BLOCK_N=block)
        return result

    @tessera.kernel
    def add_same_shape(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        result = torch.empty(a.shape, dtype=a.dtype, device=a.device)  # the wrapper's host code
        for tile in hl.tile(result.size()):
            result[tile] = a[tile] + b[tile]
        return result

    import triton
    expected = x + y
    rows: list[tuple[str, Callable[[], Any], str]] = [
        ("torch eager (x + y)", lambda: x + y, ""),
        ("triton launch (preallocated out)", triton_launch, ""),
        ("triton wrapper (allocate + launch)", lambda: triton_wrapper(x, y), "baseline of add_same_shape"),
        ("tessera add_same_shape(x, y)", lambda: add_same_shape(x, y), "vs allocate + launch"),
        ("triton wrapper (broadcast + promote + allocate + launch)", lambda: triton_broadcasting_wrapper(x, y),
         "baseline of add"),
        ("tessera add(x, y)", lambda: add(x, y), "vs broadcast + promote + allocate + launch"),
    ]
    for name, function, _ in rows:  # warm-up compiles, and checks each row computes the sum
        for _ in range(warmup):
            result = function()
        synchronize()
        if result is not None and not torch.allclose(result, expected):
            raise AssertionError(f"{name} computed a wrong sum")
    torch.testing.assert_close(out, expected)
    # A new width on every call (a sequence length per batch): Tessera's exact-facts memo misses.
    widths = [(torch.randn(1, n, device=device), torch.randn(1, n, device=device)) for n in range(1, 98)]
    for name, function in (("triton wrapper (allocate + launch), a new width every call", triton_wrapper),
                           ("tessera add_same_shape, a new width every call", add_same_shape)):
        for a, b in widths:  # warm-up: every width once (compiles), each sum checked
            torch.testing.assert_close(function(a, b), a + b)
        turn = itertools.count()
        rows.append((name, lambda function=function, turn=turn: function(*widths[next(turn) % len(widths)]),
                     "informative"))
    # Issue 17 item 7's other hit paths: a matmul, the same with a closure epilogue made on every
    # call (Helion's examples' form), a split-K matmul (scratch buffers); torch.mm for scale
    import _dispatch_kernels
    small_a, small_b = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
    rows.append(("torch.mm (16x16x16)", lambda: torch.mm(small_a, small_b), "informative"))
    for name, _, function, reference in _dispatch_kernels.matmul_cases(device):
        for _ in range(warmup):  # compiles, and checks the product
            result = function()
        synchronize()
        torch.testing.assert_close(result, reference(), rtol=1e-4, atol=1e-4)
        rows.append((f"tessera {name}", function, "informative"))

    def add_host_code(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)  # examples/add.py's host code alone: no launch
        return torch.empty(a.shape, dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)

    rows.append(("add.py host code alone (broadcast + promote + allocate)", lambda: add_host_code(x, y),
                 "the floor of tessera add without its launch"))
    usual = _usual_path(add, (x, y))
    if usual is not None:
        rows.append(("tessera add(x, y), host code run (no host replay)", usual,
                     "the usual path after the call's decision"))
    launch = _capture_tessera_launch(add, (x, y))
    if launch is not None:
        launcher, tessera_grid, arguments, direct, values, with_pointers = launch
        rows.append(("tessera launcher only (binary key + launch)", lambda: launcher.launch(tessera_grid, arguments),
                     "no host code"))
        for _ in range(warmup):
            launcher.launch(tessera_grid, arguments)
        if direct is not None:
            rows.append(("tessera direct launch only", lambda: direct(values), "what a memo hit launches with"))
        if with_pointers is not None:
            rows.append(("tessera direct launch only, data pointers given", with_pointers,
                         "what a checked hit launches with (fast_checks.py)"))
    results = []
    samples = interleaved_samples([function for _, function, _ in rows], calls, repeats, synchronize)
    for (name, _, note), taken in zip(rows, samples):
        quartiles = statistics.quantiles(taken, n=4)
        results.append({"name": name, "us_per_call": statistics.median(taken), "note": note,
                        "us_p25": round(quartiles[0], 3), "us_p75": round(quartiles[2], 3)})
    by_name = {r["name"]: r["us_per_call"] for r in results}
    same_shape = by_name["triton wrapper (allocate + launch)"]
    for row in results:
        row["vs_triton_wrapper"] = round(row["us_per_call"] / same_shape, 3)
    comparisons = {
        "add_same_shape": round(by_name["tessera add_same_shape(x, y)"] / same_shape, 3),
        "add": round(by_name["tessera add(x, y)"]
                     / by_name["triton wrapper (broadcast + promote + allocate + launch)"], 3),
        "add_same_shape, a new width every call": round(
            by_name["tessera add_same_shape, a new width every call"]
            / by_name["triton wrapper (allocate + launch), a new width every call"], 3),
    }
    for row in results:
        row["us_per_call"] = round(row["us_per_call"], 3)
    info: dict[str, Any] = {"tessera_vs_same_host_code": comparisons, "cache_info": list(add.cache_info()),
                            "tessera_add_vs_torch_eager": round(by_name["tessera add(x, y)"]
                                                               / by_name["torch eager (x + y)"], 3)}
    if launch is not None:
        info["launcher"] = {"enabled": launch[0].enabled, "fast_launches": launch[0].fast_launches,
                            "slow_launches": launch[0].slow_launches, "direct": launch[3] is not None}
    return {"rows": results, **info}


def _profile(device: str, calls: int) -> str:
    """cProfile's top functions by own time over `calls` cache-hit calls of examples/add.py."""
    import torch
    from _profiling import top_functions
    from examples.add import add
    x, y = torch.randn(1, 16, device=device), torch.randn(1, 16, device=device)
    for _ in range(5):
        add(x, y)
    return top_functions(lambda: add(x, y), calls, 25)


def _device_tag(device_name: str) -> str:
    """'h100' for 'NVIDIA H100 80GB HBM3', 'h200' for 'NVIDIA H200': result files name their GPU."""
    for word in device_name.lower().split():
        if word[:1] in "abhlv" and word[1:].isdigit():
            return word
    return "gpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="calls per sample (default 2000; smoke 5)")
    parser.add_argument("--repeats", type=int, default=None, help="samples (default 15; smoke 2)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls per row (default 50; smoke 1)")
    parser.add_argument("--out", default=os.path.join(_HERE, "results"), help="directory of the JSON result")
    parser.add_argument("--name", default=None, help="JSON file name without .json")
    parser.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, a few calls")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile's top functions over `--calls` calls of tessera add(x, y)")
    args = parser.parse_args(argv)
    _setup(args.smoke)
    import torch
    if not args.smoke and not torch.cuda.is_available():
        print("dispatch.py measures CUDA launches; no GPU here (use --smoke to check the script on CPU)")
        return 2
    device = "cpu" if args.smoke else "cuda"
    calls = args.calls or (5 if args.smoke else 2000)
    repeats = args.repeats or (2 if args.smoke else 15)
    warmup = args.warmup or (1 if args.smoke else 50)
    result = measure(device, calls, repeats, warmup)
    import triton
    result.update(
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu (triton interpreter)",
        python=platform.python_version(), torch=torch.__version__, triton=triton.__version__,
        calls=calls, repeats=repeats, smoke=args.smoke)
    width = max(len(row["name"]) for row in result["rows"])
    print(f"{'variant':<{width}} | us/call | p25-p75       | vs triton wrapper")
    print("-" * width + "-+---------+---------------+------------------")
    for row in result["rows"]:
        spread = f"{row['us_p25']:6.2f}-{row['us_p75']:6.2f}"
        print(f"{row['name']:<{width}} | {row['us_per_call']:7.2f} | {spread} | {row['vs_triton_wrapper']:.2f}x")
    for kernel, ratio in result["tessera_vs_same_host_code"].items():
        print(f"tessera {kernel} / triton wrapper with the same host code: {ratio:.2f}x")
    print(f"tessera add / torch eager x + y: {result['tessera_add_vs_torch_eager']:.2f}x (issue 17 goal: <= 2x)")
    if args.profile:
        print(_profile(device, calls))
    print(f"device: {result['device']}; tessera cache_info {result['cache_info']}"
          + (f"; launcher {result['launcher']}" if "launcher" in result else "; no fast launcher in this runtime"))
    write_json(result, args.out,
               args.name or ("dispatch_cpu_smoke" if args.smoke else "dispatch_" + _device_tag(result["device"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
