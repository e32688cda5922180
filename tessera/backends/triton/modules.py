"""Generated Triton source on disk: writing and importing it, and errors that point into it.

Triton reads a kernel's source from its file, so each generated kernel is written under the cache
directory (named by a digest of its text) and imported as a module. A Triton failure on that code
becomes a `BackendCompileError` (an `OutOfResourcesError` when the Config is too big for the GPU)
located at the kernel line that produced the failing line.
"""
from __future__ import annotations

import contextlib
import hashlib
import linecache
import os
import sys
import tempfile
import threading
import traceback
import types
from typing import Any

import torch

from tessera import exc, settings
from tessera.backends.triton import interpreter_patching


_triton_lock = threading.Lock()
_triton_interpreted: bool | None = None  # the mode Triton was imported in, once it was (and checked)


def _ensure_triton(interpret: bool) -> None:
    """Import Triton in the process's mode: its interpreter is chosen once, at import time.

    Triton's own library (tl.sum, tl.cdiv, ...) is made of @triton.jit functions created when
    triton is imported, and the interpreter can only call interpreted ones; so a process runs
    either interpreted kernels (CPU tensors) or compiled ones (CUDA tensors), not both.

    Under a lock: threads making a process's first calls at once would otherwise import Triton
    concurrently, and a thread that sees the partly initialized package fails (and leaves
    later imports broken). After the first success the check is a global read.
    """
    global _triton_interpreted
    interpreted = _triton_interpreted
    if interpreted is None:
        with _triton_lock:
            if _triton_interpreted is None:
                if "triton" not in sys.modules:
                    if interpret:
                        os.environ["TRITON_INTERPRET"] = "1"
                    else:
                        os.environ.pop("TRITON_INTERPRET", None)  # a stale setting must not pick the interpreter
                import triton.language  # noqa: F401
                from triton.runtime.interpreter import InterpretedFunction
                import triton.language.standard as standard
                _triton_interpreted = isinstance(standard.cdiv, InterpretedFunction)
                if _triton_interpreted:
                    interpreter_patching.install()
            interpreted = _triton_interpreted
    if interpreted != interpret:
        wanted = "interpret" if interpret else "compiled"
        raise exc.TesseraError(
            f"mode {wanted!r} needs Triton imported {'with' if interpret else 'without'} its interpreter, "
            "but this process imported it the other way",
            hint="run interpret mode (CPU tensors) and compiled mode (CUDA tensors) in separate processes; "
                 "set TRITON_INTERPRET=1 before importing triton for interpret mode")


def triton_interpreted() -> bool:
    """Whether this process imported Triton with its interpreter (importing it if need be, in
    whatever mode TRITON_INTERPRET says)."""
    if _triton_interpreted is not None:
        return _triton_interpreted
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(standard.cdiv, InterpretedFunction)


_allocator_set = False


def ensure_descriptor_allocator() -> None:
    """Device-side TMA descriptors need scratch memory; Triton asks the host for it (in every
    process that launches them: the user's and the autotuner's bench worker)."""
    global _allocator_set
    if not _allocator_set:
        import triton

        def allocate(size: int, alignment: int, stream: Any) -> torch.Tensor:
            return torch.empty(size, dtype=torch.int8, device="cuda")
        triton.set_allocator(allocate)
        _allocator_set = True


def source_digest(source: str) -> str:
    """The digest a generated file is named by (16 hex digits of its text's sha256)."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def write_generated(name: str, source: str, interpret: bool) -> str:
    """Write generated source to a file under the cache directory (Triton reads sources from
    files); its path. Named by a digest of the text, so equal sources share one file, and a
    file whose text does not match its name's digest is known to be damaged."""
    module_name = f"{name}_{source_digest(source)}_{'interp' if interpret else 'gpu'}"
    path = os.path.join(settings.cache_dir(), "tessera_generated", f"{module_name}.py")
    ensure_source_file(path, source)
    return path


def ensure_source_file(path: str, source: str) -> None:
    """Make `path` hold exactly `source`: a missing, truncated or edited file (or a deleted
    cache directory) is rewritten. The file is read, never trusted by its name."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == source:
                return
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: written below
    write_atomically(path, source)


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` through a unique temporary file moved into place: a reader (another
    thread or process) sees the old file or the whole new one, never a part."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def verified_source(path: str) -> str:
    """The text of a generated file, checked against the digest in its name (what autotuning
    workers import: they know only the path). OSError when missing, ValueError when damaged."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    stem = os.path.splitext(os.path.basename(path))[0]
    if f"_{source_digest(text)}_" not in f"{stem}_":
        raise ValueError(f"generated source {path} does not match its digest (edited or damaged); "
                         "delete it, Tessera writes it again")
    return text


def import_generated(path: str, name: str, source: str, interpret: bool) -> Any:
    """Import a generated file's kernel function, Triton first (in the process's mode).

    The module is executed from `source` (the text the compiler produced), not from what the
    file holds: the file is rewritten first if it differs, and Python's line cache is primed
    with `source`, so Triton (which reads a kernel's source through `inspect`) and tracebacks
    see exactly the generated text even if the file is edited or deleted meanwhile.
    """
    _ensure_triton(interpret)
    if not interpret and "make_tensor_descriptor" in source:
        ensure_descriptor_allocator()
    try:
        ensure_source_file(path, source)
    except OSError:
        pass  # the cache directory went away or became read-only: the primed line cache serves
    if not interpret:
        return load_module_function(path, name, source)
    with interpreting_environment():
        return load_module_function(path, name, source)


_environment_lock = threading.Lock()
_environment_users = 0
_environment_before: str | None = None


@contextlib.contextmanager
def interpreting_environment() -> Any:
    """TRITON_INTERPRET=1 while interpreted code is created or run: `@triton.jit` reads it when it
    decorates, and Triton's launch path imports modules that check it. A caller that dropped the
    variable after Triton was imported (Helion's print tests run with and without it) would
    otherwise get a GPU function in an interpreting process ("0 active drivers"). Counted, so
    threads inside at once restore the caller's value only when the last one leaves."""
    global _environment_users, _environment_before
    with _environment_lock:
        if _environment_users == 0:
            _environment_before = os.environ.get("TRITON_INTERPRET")
            os.environ["TRITON_INTERPRET"] = "1"
        _environment_users += 1
    try:
        yield
    finally:
        with _environment_lock:
            _environment_users -= 1
            if _environment_users == 0:
                if _environment_before is None:
                    os.environ.pop("TRITON_INTERPRET", None)
                else:
                    os.environ["TRITON_INTERPRET"] = _environment_before


def load_module_function(path: str, name: str, source: str, module_prefix: str = "") -> Any:
    """Execute `source` as the module at `path` and return its function `name`."""
    # (size, mtime None, lines, path): an entry linecache.checkcache keeps, as it does for
    # sources that have no file; inspect.getsource then reads these lines, not the disk
    linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)
    module = types.ModuleType(module_prefix + os.path.splitext(os.path.basename(path))[0])
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - our own generated code
    return getattr(module, name)


def compile_error(error: BaseException, path: str, source: str, function_name: str,
                  locations: dict[int, Any], fallback: Any) -> exc.TesseraError:
    """A Triton failure on generated code, pointed at the kernel line that produced it."""
    line = generated_line(error, path, source, function_name)
    location = error_location(error, path, source, function_name, locations, fallback, line)
    summary = str(error).strip().splitlines()
    text = summary[-1] if summary else type(error).__name__
    where = f"{path}:{line}" if line is not None else path
    if type(error).__name__ == "OutOfResources":
        # the Config's tiles, not a Tessera bug: say which keys shrink them
        return exc.OutOfResourcesError(
            text[:200], location=location,
            hint="pass a Config with smaller block_sizes or a lower num_stages (num_stages=1 keeps one copy of "
                 "each tile), or let the tuner search (autotune_effort='quick'); a dimension read whole with "
                 f"`:` is held in full whatever the Config: tile it with hl.tile instead. Generated source: {where}")
    if type(error).__name__ == "PTXASError" and "tl.inline_asm_elementwise(" in source:
        # the user's own PTX is the likeliest cause: ptxas names the instruction it refused
        return exc.InlineAsmError(
            f"ptxas refused the kernel's PTX ({_ptxas_complaint(str(error))})", location=location,
            hint="check the hl.inline_asm_elementwise assembly against this GPU's architecture (instructions of newer "
                 f"GPUs are refused) and its constraints; the generated source is {where}")
    return exc.BackendCompileError(
        f"{type(error).__name__}: {text[:300]}", location=location,
        hint=f"this is a Tessera bug; the generated source is {where}. Run the kernel with mode='eager' "
             "meanwhile, and please report it with that file")


def _ptxas_complaint(text: str) -> str:
    """ptxas's own error lines from a PTXASError's text (its repro command and log come first)."""
    complaints = [line.strip() for line in text.splitlines() if "ptxas" in line and "error" in line.lower()
                  and "Repro command" not in line]
    return "; ".join(complaints[:3])[:400] or text.strip().splitlines()[-1][:300]


def error_location(error: BaseException, path: str, source: str, function_name: str, locations: dict[int, Any],
                   fallback: Any, line: int | None = None) -> Any:
    """The user's line behind the generated line where `error` was raised (`fallback` if unknown)."""
    line = line if line is not None else generated_line(error, path, source, function_name)
    if line is not None:
        earlier = [number for number in locations if number <= line]
        if earlier:
            return locations[max(earlier)]
    return fallback


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
