"""Debugging inside tile loops: `hl.device_print` and `hl.breakpoint`.

`hl.device_print(prefix, *values)` prints tile values: eager mode prints each tile's tensors with
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

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.location import user_location
from tessera.trace.proxy import TileValue
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
