"""What the autotuner's worker processes need of Triton: its mode, compiling, launching, warming up.

The autotuner's workers (tessera/autotune/compile_pool.py, bench_worker.py) are generic; they
reach this module through the backend (`TritonTuning` in tuning.py):

- `import_triton(interpret)` runs first in a fresh worker: Triton's interpreter is chosen when
  triton is imported, so the worker must pick it (like its parent) before anything imports it.
  Hence no module-level `import triton` here: each function imports what it uses.
- `compile_launches` compiles a candidate without launching it: `JITFunction.warmup(*args,
  grid=..., num_warps=..., num_stages=...)` stores the binary in Triton's on-disk cache, where the
  bench worker finds it. Tensors are `TensorStandIn`s (dtype, 16-byte alignment: what Triton
  specializes on). In interpret mode there is nothing to compile: `import_launches` imports the
  generated modules, which catches what can be caught early.
- `candidate_runner` loads a candidate's kernels and returns one call that launches them all,
  what the bench worker times.
- A process's first compile costs seconds more than the next ones (Triton hashes its own 400 MB
  library for its cache key, imports its code generator, loads its backend), and its first
  launch pays for the launcher and loading a module on the GPU: `warm_driver` (during worker
  setup), then `warm_up_compiler` / `launch_warm_up_kernel` (on the worker's warm-up thread)
  pay for those with a tiny kernel (`WARM_UP_SOURCE`) before the first candidate arrives.

>>> import_triton(interpret=True)                                         # doctest: +SKIP
>>> compile_launches([CompileLaunch(path, "add_kernel", stand_ins, 4, 2)])  # doctest: +SKIP
0.8
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from typing import Any, Callable, Sequence

import torch

from tessera import settings
from tessera.backends.candidates import CompileLaunch, RunLaunch, TensorStandIn
from tessera.backends.triton.modules import (ensure_descriptor_allocator, load_module_function, triton_interpreted,
                                             verified_source, write_atomically)

WARM_UP_NAME = "tessera_warm_up"
WARM_UP_SOURCE = '''# Written by Tessera: each autotuning worker compiles it once when it starts (worker_support.py).
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def tessera_warm_up(x, out, n):
    offsets = tl.program_id(0) * 128 + tl.arange(0, 128)
    mask = offsets < n
    values = tl.load(x + offsets, mask=mask, other=0).to(tl.float32)
    values = tl.exp(values - tl.max(values, 0))
    tl.store(out + offsets, values / tl.sum(values, 0), mask=mask)
'''
"""Like a generated kernel: the same imports, masked loads and stores, a row reduction."""


def import_triton(interpret: bool) -> None:
    """Import Triton in this (fresh) process with or without its interpreter, like the parent.

    A process that imported triton already (a worker forked from its parent) keeps its mode.
    """
    if "triton" not in sys.modules:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
    import triton  # noqa: F401  (here, not at the top: the line above must run first)


_functions: dict[tuple[str, str], Any] = {}


def load_function(source_path: str, function_name: str) -> Any:
    """Import a generated module once per process and return its kernel function."""
    key = (source_path, function_name)
    if key not in _functions:
        # checked against its name's digest: a damaged file fails this candidate, named, not
        # with a SyntaxError from its middle (or, edited, silently computing something else)
        source = verified_source(source_path)
        if "make_tensor_descriptor" in source and not triton_interpreted():
            # without it every tensor_descriptor candidate failed on the H100 ("no allocator was
            # set"): the tuner could never pick TMA loads for a matmul or attention
            ensure_descriptor_allocator()
        _functions[key] = load_module_function(source_path, function_name, source, "tessera_candidate_")
    return _functions[key]


def compile_launches(launches: Sequence[CompileLaunch]) -> float:
    """Compile each launch without running it (into Triton's cache); seconds it took."""
    from triton.runtime.jit import MockTensor  # after import_triton, like every triton import here

    class _StandIn(MockTensor):
        def __init__(self, dtype: torch.dtype, aligned: bool) -> None:
            super().__init__(dtype)
            self._address = 0 if aligned else 8

        def data_ptr(self) -> int:  # type: ignore[override]
            return self._address

    start = time.perf_counter()
    for launch in launches:
        function = load_function(launch.source_path, launch.function_name)
        arguments = [_StandIn(a.dtype, a.aligned) if isinstance(a, TensorStandIn) else a for a in launch.arguments]
        function.warmup(*arguments, grid=(1,), num_warps=launch.num_warps, num_stages=launch.num_stages)
    return time.perf_counter() - start


def import_launches(launches: Sequence[CompileLaunch]) -> float:
    """Import each launch's generated module (interpret mode: nothing to compile); seconds it took."""
    start = time.perf_counter()
    for launch in launches:
        load_function(launch.source_path, launch.function_name)
    return time.perf_counter() - start


def candidate_runner(launches: Sequence[RunLaunch]) -> Callable[[], None]:
    """One call that runs every launch of a candidate in order (an empty grid launches nothing)."""
    functions = [load_function(launch.source_path, launch.function_name) for launch in launches]

    def run() -> None:
        for function, launch in zip(functions, launches):
            if math.prod(launch.grid) > 0:
                function[launch.grid](*launch.arguments, num_warps=launch.num_warps, num_stages=launch.num_stages)
    return run


def warm_driver() -> None:
    """Load Triton's CUDA driver utilities and read the GPU's target (what a first launch or
    compile would do), so a worker's first task does not pay for it. Best effort: a failure
    here shows up, with its real cause, in the task that needs the driver."""
    try:
        from triton.runtime.driver import driver
        driver.active.get_current_target()
    except Exception:  # noqa: BLE001
        pass


def warm_up_compiler() -> str:
    """Compile the warm-up kernel the way a candidate compiles; says how long its parts took.

    It may be in Triton's cache already (then nothing is compiled): what is warmed is mostly
    per process (Triton's cache key, which hashes its library; its code generator's imports).
    """
    begun = time.perf_counter()
    try:
        from triton.runtime.cache import triton_key  # Triton-internal: only timed here, if present
        triton_key()
    except Exception:  # noqa: BLE001 - the compile below computes it anyway
        pass
    keyed = time.perf_counter()
    stand_ins = (TensorStandIn(torch.bfloat16, True), TensorStandIn(torch.float32, True), 128)
    compile_launches([CompileLaunch(warm_up_source_path(), WARM_UP_NAME, stand_ins, 4, 2)])
    return f"Triton's cache key {keyed - begun:.2f} s, then compile {time.perf_counter() - keyed:.2f} s"


def launch_warm_up_kernel(device: torch.device) -> str:
    """Compile and run the warm-up kernel once on `device`; says how long it took."""
    begun = time.perf_counter()
    with torch.cuda.device(device):  # the current device is per thread
        function = load_function(warm_up_source_path(), WARM_UP_NAME)
        x = torch.zeros(128, dtype=torch.bfloat16, device=device)
        out = torch.empty(128, dtype=torch.float32, device=device)
        function[(1,)](x, out, 128, num_warps=4, num_stages=2)
        torch.cuda.synchronize(device)
    return f"first launch {time.perf_counter() - begun:.2f} s"


def warm_up_source_path() -> str:
    """The warm-up kernel's file, next to the generated kernels (Triton reads sources from files)."""
    digest = hashlib.sha256(WARM_UP_SOURCE.encode()).hexdigest()[:16]
    path = os.path.join(settings.cache_dir(), "tessera_generated", f"{WARM_UP_NAME}_{digest}_gpu.py")
    try:
        if verified_source(path) == WARM_UP_SOURCE:
            return path
    except (OSError, ValueError):
        pass
    write_atomically(path, WARM_UP_SOURCE)  # every worker may write it at once
    return path


__all__ = ["WARM_UP_NAME", "WARM_UP_SOURCE", "candidate_runner", "compile_launches", "import_launches",
           "import_triton", "launch_warm_up_kernel", "load_function", "warm_driver", "warm_up_compiler",
           "warm_up_source_path"]
