"""Tessera's own host-side cost per kernel call, with the Triton launch stubbed out (CPU only).

    PYTHONPATH=. python benchmarks/dispatch_overhead_cpu.py [--calls 2000] [--repeats 7] [--out DIR] [--profile]

Runs `examples.add` on a 1x16 float32 CPU tensor in interpret mode. After the first call has
compiled the variant, the variant's Triton function is replaced by a stub whose launch does
nothing, so what is timed is exactly the hit path's host work: argument checks, mode and config
choice, the host code (broadcast, allocation, `hl.tile`), the exact-facts memo and compiled
mode's direct launch function (generated as on a GPU, around a C launch call that does nothing). Rows below the total time each piece alone, so the biggest ones can be attacked
first (alone, a piece runs warmer than inside a call: the rows add up to less than the total). The baseline is a hand-written wrapper doing the same
unavoidable host work (broadcast, allocate, build the argument list) around a stubbed launch.

Per-call times are medians over `--repeats` runs of `--calls` back-to-back calls, of wall time, or
with `--clock thread` of the thread's CPU time (steadier on a machine other processes share: time
the thread waits for a core is not counted). Writes
`dispatch_overhead_cpu.json` under `--out` (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

# Interpret mode: Triton must be imported with its interpreter, before anything imports it.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TESSERA_MODE", "interpret")

import torch  # noqa: E402

from _results import write_json  # noqa: E402 - benchmarks/, the script's folder

_HERE = os.path.dirname(os.path.abspath(__file__))


_CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}
_clock = time.perf_counter  # set by --clock


def per_call_us(function: Callable[[], Any], calls: int, repeats: int) -> float:
    """Median over `repeats` of the mean time of `calls` back-to-back calls, in microseconds."""
    function()
    samples = []
    for _ in range(repeats):
        start = _clock()
        for _ in range(calls):
            function()
        samples.append((_clock() - start) / calls * 1e6)
    return statistics.median(samples)


class _StubLaunch:
    """Stands in for a `@triton.jit` function (`stub[grid](*args, **options)`) and for a backend's
    loaded kernel (`stub.launch(grid, arguments)`): launching does nothing."""

    launches = 0
    path = "<stub>"
    function_name = "stub"

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self._launch

    def _launch(self, *args: Any, **options: Any) -> None:
        _StubLaunch.launches += 1

    def launch(self, grid: Any, arguments: Any) -> None:
        _StubLaunch.launches += 1

    def direct_launch(self, grid: Any, arguments: Any, tensor_slots: Any, pointers: bool = False) -> Callable[[Any], bool]:
        """The compiled mode's direct launch (backends/triton/launcher.py), generated as on a GPU,
        around a C launch function that does nothing and a driver that reports device -1 (a CPU
        tensor's) with no hooks installed."""
        from tessera.backends.triton.launcher import LaunchDriver, TritonLauncher, direct_launch_function

        class _Chain:
            calls: list[Any] = []

        class _Hooks:
            launch_enter_hook = launch_exit_hook = _Chain()

        launcher = TritonLauncher(self, 4, 2, key_pointers=False,
                                  driver=LaunchDriver(lambda: -1, lambda device: 0, _Hooks(), _Chain))
        return direct_launch_function(launcher, (self._binary_call, ()), -1, grid, arguments, tensor_slots,
                                      check_devices=not pointers)

    pre_run_hooks: list[Any] = []

    def _binary_call(self, *arguments: Any) -> None:
        _StubLaunch.launches += 1


def _variant_lists(kernel: Any) -> list[list[Any]]:
    store = getattr(kernel, "store", None)  # newer runtime: a VariantStore
    table = store.variants if store is not None else kernel.variants
    return list(table.values())


def _stub_variants(kernel: Any) -> int:
    count = 0
    for variants in _variant_lists(kernel):
        for variant in variants:
            variant.loaded = _StubLaunch()
            count += 1
    return count


def _capture_launch(kernel: Any, args: tuple) -> tuple[Any, Any, Any] | None:
    """(runner, tile_range, body) of one launch of `kernel(*args)`, to time the launch alone.
    A call its runtime replays (host_replay.py) runs no launch of a runner: then the usual path
    after the call's decision is taken."""
    from tessera.runtime import compiled
    captured: list[tuple[Any, Any, Any]] = []
    original = compiled.CompiledRunner.launch

    def recording_launch(self: Any, tile_range: Any, body: Any, launch_index: int = 0) -> None:
        captured.append((self, tile_range, body))
        return original(self, tile_range, body, launch_index)

    compiled.CompiledRunner.launch = recording_launch  # type: ignore[method-assign]
    try:
        kernel(*args)
        decision = kernel.config_choices.calls.decide(args) if not captured else None
        if decision is not None:
            compiled.run_compiled(kernel, decision.mode, args, {}, decision.config, decision.device, None,
                                  decision.stamp)
    finally:
        compiled.CompiledRunner.launch = original  # type: ignore[method-assign]
    return captured[0] if captured else None


def _handwritten_wrapper(stub: _StubLaunch) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """What a hand-written Triton add wrapper does on the host, around a stubbed launch."""
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = torch.broadcast_tensors(x, y)
        out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
        m, n = out.shape
        stub[(1,)](out, x, y, m, n, out.stride(0), x.stride(0), y.stride(0), num_warps=4, num_stages=2)
        return out
    return add


def measure(calls: int, repeats: int) -> dict[str, Any]:
    """Time the whole hit path and each of its pieces; return rows of (name, microseconds)."""
    sys.path.insert(0, os.path.dirname(_HERE))
    from examples.add import add
    from tessera.runtime import call_keys, tuning
    from tessera.runtime.call_keys import common_device

    x, y = torch.randn(1, 16), torch.randn(1, 16)
    expected = x + y
    assert torch.equal(add(x, y), expected), "add is wrong before stubbing"  # compiles the variant
    stubbed = _stub_variants(add)
    rows: list[dict[str, Any]] = []

    def row(name: str, function: Callable[[], Any], note: str = "") -> float:
        value = per_call_us(function, calls, repeats)
        rows.append({"name": name, "us": round(value, 3), "note": note})
        return value

    total = row("tessera add(x, y), launch stubbed", lambda: add(x, y), f"{stubbed} variant(s) stubbed")
    baseline = row("hand-written wrapper, launch stubbed", lambda: _handwritten_wrapper(_StubLaunch())(x, y),
                   "broadcast + empty + argument list")
    shapes = [(torch.randn(1, n), torch.randn(1, n)) for n in range(2, 2 + calls)]
    turn = iter(range(10 ** 9))
    row("tessera add, a new shape on every call", lambda: add(*shapes[next(turn) % len(shapes)]),
        "the exact-facts memo misses, then stands aside")
    row("Kernel._check_arguments (signature.bind)", lambda: add._check_arguments((x, y), {}))
    row("common_device", lambda: common_device("add", (x, y), {}))
    row("Kernel.mode_for", lambda: add.mode_for(x.device))
    config = tuning.config_for_call(add, "interpret", (x, y), {})
    row("tuning.config_for_call (exact facts, lookup)", lambda: tuning.config_for_call(add, "interpret", (x, y), {}))
    launch = _capture_launch(add, (x, y))
    if launch is not None:
        runner, tile_range, body = launch
        row("hl.tile(out.size())", _tile_call(runner, config, x))
        row("CompiledRunner.launch (memo hit: facts, lookup, direct launch)", lambda: runner.launch(tile_range, body))
        values = [cell.cell_contents for cell in (body.__closure__ or ())]
        static = add.settings.static_shapes
        if hasattr(runner, "memo"):
            from tessera.runtime.exact_facts import launch_facts
            row("  exact_facts.launch_facts", lambda: launch_facts(id(body.__code__), values, tile_range))
        row("  keyed path: call_keys.launch_inputs", lambda: call_keys.launch_inputs(values, tile_range, static),
            "a memo miss")
        _, _, arguments = call_keys.launch_inputs(values, tile_range, static)
        variant = _variant_lists(add)[0][0]
        row("  keyed path: variant guard + grid", lambda: (variant.guard(*arguments), variant.grid(*arguments)))
        row("  launcher binary key (ints only)", _launcher_key(arguments, key_pointers=False),
            f"{len(arguments)} arguments; a remembered launch skips it")
    return {"rows": rows, "total_us": total, "handwritten_us": baseline,
            "tessera_over_handwritten": round(total / baseline, 2), "launches_stubbed": _StubLaunch.launches}


def _tile_call(runner: Any, config: Any, x: torch.Tensor) -> Callable[[], Any]:
    """`hl.tile(x.size())` as the add kernel's host code calls it (inside a running call)."""
    import tessera.language as hl
    from tessera.ir import interpreter
    from tessera.runtime import compiled

    host = compiled._HostInterpreter(runner.slots, config, x.device, runner)

    def call() -> Any:
        interpreter.push(host)
        try:
            return hl.tile(x.size())
        finally:
            interpreter.pop()
    return call


def _launcher_key(arguments: list[Any], key_pointers: bool) -> Callable[[], Any]:
    """The binary key function a TritonLauncher would build for the add kernel's arguments."""
    from tessera.backends.triton import launcher

    class _Param:  # what binary_key_source reads from a triton KernelParam
        is_constexpr = is_const = do_not_specialize = do_not_specialize_on_alignment = False
        annotation_type = ""

    kinds = [launcher.argument_kind(value) for value in arguments]
    source = launcher.binary_key_source([_Param()] * len(arguments), kinds, key_pointers)
    assert source is not None
    key = launcher._compile_key_function(source)
    return lambda: key(0, *arguments)


def profile(calls: int) -> str:
    """cProfile's top functions by own time over `calls` stubbed calls."""
    from examples.add import add
    x, y = torch.randn(1, 16), torch.randn(1, 16)
    add(x, y)
    _stub_variants(add)
    from _profiling import top_functions
    return top_functions(lambda: add(x, y), calls, 15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="back-to-back calls per sample")
    parser.add_argument("--repeats", type=int, default=7, help="samples; the median is reported")
    parser.add_argument("--out", default=os.path.join(_HERE, "results"), help="directory of the JSON result")
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions")
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="wall",
                        help="wall time, or the thread's CPU time (steadier on a shared machine)")
    args = parser.parse_args(argv)
    global _clock
    _clock = _CLOCKS[args.clock]
    result = measure(args.calls, args.repeats)
    result.update(python=platform.python_version(), torch=torch.__version__, calls=args.calls, repeats=args.repeats,
                  clock=args.clock)
    width = max(len(r["name"]) for r in result["rows"])
    print(f"{'host work per call':<{width}} | us")
    print("-" * width + "-+--------")
    for r in result["rows"]:
        note = f"   ({r['note']})" if r["note"] else ""
        print(f"{r['name']:<{width}} | {r['us']:8.2f}{note}")
    print(f"\ntessera / hand-written host time: {result['tessera_over_handwritten']}x")
    if args.profile:
        print(profile(args.calls))
    write_json(result, args.out, "dispatch_overhead_cpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
