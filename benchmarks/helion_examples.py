"""Run Helion's own examples on Tessera, changing only their import lines (issue 15).

    PYTHONPATH=. python3 benchmarks/helion_examples.py /path/to/helion/examples --mode interpret
    PYTHONPATH=. python3 benchmarks/helion_examples.py .helion_examples --mode compiled --out $OUT

Every top-level `*.py` of the folder runs in its own subprocess, with a timeout, as `__main__`
(so its `if __name__ == "__main__": main()` runs). Nothing is edited or saved: the script reads
each file and changes it in memory, line numbers kept, so tracebacks and `inspect` still point at
the original file. What is changed, mechanically and nothing else:

1. **Imports.** On lines that import `helion`, the module name `helion` becomes `tessera`
   (`from helion._testing import DEVICE` -> `from tessera._testing import DEVICE`,
   `import helion.language as hl` -> `import tessera.language as hl`); a bare `import helion` or
   `import helion.exc` also binds the name `helion` to `tessera`, since the code says `helion.kernel`.
2. **Device (CPU modes only: eager, interpret).** CUDA is hidden (`CUDA_VISIBLE_DEVICES=`), so
   `tessera._testing.DEVICE` is the CPU; torch's factory functions, `Tensor.to/.cuda` and
   `nn.Module.to/.cuda` map a `"cuda"` device to `"cpu"`, and `torch.cuda.synchronize` does nothing.
   An example's own `@triton.jit` baselines run in Triton's interpreter (`TRITON_INTERPRET=1`), and
   Triton's autotuner times their configs with a wall clock (it would ask for a GPU driver).
   Each example runs with one math thread (`OMP_NUM_THREADS=1`, ...): on a shared CPU, thread
   pools that spin at every barrier made small matmuls 1000x slower.
3. **Sizes (CPU modes only, `--sizes small`, the default there).** In the example's `main()`,
   its top-level `check*`/`test*`/`benchmark*` functions and its module-level lists of int literals (shape
   tables such as `shapes = [(m, k, n), ...]`), every int literal `n > 64` becomes `max(64, n // 16)`
   (`check(4096, 2560)` -> `check(256, 160)`), and so does a power `2 ** i` of a computed exponent
   when it runs: the examples pass their sizes as literals or such powers there,
   and one map for every literal keeps equal sizes equal. Kernel bodies are never touched.
   Compiled mode runs the examples' own sizes (`--sizes full`).

Each example prints one line: `PASS`, or `FAIL` with the first line of the first error (or
`TIMEOUT`); then `N passed, M failed`. `--out DIR` writes `helion_examples_<mode>.md` (and `.json`).
In compiled mode each `run_example(kernel, baseline, args)` call is also timed
(`triton.testing.do_bench`, median ms): each kernel, each baseline, and `torch.compile` of the
first baseline (until an example's torch.compile calls have spent TORCH_COMPILE_BUDGET seconds:
dynamo unrolls a baseline's Python loop, and jagged_layer_norm's reference, a loop over up to 16384
sequences, took 28 s to compile at 32 sequences and 50 s at 256 on the CPU, so its timed run hit
the 240 s timeout although its own kernels compile in seconds). Examples run `--jobs` at a time; the timing sections hold a lock file, so no
two examples time at once (another may still be compiling or checking on the GPU meanwhile).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MODES = ("eager", "interpret", "compiled")
TORCH_COMPILE_BUDGET = 60.0  # seconds an example's torch.compile baselines may take, compiling included
GRACE_SECONDS = 20.0  # how long an example started just before --budget ran out may still run
SMALL_LIMIT = 64
SMALL_DIVISOR = 16
THREAD_POOL_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

_FROM_HELION = re.compile(r"^(\s*)from\s+helion(\.[\w.]+)?(\s+import\s.*)$")
_IMPORT_HELION = re.compile(r"^(\s*)import\s+helion(\.[\w.]+)?(\s+as\s+\w+)?\s*(#.*)?$")


def rewrite_import_line(line: str) -> str:
    """One line of an example with `helion` imports renamed to `tessera` (other lines unchanged).

    >>> rewrite_import_line("import helion")
    'import tessera as helion'
    """
    match = _FROM_HELION.match(line)
    if match:
        indent, submodule, rest = match.groups()
        return f"{indent}from tessera{submodule or ''}{rest}"
    match = _IMPORT_HELION.match(line)
    if match:
        indent, submodule, alias = match.group(1), match.group(2) or "", match.group(3)
        if alias:
            return f"{indent}import tessera{submodule}{alias}"
        # `import helion.exc` binds `helion`: bind it to tessera, after importing the submodule
        return f"{indent}import tessera{submodule}; import tessera as helion" if submodule else \
            f"{indent}import tessera as helion"
    return line


def rewrite_imports(source: str) -> str:
    """The example's source with every import line rewritten; the line count is kept."""
    return "\n".join(rewrite_import_line(line) for line in source.split("\n"))


class _ShrinkSizes(ast.NodeTransformer):
    """Int literals above SMALL_LIMIT in the size-setting functions become `max(64, n // 16)`."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        value = node.value
        if isinstance(value, int) and not isinstance(value, bool) and value > SMALL_LIMIT:
            return ast.copy_location(ast.Constant(max(SMALL_LIMIT, value // SMALL_DIVISOR)), node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        """`2 ** i` with a computed exponent (`for i in range(11, 15): S = 2**i`) shrinks by the
        same map when it runs: `(lambda n: max(64, n // 16) if n > 64 else n)(2 ** i)`."""
        self.generic_visit(node)
        if not (isinstance(node.op, ast.Pow) and isinstance(node.left, ast.Constant) and node.left.value == 2
                and not isinstance(node.right, ast.Constant)):
            return node
        shrink = ast.parse(f"lambda n: max({SMALL_LIMIT}, n // {SMALL_DIVISOR}) if n > {SMALL_LIMIT} else n",
                           mode="eval").body
        return ast.copy_location(ast.Call(shrink, [node], []), node)


def _int_literals(node: ast.AST) -> bool:
    """A literal list/tuple/set of ints, nested or not (e.g. `shapes = [(1024, 512, 256), ...]`)."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_int_literals(element) for element in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def _sets_sizes(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple, ast.Set)):
        return _int_literals(node.value)
    return isinstance(node, ast.FunctionDef) and (node.name == "main"
                                                  or node.name.startswith(("check", "test", "benchmark")))


def shrink_sizes(tree: ast.Module) -> ast.Module:
    """Shrink the literal sizes of `main()`, the top-level `check*`/`test*`/`benchmark*` functions and the
    module-level lists of int literals (shape tables)."""
    tree.body = [_ShrinkSizes().visit(node) if _sets_sizes(node) else node for node in tree.body]
    return tree


# -- the child: runs one example ------------------------------------------------------------------

def _cpu_device(device: Any) -> Any:
    text = str(device) if device is not None else ""
    return "cpu" if text.startswith("cuda") else device


def _patch_devices_to_cpu() -> None:
    """Map "cuda" to "cpu" in torch's factories and moves (the example's code stays as written)."""
    import functools

    import torch

    def with_cpu_device(function: Any) -> Any:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            if "device" in kwargs:
                kwargs["device"] = _cpu_device(kwargs["device"])
            return function(*args, **kwargs)
        return call

    # not the *_like factories: they take their input's device already, and inside a tile loop torch
    # dispatches them by their module attribute, which must stay the function Tessera knows
    for name in ("randn", "rand", "randint", "randperm", "empty", "zeros", "ones", "full", "arange", "tensor",
                 "linspace", "eye", "empty_strided", "as_tensor", "normal"):
        setattr(torch, name, with_cpu_device(getattr(torch, name)))

    def move(original: Any) -> Any:
        @functools.wraps(original)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            args = tuple(_cpu_device(a) if isinstance(a, (str, torch.device)) else a for a in args)
            if "device" in kwargs:
                kwargs["device"] = _cpu_device(kwargs["device"])
            return original(self, *args, **kwargs)
        return call

    torch.Tensor.to = move(torch.Tensor.to)
    torch.nn.Module.to = move(torch.nn.Module.to)
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.cuda.synchronize = lambda *args, **kwargs: None
    _patch_triton_autotuner_to_cpu()


def _patch_triton_autotuner_to_cpu() -> None:
    """An example's own `@triton.autotune` baseline runs in Triton's interpreter on CPU (the parent
    sets TRITON_INTERPRET=1), but Triton's autotuner asks the GPU driver for its benchmarker even
    there: time each config with a wall clock instead."""
    import time as clock

    from triton.runtime.autotuner import Autotuner

    def wall_clock_bench(kernel_call: Any, quantiles: Any = None, **_: Any) -> Any:
        began = clock.perf_counter()
        kernel_call()
        milliseconds = (clock.perf_counter() - began) * 1e3
        return [milliseconds] * len(quantiles) if quantiles else milliseconds

    Autotuner.do_bench = property(lambda self: wall_clock_bench)


_timings: list[dict[str, Any]] = []


def _do_bench(function: Any) -> float:
    import triton.testing

    return float(triton.testing.do_bench(function, warmup=25, rep=100, return_mode="median"))


def _timed_run_example(original: Any, lock_path: str, do_bench: Any = _do_bench) -> Any:
    """`run_example` that checks as before, then times each implementation (compiled mode) with
    `do_bench` (a function's median ms)."""
    import fcntl

    import torch

    def bench(function: Any) -> float | str:
        try:
            return do_bench(function)
        except Exception as error:  # a baseline that fails to compile is a table entry, not a failure
            return f"error: {_first_line(error)}"

    compile_seconds = [0.0]  # spent in torch.compile baselines so far (compiling included)

    def run_example(kernel_fn: Any, baseline_fn: Any, args: tuple, *rest: Any, **kwargs: Any) -> Any:
        result = original(kernel_fn, baseline_fn, args, *rest, **kwargs)
        kernels = kernel_fn if isinstance(kernel_fn, dict) else {kwargs.get("kernel_name", "tessera"): kernel_fn}
        baselines = baseline_fn if isinstance(baseline_fn, dict) else {kwargs.get("baseline_name", "torch"): baseline_fn}
        reference = next(iter(baselines.values()))
        row: dict[str, Any] = {"kernels": {}, "baselines": {}}
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for name, fn in kernels.items():
                row["kernels"][name] = bench(lambda fn=fn: fn(*args))
            for name, fn in baselines.items():
                row["baselines"][name] = bench(lambda fn=fn: fn(*args))
            if compile_seconds[0] < TORCH_COMPILE_BUDGET:
                began = time.perf_counter()
                compiled_reference = torch.compile(reference)
                row["torch.compile"] = bench(lambda: compiled_reference(*args))
                compile_seconds[0] += time.perf_counter() - began
            else:
                row["torch.compile"] = f"skipped: the example's torch.compile calls took over {TORCH_COMPILE_BUDGET:.0f} s"
        _timings.append(row)
        return result
    return run_example


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:197] + "..."


def run_child(path: str, mode: str, sizes: str, result_path: str, lock_path: str, timed: bool = True) -> None:
    """Run one example in this process and write {"status", "error", "timings"} to `result_path`."""
    outcome: dict[str, Any] = {"status": "pass", "error": "", "timings": []}
    try:
        if mode != "compiled":
            _patch_devices_to_cpu()
        import tessera._testing
        if mode == "compiled" and timed:
            tessera._testing.run_example = _timed_run_example(tessera._testing.run_example, lock_path)
        source = rewrite_imports(pathlib.Path(path).read_text())
        tree = ast.parse(source, filename=path)
        if sizes == "small":
            tree = ast.fix_missing_locations(shrink_sizes(tree))
        import types
        module = types.ModuleType("__main__")
        module.__file__ = path
        sys.modules["__main__"] = module
        sys.path.insert(0, str(pathlib.Path(path).parent))
        sys.argv = [path]  # the example parses its own command line (aot_example's --kernel), as run alone
        exec(compile(tree, path, "exec"), module.__dict__)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            outcome = {"status": "fail", "error": f"SystemExit: {stop.code}"}
    except BaseException as error:  # every failure is a result line
        traceback.print_exc()
        outcome = {"status": "fail", "error": _first_line(error)}
    outcome["timings"] = _timings
    pathlib.Path(result_path).write_text(json.dumps(outcome))


# -- the parent: runs every example --------------------------------------------------------------

def _run_one(path: pathlib.Path, args: argparse.Namespace, scratch: pathlib.Path) -> dict[str, Any]:
    result_path = scratch / f"{path.stem}.json"
    env = dict(os.environ, TESSERA_MODE=args.mode)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pathlib.Path(__file__).resolve().parents[1]),
                                                    env.get("PYTHONPATH", "")) if p)
    if args.mode != "compiled":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"  # the examples' own @triton.jit baselines run in Triton's interpreter
        # one math thread per example: on a loaded CPU, torch's and numpy's thread pools spin at every
        # barrier, and a 64x64 matmul took 8 ms with two threads against 8 us with one
        env.update({name: "1" for name in THREAD_POOL_VARIABLES})
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", str(path), "--mode", args.mode,
               "--sizes", args.sizes, "--result", str(result_path), "--lock", str(scratch / "timing.lock")]
    command += ["--check-only"] if args.check_only else []
    began = time.perf_counter()
    log_path = scratch / f"{path.stem}.log"
    # with --budget, nothing starts after the budget and nothing runs past it by more than GRACE
    left = args.deadline - began if args.deadline is not None else None
    timeout = args.timeout if left is None else min(args.timeout, left + GRACE_SECONDS)
    if left is not None and left <= 0:
        return {"name": path.stem, "status": "skip", "error": "not started: --budget spent", "timings": [],
                "seconds": 0.0}
    try:
        with open(log_path, "w") as log:
            subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                           cwd=str(path.parent))
        outcome = json.loads(result_path.read_text()) if result_path.exists() else \
            {"status": "fail", "error": f"crashed: {_last_line(log_path)}", "timings": []}
    except subprocess.TimeoutExpired:
        outcome = {"status": "fail", "error": f"TIMEOUT after {timeout:.0f} s", "timings": []}
    outcome["name"] = path.stem
    outcome["seconds"] = round(time.perf_counter() - began, 1)
    return outcome


def _last_line(log_path: pathlib.Path) -> str:
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def _format_timing(row: dict[str, Any]) -> str:
    def show(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)
    parts = [f"{name} {show(ms)}" for name, ms in {**row["kernels"], **row["baselines"]}.items()]
    parts.append(f"torch.compile {show(row['torch.compile'])}")
    return "; ".join(parts)


def _markdown(outcomes: list[dict[str, Any]], mode: str, passed: int) -> str:
    skipped = sum(o["status"] == "skip" for o in outcomes)
    lines = [f"# Helion examples on Tessera, mode `{mode}`", "",
             f"{passed} passed, {len(outcomes) - passed - skipped} failed, {skipped} skipped", "",
             "| example | result | seconds | first error / timings (ms, median) |", "|---|---|---|---|"]
    for outcome in outcomes:
        detail = outcome.get("error") or "; ".join(_format_timing(row) for row in outcome.get("timings", []))
        detail = detail.replace("|", "\\|")
        lines.append(f"| {outcome['name']} | {outcome['status']} | {outcome['seconds']} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("examples", nargs="?", help="path of a Helion checkout's examples/ folder")
    parser.add_argument("--mode", choices=MODES, default="interpret")
    parser.add_argument("--sizes", choices=("small", "full"), default=None,
                        help="small: shrink main()'s literal sizes (default in CPU modes); full: as written")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per example")
    parser.add_argument("--jobs", type=int, default=1, help="examples run at once")
    parser.add_argument("--budget", type=float, help="seconds for the whole run: later examples are skipped")
    parser.add_argument("--only", nargs="*", help="run only these examples (file stems)")
    parser.add_argument("--out", help="write helion_examples_<mode>.md and .json here")
    parser.add_argument("--check-only", action="store_true",
                        help="compiled mode: check results only, skip timing Tessera, torch and torch.compile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.sizes = args.sizes or ("full" if args.mode == "compiled" else "small")
    args.deadline = time.perf_counter() + args.budget if args.budget else None
    if args.child:
        run_child(args.child, args.mode, args.sizes, args.result, args.lock, timed=not args.check_only)
        return
    if not args.examples:
        parser.error("give the path of an examples/ folder")
    folder = pathlib.Path(args.examples).resolve()
    paths = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py"
                   and (not args.only or p.stem in args.only))
    import tempfile
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="helion_examples_"))
    outcomes: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for outcome in pool.map(lambda p: _run_one(p, args, scratch), paths):
            line = outcome["status"].upper() + ("  " + outcome["error"] if outcome.get("error") else "")
            print(f"{outcome['name']:32s} {line}  ({outcome['seconds']} s)", flush=True)
            outcomes.append(outcome)
    passed = sum(o["status"] == "pass" for o in outcomes)
    skipped = sum(o["status"] == "skip" for o in outcomes)
    print(f"{passed} passed, {len(outcomes) - passed - skipped} failed" + (f", {skipped} skipped" if skipped else "")
          + f"  (logs in {scratch})")
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"helion_examples_{args.mode}.md").write_text(_markdown(outcomes, args.mode, passed))
        (out / f"helion_examples_{args.mode}.json").write_text(json.dumps(outcomes, indent=1))


if __name__ == "__main__":
    main()
