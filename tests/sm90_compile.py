"""Compile a kernel's compiled-mode Triton code for an H100 (sm_90) on a machine without a GPU, and
read what the GPU's limits are checked against: Triton's `metadata.shared` (bytes of shared memory
per program). Triton ships ptxas, so `triton.compile(..., target=GPUTarget("cuda", 90, 32))` works
on the CPU; it runs in a fresh process, since this one may have Triton's interpreter switched on.

    shared = sm90_shared_memory(kernel, (x, w))   # one number per launch of the call
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import torch

from tessera.backends.base import LoweringOptions
from tessera.backends.triton.backend import TritonBackend
from tessera.runtime.tuning import heuristic_for

H100_SHARED_MEMORY = 232448

_CHILD = r'''
import importlib.util, json, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import MockTensor, mangle_type
results = []
for number, (path, name, arguments, num_warps, num_stages) in enumerate(json.load(open(sys.argv[1]))):
    spec = importlib.util.spec_from_file_location(f"sm90_{number}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, name)
    values = [MockTensor(getattr(torch, a[1])) if a[0] == "tensor" else a[1] for a in arguments]
    signature = {parameter: mangle_type(value) for parameter, value in zip(function.arg_names, values)}
    compiled = triton.compile(ASTSource(function, signature), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    results.append(compiled.metadata.shared)
print(json.dumps(results))
'''


def sm90_shared_memory(kernel: Any, args: tuple, config: Any = None) -> list[int]:
    """Bytes of shared memory each launch of `kernel(*args)` needs on an H100, under `config`
    (default: the kernel's own, the heuristic one), as Triton computes it when compiling."""
    bound = kernel.bind(*args)
    plan = bound.plan(config or heuristic_for(bound))
    irs = bound.to_ir(plan.config)
    irs = irs if isinstance(irs, tuple) else (irs,)
    backend = TritonBackend()
    with tempfile.TemporaryDirectory() as folder:
        launches = []
        for number, (ir, launch) in enumerate(zip(irs, plan.launches)):
            lowered = backend.lower(ir, plan.config, LoweringOptions(interpret=False))
            path = os.path.join(folder, f"kernel_{number}.py")
            with open(path, "w") as handle:
                handle.write(lowered.source)
            arguments = [("tensor", str(a.dtype).removeprefix("torch.")) if isinstance(a, torch.Tensor) else ("value", a)
                         for a in launch.arguments]
            launches.append((path, lowered.name, arguments, lowered.launch_options["num_warps"],
                             lowered.launch_options["num_stages"]))
        request = os.path.join(folder, "launches.json")
        with open(request, "w") as handle:
            json.dump(launches, handle)
        environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        done = subprocess.run([sys.executable, "-c", _CHILD, request], capture_output=True, text=True,
                              env=environment, timeout=600)
        if done.returncode:
            raise AssertionError(f"compiling for sm_90 failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
