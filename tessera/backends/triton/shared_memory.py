"""Shared memory a generated kernel really uses, from Triton's own compiler, without a GPU.

The heuristics estimate shared memory from the Config (heuristics.py: loads of pipelined loops
times stages, dot operand tiles); this module asks the compiler instead: the kernel is compiled
for a CUDA target (sm_90 by default: the H100) and `metadata.shared` read off the result. It
runs in a fresh Python process, since a process that imported Triton with its interpreter
(every CPU run) can no longer compile for a GPU; it is the check the tests run the estimate
against, and `benchmarks/heuristic_configs.py --shared` prints it per launch.

>>> compiled_shared_memory(launch.source_path, launch.function_name, launch.arguments,  # doctest: +SKIP
...                        num_warps=4, num_stages=3)
98304
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Sequence

import torch

from tessera import exc

# Triton's signature names of the dtypes a generated kernel's pointers carry
_POINTER_TYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1", torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5",
}

_COMPILE = r"""
import json, sys, importlib.util, linecache
import triton
from triton.backends.compiler import GPUTarget
request = json.loads(sys.stdin.read())
path = request["path"]
source = open(path).read()
spec = importlib.util.spec_from_file_location("offline_kernel", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
function = getattr(module, request["function"])
signature, constexprs, attrs = {}, {}, {}
for position, (name, (kind, value, divisible)) in enumerate(zip(function.arg_names, request["arguments"])):
    if function.params[position].is_constexpr or (value == 1 and kind.startswith("i")):
        signature[name], constexprs[(position,)] = "constexpr", value  # a launch specializes ints of 1 too
    else:
        signature[name] = kind
        if divisible:
            attrs[(position,)] = [["tt.divisibility", 16]]
source = triton.compiler.ASTSource(fn=function, signature=signature, constexprs=constexprs, attrs=attrs)
compiled = triton.compile(source,
                          target=GPUTarget("cuda", request["capability"], 32),
                          options={"num_warps": request["num_warps"], "num_stages": request["num_stages"]})
print(json.dumps({"shared": compiled.metadata.shared, "ttgir": compiled.asm["ttgir"] if request.get("ttgir") else None}))
"""


def _argument_type(argument: Any) -> tuple[str, Any, bool]:
    """(Triton signature type, value when the parameter is a constexpr, whether a launch would
    specialize it as 16-divisible) of one launch argument. Tensors count as 16-byte aligned, as
    fresh allocations are: pipelined copies need the alignment, so the estimate must assume it."""
    dtype = getattr(argument, "dtype", None)
    if isinstance(argument, torch.Tensor) or dtype is not None:
        return "*" + _POINTER_TYPES.get(dtype, "i8"), None, bool(getattr(argument, "aligned", True))
    if isinstance(argument, bool):
        return "i1", argument, False
    if isinstance(argument, int):
        return ("i32" if -2**31 <= argument < 2**31 else "i64"), argument, argument % 16 == 0
    if isinstance(argument, float):
        return "fp32", argument, False
    return "i32", None, False


def compiled_shared_memory(source_path: str, function_name: str, arguments: Sequence[Any], *, num_warps: int,
                           num_stages: int, capability: int = 90, timeout: float = 300.0) -> int:
    """Bytes of shared memory the kernel `function_name` of `source_path` uses per program when
    compiled for CUDA compute capability `capability` (90: the H100) with these launch options;
    `arguments` are the launch's (tensors or their stand-ins, ints, floats) in parameter order."""
    return int(_compile_offline(source_path, function_name, arguments, num_warps=num_warps, num_stages=num_stages,
                                capability=capability, timeout=timeout, ttgir=False)["shared"])


def compiled_ttgir(source_path: str, function_name: str, arguments: Sequence[Any], *, num_warps: int,
                   num_stages: int, capability: int = 90, timeout: float = 300.0) -> str:
    """The TritonGPU IR of the same compilation (after software pipelining): which operations
    the GPU runs per loop iteration (products, copies, layout conversions)."""
    return str(_compile_offline(source_path, function_name, arguments, num_warps=num_warps, num_stages=num_stages,
                                capability=capability, timeout=timeout, ttgir=True)["ttgir"])


def _compile_offline(source_path: str, function_name: str, arguments: Sequence[Any], *, num_warps: int,
                     num_stages: int, capability: int, timeout: float, ttgir: bool) -> dict[str, Any]:
    request = {"path": source_path, "function": function_name, "num_warps": num_warps, "num_stages": num_stages,
               "capability": capability, "arguments": [_argument_type(a) for a in arguments], "ttgir": ttgir}
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps(request), capture_output=True,
                          text=True, timeout=timeout, env=environment)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise exc.BackendCompileError(f"compiling {function_name} for sm_{capability} failed: "
                                      f"{lines[-1] if lines else done.returncode}",
                                      hint=f"the generated source is {source_path}")
    return json.loads(done.stdout.strip().splitlines()[-1])


__all__ = ["compiled_shared_memory", "compiled_ttgir"]
