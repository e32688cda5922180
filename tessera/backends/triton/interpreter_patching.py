"""Triton's CPU interpreter, made to run kernels as the GPU does, at less cost.

Two changes, both for Tessera's launches only: no int32 overflow checks (`unsanitized()`, per
launch), and `triton.language` patched once per launch instead of once per call:

The interpreter runs `tl.sum`, `tl.max`, `tl.zeros_like`, `tl.cdiv` (Triton's library functions,
themselves `@triton.jit`) as device calls, and every device call re-patches the language modules
(`_patch_lang`: `inspect.getmembers` over `triton.language`, ~1.5 ms), although the launch
patched the same modules before its first program ran. A kernel calling `tl.sum` in a loop pays
that per iteration per program: `gather_gemv` spent a third of its interpreted time there.

`install()` (interpret mode only, once per process) skips a device call's patching when every
language module it sees was patched in the current launch; anything else runs as Triton wrote it.
Nothing changes what a kernel computes: the skipped calls would only have set the attributes the
launch already set.

A third change fills a gap: the interpreter's `tl.device_print(prefix)` with no values prints
nothing, where a GPU prints the prefix; `install()` makes it print the prefix once per program.

A fourth is a check the GPU cannot make: a store in which two unmasked lanes of one program write
different values to one element (a scatter whose index tensor repeats) raises `ConflictingStores`.
On the GPU which lane wins is undefined; the interpreter's numpy store lets the last lane win, so
the answer would be silently whatever order numpy used. Eager mode refuses the same store.

A fifth fixes a comparison's element type: the interpreter labels `a < b` with the operands'
type (fp32) instead of int1, which is harmless on a block but not on a scalar (a 0-d tensor
argument's value): broadcast against a block, the scalar bool became fp32 data, and `&`/`|`
with a block's bools raised a numpy TypeError (`torch.atan2(v, s)`, `v ** s`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Iterator

import numpy

_installed = False


class ConflictingStores(Exception):
    """Two unmasked lanes of one store wrote different values to one element (interpret mode)."""


def conflicting_stores(error: BaseException | None) -> bool:
    """Whether `error` is, or wraps (the interpreter re-raises as InterpreterError), ConflictingStores."""
    while error is not None:
        if isinstance(error, ConflictingStores):
            return True
        error = error.__cause__ or error.__context__
    return False


def _check_store_lanes(pointers: Any, values: Any, mask: Any) -> None:
    import numpy as np

    pointers = np.asarray(pointers)
    if pointers.size < 2:
        return
    shape = pointers.shape
    written = np.broadcast_to(np.asarray(mask, dtype=bool), shape).ravel()
    addresses = pointers.ravel()[written]
    if addresses.size < 2 or bool(np.all(addresses[1:] > addresses[:-1])):
        return  # the usual store: lanes in increasing address order, none repeated
    order = np.argsort(addresses, kind="stable")
    ordered = addresses[order]
    repeated = ordered[1:] == ordered[:-1]
    if not repeated.any():
        return
    stored = np.broadcast_to(np.asarray(values), shape).ravel()[written][order]
    if stored.dtype.itemsize in (1, 2, 4, 8):  # compare bits: NaN == NaN, -0.0 != 0.0
        stored = stored.view(f"u{stored.dtype.itemsize}")
    clashing = repeated & (stored[1:] != stored[:-1])
    if clashing.any():
        raise ConflictingStores(int(clashing.sum()))


@contextlib.contextmanager
def unsanitized() -> Iterator[None]:
    """Triton's interpreter without its int32 overflow checks, for one launch (under the lock).

    The interpreter redoes every int32 `+`, `-` and `*` in int64 and asserts the result fits:
    about half of an interpreted program's time (index arithmetic is mostly int32), for a check
    compiled code does not make (a GPU build checks only with debug=True). The user's own
    `@triton.jit` kernels keep the interpreter's default outside Tessera's launches.
    """
    from triton.runtime import interpreter
    builder = interpreter.interpreter_builder
    options = builder.options
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = options


class _Launch:
    """Which language modules (by id) the running launch has patched; None outside launches."""

    patched: set[int] | None = None


def _language_modules(fn: Any) -> set[int]:
    import triton.language as tl

    wanted = (tl, tl.core)
    return {id(value) for value in fn.__globals__.values() if any(value is module for module in wanted)}


class _NothingToRestore:
    def restore(self) -> None:
        pass


_COMPARISONS = frozenset({numpy.less, numpy.less_equal, numpy.greater, numpy.greater_equal, numpy.equal,
                          numpy.not_equal})


def _int1() -> Any:
    import triton.language as tl
    return tl.int1


def install() -> None:
    """Patch the interpreter's `_patch_lang` and launches (idempotent)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang
    launch = interpreter.GridExecutor.__call__

    @functools.wraps(patch_lang)
    def patch_lang_once(fn: Any) -> Any:
        modules = _language_modules(fn)
        if _Launch.patched is not None and modules and modules <= _Launch.patched:
            return _NothingToRestore()  # a device call inside a launch that patched these already
        scope = patch_lang(fn)
        if _Launch.patched is not None:
            _Launch.patched |= modules
        return scope

    @functools.wraps(launch)
    def launch_once_patched(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer, _Launch.patched = _Launch.patched, set()
        try:
            return launch(self, *args, **kwargs)
        finally:
            _Launch.patched = outer

    create_print = interpreter.InterpreterBuilder.create_print

    @functools.wraps(create_print)
    def print_prefix_alone(self: Any, prefix: str, hex: bool, values: list, is_signed: Any) -> None:  # noqa: A002
        if values:
            return create_print(self, prefix, hex, values, is_signed)
        print(f"({self.grid_idx[0]}, {self.grid_idx[1]}, {self.grid_idx[2]}) {prefix}")
        return None

    create_masked_store = interpreter.InterpreterBuilder.create_masked_store

    @functools.wraps(create_masked_store)
    def checked_store(self: Any, ptrs: Any, value: Any, mask: Any, *args: Any) -> Any:
        if _Launch.patched is not None:  # Tessera's launches only
            _check_store_lanes(ptrs.data, value.data, mask.data)
        return create_masked_store(self, ptrs, value, mask, *args)

    binary_op = interpreter.InterpreterBuilder.binary_op

    @functools.wraps(binary_op)
    def compare_as_bool(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        if _Launch.patched is not None and op in _COMPARISONS:
            return interpreter.TensorHandle(op(lhs.data, rhs.data), _int1())
        return binary_op(self, lhs, rhs, op)

    interpreter.InterpreterBuilder.create_masked_store = checked_store
    interpreter.InterpreterBuilder.binary_op = compare_as_bool
    interpreter._patch_lang = patch_lang_once
    interpreter.InterpreterBuilder.create_print = print_prefix_alone
    interpreter.GridExecutor.__call__ = launch_once_patched
    _installed = True
