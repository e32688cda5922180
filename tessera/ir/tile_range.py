"""The iteration space of one `hl.tile` / `hl.grid` call, as data.

`hl.tile(...)` builds a `TileRange`; iterating it asks the active interpreter what that means
(real slices in eager mode, symbols while tracing).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import sympy

from tessera import exc
from tessera.ir import interpreter
from tessera.location import user_location

Extent = Any  # an int, a 0-d integer tensor, a runtime scalar, or a symbolic size


@dataclasses.dataclass(slots=True)  # slots: one is built per launch of every call
class TileRange:
    """The iteration space of one `hl.tile` / `hl.grid` call."""

    begins: list[Extent]
    ends: list[Extent]
    block_sizes: list[Any]          # per dim: an int/symbol, or None until the interpreter assigns one
    multi_dim: bool                 # yields tuples (list argument) rather than single tiles
    is_grid: bool
    site: tuple[str, int, int] | None  # (file, line, col) of the call, keys its block-size slots
    location: Any = None
    # hl.jagged_tile: the per-lane ends (a value over enclosing tiles); lanes at or past their
    # lane's end are masked out of every load, store and reduction over the tile
    jagged_ends: Any = None

    def __iter__(self) -> Iterator[Any]:
        active = interpreter.current("grid" if self.is_grid else "tile")
        return active.iterate_grid(self) if self.is_grid else active.iterate_tiles(self)

    @property
    def ndim(self) -> int:
        return len(self.ends)


def static_int(value: Any) -> int | None:
    """`value` as an int when the host knows it (a 0-d host tensor costs a sync); else None."""
    try:
        return int(value)
    except (TypeError, ValueError, RuntimeError, exc.TesseraError):  # runtime scalars of the device
        return None


def static_bounds(tile_range: TileRange) -> list[tuple[int, int | None]]:
    """Per dim (min, max) bounds a block size must fit: at least 1, at most the extent if known."""
    bounds = []
    for begin, end in zip(tile_range.begins, tile_range.ends):
        b, e = static_int(begin), static_int(end)
        bounds.append((1, e - b if b is not None and e is not None else None))
    return bounds


def reversed_range_error(begin: int, end: int) -> exc.InvalidTileRange:
    """hl.tile(begin, end) with begin past end, both known on the host: a mistake in every mode
    (Python's range would silently run no iterations)."""
    return exc.InvalidTileRange(
        f"the tile loop's range is reversed: begin={begin}, end={end}", location=user_location(),
        hint="hl.tile(begin, end) needs begin <= end; for a multi-dimensional loop pass a list of sizes, "
             "hl.tile([m, n])")


class TileOffsets:
    """Arithmetic on a tile (eager `Tile` and traced `TileProxy` alike), with Helion's meaning:
    `tile + k` and `tile - k` are the tile's indices shifted by `k` (`tile.index + k`), a tensor
    of indices (so `x[tile + k]` gathers rows `begin + k .. end + k`). Every other arithmetic on
    a tile (tile * k, tile + tile) is refused with the spelling to use instead.

    >>> k_j = k[tile_n + start, :]       # doctest: +SKIP   (same as k[tile_n.index + start, :])
    """

    index: Any

    def __add__(self, other: Any) -> Any:
        return self.index + _offset(other, "+")

    def __radd__(self, other: Any) -> Any:
        return _offset(other, "+") + self.index

    def __sub__(self, other: Any) -> Any:
        return self.index - _offset(other, "-")

    def __rsub__(self, other: Any) -> Any:
        return _offset(other, "-") - self.index

    def _refused(self, *other: Any) -> Any:
        raise exc.UnsupportedOperationError(
            "arithmetic on a tile other than `tile + k` / `tile - k` (the tile's indices shifted): "
            "a tile is a range of indices, not a number", location=user_location(),
            hint="use the tile's indices (`tile.index * 2`), its block size (`tile.block_size * 2`) "
                 "or its bounds (`tile.begin`, `tile.end`)")

    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _refused
    __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = _refused

    def __iter__(self) -> Any:
        # reached by `for a, b in hl.tile(m, n)`: two ints are a range (begin, end), one tile
        raise exc.FailedToUnpackTile(
            "cannot unpack one tile into several names: this tile loop makes a single tile",
            location=user_location(),
            hint="for a multi-dimensional loop pass a list of sizes, hl.tile([m, n]); hl.tile(a, b) "
                 "is the 1-D range a..b")

    def _sympy_(self) -> Any:
        # `size_expr + tile`: sympy asks first; refusing makes Python call our __radd__
        raise sympy.SympifyError(self)


def _offset(other: Any, operator: str) -> Any:
    if isinstance(other, TileOffsets):
        raise exc.UnsupportedOperationError(
            f"`tile {operator} tile`: only a tile and an integer offset combine", location=user_location(),
            hint="combine their indices instead: `t1.index[:, None] + t2.index[None, :]`")
    return other
