"""Compile-time values: `hl.specialize`, `hl.constexpr`."""
from __future__ import annotations

from typing import Any

import sympy

from tessera.ir.primitive import Primitive


class constexpr:  # noqa: N801  (keeps Helion's spelling: hl.constexpr)
    """Marks a kernel argument as a compile-time constant (annotation or wrapper).

    >>> def kernel(x: torch.Tensor, eps: hl.constexpr): ...     # doctest: +SKIP
    >>> kernel(x, hl.constexpr(1e-5))                          # doctest: +SKIP
    """

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"hl.constexpr({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, constexpr) and other.value == self.value

    def __hash__(self) -> int:
        return hash(("constexpr", self.value))

    # A wrapper is not its value, but decides like it: `if flag:` on `hl.constexpr(False)` must
    # take the else branch in every mode (an object is otherwise always true).
    def __bool__(self) -> bool:
        return bool(self.value)

    def __index__(self) -> int:
        return self.value.__index__()

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)


def specialize(value: Any) -> Any:
    """Make a host int (a size, a stride, an int argument) a compile-time constant.

    The value flows as a plain int through allocations, reductions, views and loop bounds, and is
    part of the cache key: a new value compiles a new variant.

    >>> n = hl.specialize(x.size(1))   # doctest: +SKIP
    """
    return specialize_p.bind(value)


class SpecializedInt(int):
    """An int that `hl.specialize` produced: a compiled kernel treats it as a constant."""


class BlockSizeInt(SpecializedInt):
    """An `hl.register_block_size` value: a constant that, as an allocation size
    (`hl.zeros([tile_m, block])`), is the block of the tiles that use it: a tile of that block
    size combines with it lane for lane, its lanes past the loop's end taking the combining op's
    identity (language/tail_fill.py)."""


specialize_p = Primitive("specialize", device_only=False)


@specialize_p.def_eager
def _specialize_eager(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(SpecializedInt(v) for v in value)
    return SpecializedInt(value)


@specialize_p.def_trace
def _specialize_trace(tracer: Any, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_specialize_trace(tracer, v) for v in value)
    pinned = tracer.pinned_int(value, "hl.specialize")
    return SpecializedInt(pinned if isinstance(pinned, int) else tracer.symbols.evaluate(tracer.symbols.canonical(value)))

