"""Debugging inside tile loops: `hl.device_print` and `hl.breakpoint`.

`hl.device_print(prefix, *values)` prints tile values (Python's `print("x: ", v)` in a tile body
means the same, as in Helion: the frontend routes it to `print_helper`): eager mode prints each tile's tensors with
Python's `print`; interpret and compiled modes print through `tl.device_print`, one line per lane
and program (lanes past a tile's extent print too: they hold padding). `hl.breakpoint()` (and Python's
`breakpoint()` in a tile loop) stops in Python's debugger: in eager mode once per tile (the whole
kernel is Python, `pdb` sees the tile tensors), in interpret mode once per program (Triton's
interpreter runs the generated code as Python); compiled for the GPU it is refused, located.

>>> hl.device_print("row sums", acc)                          # doctest: +SKIP
>>> hl.breakpoint()                                           # doctest: +SKIP
"""
from __future__ import annotations

import builtins
from typing import Any

import sympy

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.ir import interpreter
from tessera.trace.tracer import Tracer


def device_print(prefix: str, *values: Any) -> None:
    """Print `prefix` and the tile values `values` from inside a tile loop.

    >>> hl.device_print("x = ", x[tile])                      # doctest: +SKIP
    """
    if not isinstance(prefix, str):
        raise exc.TesseraError(f"hl.device_print: the prefix {prefix!r} is not a string", location=user_location(),
                               hint='pass a string first: hl.device_print("x", value)')
    device_print_p.bind(prefix, *values)


def breakpoint() -> None:  # noqa: A001 - Helion's name
    """Stop in Python's debugger here (eager mode: the tile tensors are ordinary locals).

    >>> hl.breakpoint()                                       # doctest: +SKIP
    """
    breakpoint_p.bind()


def print_helper(function: Any, *values: Any, **keywords: Any) -> None:
    """What a rewritten `print(...)` in a tile body calls: while tracing, `print("prefix", *tiles)`
    is `hl.device_print`; anything else (no kernel traced, a `print` the kernel rebound) is the call.

    >>> print("row sums: ", acc)       # in a tile body: one device print    # doctest: +SKIP
    """
    if function is not builtins.print or not isinstance(interpreter.active(), Tracer):
        return function(*values, **keywords)
    if keywords:
        raise exc.DevicePrintError(f"print(..., {', '.join(f'{k}=' for k in keywords)}) in a tile body: a device "
                                   "print takes no keywords", location=user_location(),
                                   hint='print a string prefix and tile values only: print("x: ", x_tile)')
    if not values:
        raise exc.DevicePrintError("print() requires at least one argument in a tile body (a string prefix)",
                                   location=user_location(), hint='print("here") or print("x: ", x_tile)')
    prefix, *rest = values
    if not isinstance(prefix, str):
        raise exc.DevicePrintError(f"First argument to print() must be a string prefix, not "
                                   f"{type(prefix).__name__}", location=user_location(),
                                   hint='print("x: ", x_tile) prints from the device; or run the kernel with '
                                        "mode='eager' (TESSERA_MODE=eager), where print shows tensors")
    for value in rest:
        if not isinstance(value, TileValue):
            shown = f"{value}" if isinstance(value, (int, float, sympy.Basic)) else type(value).__name__
            raise exc.DevicePrintError(
                f"print() only supports runtime tensor values in a tile body, not the host value {shown}",
                location=user_location(), hint="print host values before the tile loop, or make a tile value "
                                               "(hl.full([tile], value))")
    device_print(prefix, *rest)


def _device_print_eager(prefix: str, *values: Any) -> None:
    print(prefix, *values)


def _device_print_trace(tracer: Tracer, prefix: str, *values: Any) -> None:
    for value in values:
        if not isinstance(value, TileValue):
            raise exc.UnsupportedOperationError(
                f"hl.device_print of {type(value).__name__} {value!r}: only tile values print from the device",
                location=user_location(), hint="print host values before the tile loop, or make a tile value "
                                               "(hl.full([tile], value))")
    tracer.emit(Op.DEVICE_PRINT, [value.node for value in values], (), None, prefix=prefix)


def _breakpoint_eager() -> None:
    builtins.breakpoint()


def _breakpoint_trace(tracer: Tracer) -> None:
    # each program stops in Triton's interpreter; the backend refuses it for the GPU (located there)
    tracer.emit(Op.BREAKPOINT, [], (), None)


def breakpoint_helper(function: Any) -> None:
    """What a rewritten `breakpoint()` inside a tile loop calls: Python's breakpoint (whatever
    `builtins.breakpoint` is now) becomes hl.breakpoint; another function named so is called."""
    if function is builtins.breakpoint:
        breakpoint_p.bind()
    else:
        function()


device_print_p = defined_primitive("device_print", _device_print_eager, _device_print_trace)
breakpoint_p = defined_primitive("breakpoint", _breakpoint_eager, _breakpoint_trace)
