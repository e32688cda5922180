"""Debugging inside tile loops: `hl.device_print` and `hl.breakpoint`.

`hl.device_print(prefix, *values)` prints tile values: eager mode prints each tile's tensors with
Python's `print`; interpret and compiled modes print through `tl.device_print`, one line per lane
and program (lanes past a tile's extent print too: they hold padding). `hl.breakpoint()` stops in
Python's debugger; it needs Python at the point it stops, so it runs in eager mode (where the
whole kernel is Python, `pdb` sees the tile tensors) and is refused, located, in the other modes.

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
    raise exc.UnsupportedOperationError(
        "hl.breakpoint() stops in Python's debugger, which generated Triton code has no place for",
        location=user_location(), hint="run the kernel with mode='eager' (or TESSERA_MODE=eager): the tile loop "
                                       "is then Python, and the debugger sees its tensors")


device_print_p = defined_primitive("device_print", _device_print_eager, _device_print_trace)
breakpoint_p = defined_primitive("breakpoint", _breakpoint_eager, _breakpoint_trace)
