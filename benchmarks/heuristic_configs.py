"""Print the Config an untuned GPU call would run, and its Triton code, for each kernel call of
some of Helion's examples, on a CPU-only machine (issue 17: the default Config of each kernel).

    PYTHONPATH=. python3 benchmarks/heuristic_configs.py .helion_examples --only jsd welford [--code] [--shared]

Each example runs as `benchmarks/helion_examples.py` runs it (imports renamed in memory, the
examples' own sizes, tensors on the CPU), but no kernel is launched: each Tessera kernel call is
planned in compiled mode under the heuristic Config the H100 would get (`heuristic_for`), its
Config printed (with `--code`, the generated Triton too; with `--shared`, each launch compiled
offline for sm_90 and its shared memory printed), and the call returns the plan's outputs
(allocated, never written) so host code after it goes on. `run_example` calls each kernel once
and checks nothing.
"""
from __future__ import annotations

import argparse
import ast
import os
import pathlib
import sys
import traceback
import types
from typing import Any

os.environ["TESSERA_MODE"] = "compiled"   # plan GPU code for CPU tensors (nothing is launched)
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.helion_examples import _patch_devices_to_cpu, rewrite_imports  # noqa: E402


def _report_call(kernel: Any, args: tuple, kwargs: dict, show_code: bool, shared: bool) -> Any:
    from tessera.runtime.tuning import heuristic_for
    bound = kernel.bind_arguments(args, kwargs)
    config = heuristic_for(bound)
    print(f"== {kernel.fn.__name__}: {config}", flush=True)
    plan = bound.plan(config)
    for launch in plan.launches:
        print(f"   launch {launch.function_name} grid={tuple(launch.grid)}")
        if shared:
            from tessera.backends.triton.shared_memory import compiled_shared_memory
            print(f"   shared memory (sm_90, compiled offline): {compiled_shared_memory(launch.source_path, launch.function_name, launch.arguments, num_warps=launch.num_warps, num_stages=launch.num_stages)}")
    if show_code:
        print(bound.to_triton_code(config))
    return plan.result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("examples")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--code", action="store_true")
    parser.add_argument("--shared", action="store_true")
    args = parser.parse_args()
    _patch_devices_to_cpu()
    import tessera._testing
    import tessera.runtime.compiled
    tessera.runtime.compiled._check_device = lambda mode, device: None  # planned, never launched
    from tessera.runtime.kernel import Kernel

    def call(self: Any, *call_args: Any, **call_kwargs: Any) -> Any:
        return _report_call(self, call_args, call_kwargs, args.code, args.shared)
    Kernel.__call__ = call

    def run_example(kernel_fn: Any, baseline_fn: Any, example_args: tuple, *rest: Any, **kwargs: Any) -> dict:
        kernels = kernel_fn if isinstance(kernel_fn, dict) else {"kernel": kernel_fn}
        for fn in kernels.values():
            try:
                fn(*example_args)
            except Exception:  # noqa: BLE001 - a report, not a check
                traceback.print_exc(limit=-3)
        return {}
    tessera._testing.run_example = run_example
    folder = pathlib.Path(args.examples)
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py" or (args.only and path.stem not in args.only):
            continue
        print(f"#### {path.stem}", flush=True)
        module = types.ModuleType("__main__")
        module.__file__ = str(path)
        sys.modules["__main__"] = module
        sys.argv = [str(path)]
        try:
            exec(compile(ast.parse(rewrite_imports(path.read_text()), filename=str(path)), str(path), "exec"),
                 module.__dict__)
        except BaseException:  # noqa: BLE001 - the next example still runs
            traceback.print_exc(limit=-3)


if __name__ == "__main__":
    main()
