"""Generated Triton source on disk: writing and importing it, and errors that point into it.

Triton reads a kernel's source from its file, so each generated kernel is written under the cache
directory (named by a digest of its text) and imported as a module. A Triton failure on that code
becomes a `BackendCompileError` located at the kernel line that produced the failing line.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import traceback
from typing import Any

import torch

from tessera import exc, settings


def _ensure_triton(interpret: bool) -> None:
    """Import Triton in the process's mode: its interpreter is chosen once, at import time.

    Triton's own library (tl.sum, tl.cdiv, ...) is made of @triton.jit functions created when
    triton is imported, and the interpreter can only call interpreted ones; so a process runs
    either interpreted kernels (CPU tensors) or compiled ones (CUDA tensors), not both.
    """
    if "triton" not in sys.modules:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)  # a stale setting must not pick the interpreter
        import triton.language  # noqa: F401
    from triton.runtime.interpreter import InterpretedFunction
    import triton.language.standard as standard
    interpreted = isinstance(standard.cdiv, InterpretedFunction)
    if interpreted != interpret:
        wanted = "interpret" if interpret else "compiled"
        raise exc.TesseraError(
            f"mode {wanted!r} needs Triton imported {'with' if interpret else 'without'} its interpreter, "
            "but this process imported it the other way",
            hint="run interpret mode (CPU tensors) and compiled mode (CUDA tensors) in separate processes; "
                 "set TRITON_INTERPRET=1 before importing triton for interpret mode")


_allocator_set = False


def _ensure_descriptor_allocator() -> None:
    """Device-side TMA descriptors need scratch memory; Triton asks the host for it."""
    global _allocator_set
    if not _allocator_set:
        import triton

        def allocate(size: int, alignment: int, stream: Any) -> torch.Tensor:
            return torch.empty(size, dtype=torch.int8, device="cuda")
        triton.set_allocator(allocate)
        _allocator_set = True


def write_generated(name: str, source: str, interpret: bool) -> str:
    """Write generated source to a file under the cache directory (Triton reads sources from
    files); its path. Named by a digest of the text, so equal sources share one file."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = os.path.join(settings.get("cache_dir"), "tessera_generated")
    os.makedirs(directory, exist_ok=True)
    module_name = f"{name}_{digest}_{'interp' if interpret else 'gpu'}"
    path = os.path.join(directory, f"{module_name}.py")
    if not os.path.exists(path):
        # one temporary per thread: two threads compiling the same variant must not share one
        temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(temporary, "w") as handle:
            handle.write(source)
        os.replace(temporary, path)
    return path


def import_generated(path: str, name: str, source: str, interpret: bool) -> Any:
    """Import a generated file's kernel function, Triton first (in the process's mode)."""
    _ensure_triton(interpret)
    if not interpret and "make_tensor_descriptor" in source:
        _ensure_descriptor_allocator()
    module_name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def compile_error(error: BaseException, path: str, source: str, function_name: str,
                  locations: dict[int, Any], fallback: Any) -> exc.TesseraError:
    """A Triton failure on generated code, pointed at the kernel line that produced it."""
    line = generated_line(error, path, source, function_name)
    location = fallback
    if line is not None:
        earlier = [number for number in locations if number <= line]
        if earlier:
            location = locations[max(earlier)]
    summary = str(error).strip().splitlines()
    text = summary[-1] if summary else type(error).__name__
    where = f"{path}:{line}" if line is not None else path
    return exc.BackendCompileError(
        f"{type(error).__name__}: {text[:300]}", location=location,
        hint=f"this is a Tessera bug; the generated source is {where}. Run the kernel with mode='eager' "
             "meanwhile, and please report it with that file")


def generated_line(error: BaseException, path: str, source: str, function_name: str) -> int | None:
    """The line of the generated file where Triton failed, from tracebacks or the error's AST node."""
    seen: BaseException | None = error
    while seen is not None:
        node = getattr(seen, "node", None)
        if node is not None and hasattr(node, "lineno") and getattr(seen, "src", None):
            # Triton numbers the lines of the function's own source, which starts at its `def`
            header = f"def {function_name}("
            first = next(i for i, text in enumerate(source.splitlines()) if text.startswith(header))
            return first + node.lineno
        lines = [lineno for frame, lineno in traceback.walk_tb(seen.__traceback__)
                 if frame.f_code.co_filename == path]
        if lines:
            return lines[-1]
        seen = seen.__cause__ or seen.__context__
    return None
