"""The active interpreter: what `Primitive.bind` and tile loops do right now.

Outside a kernel there is none and every `hl.` call raises `NotInKernelError`. Inside an eager
call it is an `EagerInterpreter`; while a kernel body is traced it is the tracer.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import torch

from tessera import exc
from tessera.location import is_internal_file, user_location
from tessera.thread_state import ThreadStack

_LANGUAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "language")
_CPU = torch.device("cpu")

if TYPE_CHECKING:
    from tessera.ir.primitive import Primitive
    from tessera.ir.tile_range import TileRange


class Interpreter(Protocol):
    def process(self, primitive: Primitive, args: tuple, params: dict) -> Any: ...
    def iterate_tiles(self, tile_range: TileRange) -> Iterator[Any]: ...
    def iterate_grid(self, tile_range: TileRange) -> Iterator[Any]: ...
    def block_sizes(self, site: tuple[str, int, int] | None, count: int,
                    bounds: list[tuple[int, int | None]]) -> list[Any]: ...
    def registered_block_size(self, site: tuple[str, int, int] | None, low: int, high: int | None) -> Any: ...
    def tunable(self, name: str, fragment: Any) -> Any: ...


_stack = ThreadStack()  # of Interpreter; one per thread


def current(what: str) -> Interpreter:
    """The active interpreter, or a located error naming `what` if no kernel is running."""
    if not _stack.items:
        raise exc.NotInKernelError(
            public_name(what), location=user_location(),
            hint="decorate the function that contains this call with @tessera.kernel; "
                 "on the host use the torch equivalent (e.g. torch.zeros for hl.zeros)")
    return _stack.items[-1]


def public_name(fallback: str) -> str:
    """Name of the `hl.` function the user called (the outermost Tessera frame under the user)."""
    frame = sys._getframe(2)
    name = fallback
    while frame is not None and is_internal_file(frame.f_code.co_filename):
        if frame.f_code.co_filename.startswith(_LANGUAGE_DIR) and not frame.f_code.co_name.startswith("_"):
            name = frame.f_code.co_name
        frame = frame.f_back
    return name


def active() -> Interpreter | None:
    return _stack.items[-1] if _stack.items else None


def push(interpreter: Interpreter) -> None:
    """Make `interpreter` the active one until the matching `pop` (the hot path of a launch)."""
    _stack.items.append(interpreter)


def pop() -> None:
    _stack.items.pop()


@contextlib.contextmanager
def activate(interpreter: Interpreter) -> Iterator[None]:
    _stack.items.append(interpreter)
    try:
        yield
    finally:
        _stack.items.pop()


def device() -> torch.device:
    """The running eager or host interpreter's device (eager rules such as `hl.full` allocate
    there); CPU when none is running."""
    return getattr(active(), "device", _CPU)
