"""Helion's implicit broadcast by tile: `b[tile0] + a[tile0, tile1]` lines `tile0` up with `tile0`.

Torch lines dims up from the right, which would put `tile0` against `tile1` (an error in the
trace). Helion instead places each dim of the lower-rank operand where the same tile stands in
the higher-rank one (`b[tile0]` acts as `b[tile0, None]`). The trace does the same, but only
where right alignment fails, so every program torch's rule accepts keeps its meaning. Eager
mode runs plain torch and keeps torch's rule (as Helion's reference eager mode does).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tessera import exc
from tessera.ir.graph import UNIT, Axis, Op
from tessera.trace.proxy import TileValue

if TYPE_CHECKING:
    from tessera.trace.tracer import Tracer


def _fits(tracer: Tracer, a: Axis, b: Axis) -> bool:
    """Whether two dims broadcast together (the tracer's own rule; it raises where they do not)."""
    try:
        tracer.unify_axes(a, b, "tile alignment")
    except exc.ShapeMismatchError:
        return False
    return True


def _right_aligned(tracer: Tracer, axes: tuple[Axis, ...], reference: tuple[Axis, ...]) -> bool:
    offset = len(reference) - len(axes)
    return all(_fits(tracer, axis, reference[offset + i]) for i, axis in enumerate(axes))


def _placed(tracer: Tracer, axes: tuple[Axis, ...], reference: tuple[Axis, ...]) -> tuple[Axis, ...] | None:
    """`axes` padded with unit dims to `reference`'s rank, each tile where the same tile stands
    (order kept); other dims take the next dim they fit. None: no such placement."""
    placed: list[Axis] = [UNIT] * len(reference)
    position = 0
    for axis in axes:
        if tracer.canonical_axis(axis) is UNIT:
            if position >= len(reference):
                return None
            position += 1
            continue
        same = [p for p in range(position, len(reference))
                if tracer.canonical_axis(reference[p]) is tracer.canonical_axis(axis)]
        candidates = same or [p for p in range(position, len(reference))
                              if not reference[p].is_tile and _fits(tracer, axis, reference[p])]
        if not candidates:
            return None
        placed[candidates[0]] = axis
        position = candidates[0] + 1
    return tuple(placed)


def align_to(tracer: Tracer, value: TileValue, reference: tuple[Axis, ...]) -> TileValue:
    """`value` with unit dims inserted so its tiles face the same tiles of `reference` (a
    higher-rank shape), where right alignment would not broadcast; else `value` itself."""
    if not 0 < len(value.axes) < len(reference) or _right_aligned(tracer, value.axes, reference):
        return value
    placed = _placed(tracer, value.axes, reference)
    if placed is None:
        return value  # the broadcast then reports the mismatch
    return tracer.emit(Op.VIEW, [value.node], placed, value.dtype, what="implicit broadcast by tile")


def align_operands(tracer: Tracer, operands: tuple) -> tuple:
    """The operands of one op (tile values among scalars), each lower-rank tile value aligned by
    tile to the first operand of the highest rank."""
    values = [o for o in operands if isinstance(o, TileValue)]
    if len(values) < 2:
        return operands
    reference = max(values, key=lambda v: len(v.axes)).axes
    return tuple(align_to(tracer, o, reference) if isinstance(o, TileValue) else o for o in operands)
