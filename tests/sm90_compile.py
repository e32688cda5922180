"""Compile a kernel's compiled-mode Triton code for an H100 (sm_90) on a machine without a GPU, and
read what the GPU's limits are checked against: Triton's `metadata.shared` (bytes of shared memory
per program). Triton ships ptxas, so `triton.compile(..., target=GPUTarget("cuda", 90, 32))` works
on the CPU (tessera/backends/triton/shared_memory.py, in a fresh process: this one may have
Triton's interpreter switched on).

    shared = sm90_shared_memory(kernel, (x, w))   # one number per launch of the call
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

from tessera.backends.base import LoweringOptions
from tessera.backends.triton.backend import TritonBackend
from tessera.backends.triton.shared_memory import compiled_shared_memory, compiled_ttgir
from tessera.runtime.tuning import heuristic_for

H100_SHARED_MEMORY = 232448

def sm90_shared_memory(kernel: Any, args: tuple, config: Any = None) -> list[int]:
    """Bytes of shared memory each launch of `kernel(*args)` needs on an H100, under `config`
    (default: the kernel's own, the heuristic one), as Triton computes it when compiling."""
    return _sm90_compile(kernel, args, config, compiled_shared_memory)


def sm90_ttgir(kernel: Any, args: tuple, config: Any = None) -> list[str]:
    """The TritonGPU IR (after pipelining) of each launch of `kernel(*args)` compiled for an H100."""
    return _sm90_compile(kernel, args, config, compiled_ttgir)


def _sm90_compile(kernel: Any, args: tuple, config: Any, compile_one: Any) -> list[Any]:
    bound = kernel.bind(*args)
    plan = bound.plan(config or heuristic_for(bound))
    irs = bound.to_ir(plan.config)
    irs = irs if isinstance(irs, tuple) else (irs,)
    backend = TritonBackend()
    options = LoweringOptions(interpret=False, fp8_fast_accum=kernel.settings.fp8_fast_accum)
    with tempfile.TemporaryDirectory() as folder:
        launches = []
        for number, (ir, launch) in enumerate(zip(irs, plan.launches)):
            lowered = backend.lower(ir, plan.config, options)
            path = os.path.join(folder, f"kernel_{number}.py")
            with open(path, "w") as handle:
                handle.write(lowered.source)
            launches.append((path, lowered.name, launch.arguments, lowered.launch_options["num_warps"],
                             lowered.launch_options["num_stages"]))
        # with the alignment and 16-divisibility a launch specializes on: without them Triton
        # pipelines no load (Helion's gdn_fwd_h: 66 KB instead of the 290 KB the H100 reported)
        return [compile_one(path, name, arguments, num_warps=warps, num_stages=stages)
                for path, name, arguments, warps, stages in launches]
