"""Tile loops: `hl.tile`, `hl.grid`, `hl.register_block_size`, `hl.static_range`.

A top-level `for tile in hl.tile(n)` loop is one kernel launch; a nested one is a loop inside
the kernel. `hl.tile` only describes the iteration space (a `TileRange`); the active
interpreter decides what iterating it means (real slices in eager mode, symbols when tracing).
"""
from __future__ import annotations

import dataclasses
import sys
from types import FrameType
from typing import Any, Iterator, Sequence

import sympy
import torch

from tessera import exc
from tessera.location import frame_site, is_internal_file, site_and_location, user_location
from tessera.ir import interpreter
from tessera.ir.tile_range import TileOffsets, TileRange, static_int
from tessera.ir.primitive import defined_primitive
from tessera.language.constexpr import BlockSizeInt, SpecializedInt, specialize_p
from tessera.ir.tunables import ConfigFragment




LANES_ATTRIBUTE = "_tessera_lanes"  # eager values: the Tile each dim runs over (eager_lanes.py)
TILE_VALUE_ATTRIBUTE = "_tessera_tile_value"  # eager values computed in a tile loop (eager_indexing.py)


@dataclasses.dataclass
class Tile(TileOffsets):
    """One block of a tile loop, as seen in eager mode.

    Indexing a tensor with a tile takes the rows `begin:end`. `index` is the tensor of those
    indices, `id` the tile's number along its loop and `count` the number of tiles.

    >>> t = Tile(begin=64, end=100, block_size=64, id=1, count=2, device=torch.device("cpu"))
    >>> t.end - t.begin
    36
    """

    begin: int
    end: int
    block_size: int
    id: int
    count: int
    device: torch.device
    # the bounds of the whole loop this tile is one block of (hl.rand numbers elements by them)
    range_begin: int = 0
    range_end: int | None = None
    # hl.jagged_tile: the per-lane ends (lanes at or past theirs are left out: eager_lanes.py)
    jagged_ends: Any = dataclasses.field(default=None, compare=False, repr=False)
    # shared by the tiles of one loop dim in one run of the loop: an accumulator's lanes, made in
    # an earlier iteration, face this iteration's tile (one axis when traced; eager_lanes.same_tile)
    dim_key: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def index(self) -> torch.Tensor:
        index = torch.arange(self.begin, self.end, device=self.device, dtype=torch.int32)
        setattr(index, LANES_ATTRIBUTE, (self,))  # its one dim runs over this tile (eager_lanes.py)
        setattr(index, TILE_VALUE_ATTRIBUTE, True)  # registers, as when traced: `index[None, :]` is a view
        return index

    def as_slice(self) -> slice:
        return slice(self.begin, self.end)

    def __len__(self) -> int:
        return self.end - self.begin

    def __index__(self) -> int:
        # a tile used as a size (`torch.zeros([tile_m, 8])`) is its element count, as when compiled
        return self.end - self.begin

    def __repr__(self) -> str:
        return f"Tile({self.begin}:{self.end}, block_size={self.block_size}, id={self.id})"


def _caller_frame() -> FrameType | None:
    """The innermost user frame above the `hl.` function that calls this."""
    frame = sys._getframe(2)
    while frame is not None and is_internal_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _call_site() -> tuple[str, int, int] | None:
    """(file, line, col) of the innermost user call, matching the AST node of that call."""
    frame = _caller_frame()
    return frame_site(frame) if frame is not None else None


def _site_and_location() -> tuple[tuple[str, int, int] | None, Any]:
    """The call site and source location of the user's `hl.tile` / `hl.grid` call (cached per site)."""
    frame = sys._getframe(2)
    if is_internal_file(frame.f_code.co_filename):  # called through a helper of ours
        frame = _caller_frame()
    return site_and_location(frame) if frame is not None else (None, None)


_SIZE_TYPES = (list, tuple, torch.Size)

# (id(code), instruction) -> (code, (site, location)) of hl.tile calls made from a user's line
# (a kernel's host code); the code object is held, so its id is not reused
_USER_SITES: dict[tuple[int, int], tuple[Any, tuple]] = {}


def _remember_site(frame: FrameType) -> tuple[Any, tuple]:
    """`_site_and_location` of an hl.tile call from `frame`, remembered where the frame is the
    user's own (not a helper of ours, nor a rewritten loop body, whose location is found through
    its callers)."""
    code = frame.f_code
    if is_internal_file(code.co_filename):
        frame = _caller_frame()
        return (None, site_and_location(frame) if frame is not None else (None, None))
    known = (code, site_and_location(frame))
    if not code.co_name.startswith("_tessera_"):
        if len(_USER_SITES) >= 4096:
            _USER_SITES.clear()
        _USER_SITES[(id(code), frame.f_lasti)] = known
    return known


def _check_extent(value: Any, function: str) -> None:
    """A loop bound must be an integer: a host int, a size, or an integer scalar of the device.

    One check for every mode, so eager mode refuses what compiled mode refuses (a float bound
    once ran in eager and failed in int() elsewhere)."""
    if isinstance(value, TileOffsets):
        raise exc.TileOfTile(f"hl.{function} of a tile: a loop bound must be a size, not a tile",
                             location=user_location(),
                             hint=f"loop over the tile's range with hl.{function}(tile.begin, tile.end), or over "
                                  "a size (x.size(0))")
    if isinstance(value, bool) or isinstance(value, (float, complex, str)) or value is None:
        raise exc.DtypeError(
            f"hl.{function} bound {value!r} is a {type(value).__name__}, not an integer", location=user_location(),
            hint="pass an int, a size (x.size(0)), or an integer scalar loaded in the kernel")
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        raise exc.DtypeError(f"hl.{function} bound of dtype {dtype} is not an integer", location=user_location(),
                             hint="convert it with .to(torch.int32)")
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise exc.ShapeMismatchError(
            f"hl.{function} bound is a tensor of shape {list(value.shape)}, not a single value",
            location=user_location(), hint="index one element of it (hl.load(t, [i]))")
    if isinstance(value, sympy.Basic) and value.is_integer is False:
        raise exc.DtypeError(f"hl.{function} bound {value} is not an integer", location=user_location(),
                             hint="pass an int or a size (x.size(0))")


def _check_block_size(value: Any) -> None:
    """`block_size=` must be a positive power of two (a register size) in every mode."""
    if value is None or (isinstance(value, sympy.Basic) and not value.is_Integer and value.is_integer is not False):
        return  # a size symbol while tracing: the trace checks this call's value
    if isinstance(value, bool) or not isinstance(value, (int, sympy.Integer)):
        raise exc.ConfigError(f"block_size={value!r} is not an int", location=user_location(),
                              hint="pass a power of two, or None to let the Config choose it")
    block = int(value)
    if block <= 0 or block & (block - 1):
        raise exc.ConfigError(f"block_size={block} is not a positive power of two", location=user_location(),
                              hint="pass a power of two such as 16, 32 or 64, or None to let the Config choose it")


def _as_list(value: Any) -> tuple[list[Any], bool]:
    if isinstance(value, _SIZE_TYPES):
        return list(value), True
    return [value], False


def _normalize_range(begin_or_end: Any, end_or_none: Any, what: str) -> tuple[list, list, bool]:
    if end_or_none is None:
        ends, multi = _as_list(begin_or_end)
        return [0] * len(ends), ends, multi
    begins, multi_b = _as_list(begin_or_end)
    ends, multi_e = _as_list(end_or_none)
    if len(begins) != len(ends):
        raise exc.TesseraError(
            f"hl.{what} got {len(begins)} begin values and {len(ends)} end values",
            location=user_location(2), hint="pass one begin and one end per dimension")
    return begins, ends, multi_b or multi_e


def tile(begin_or_end: Any, end_or_none: Any = None, block_size: Any = None) -> TileRange:
    """Iterate over tiles of one or more dimensions.

    `hl.tile(n)` covers `0..n`, `hl.tile(begin, end)` covers `begin..end`, and a list
    (`hl.tile([m, n])`, `hl.tile(x.size())`) yields a tuple of tiles, one per dimension. Each
    dimension without a fixed `block_size=` takes its block size from the Config's
    `block_sizes`, in the order the kernel's source meets them.

    >>> for tile_m, tile_n in hl.tile([m, n]):    # doctest: +SKIP
    ...     out[tile_m, tile_n] = x[tile_m, tile_n] + 1
    """
    interpreter.current("tile")
    if end_or_none is None and block_size is None and type(begin_or_end) in _SIZE_TYPES:  # hl.tile(x.size())
        ends = list(begin_or_end)
        for end in ends:
            if type(end) is not int:  # a host int is a valid bound: the check is for everything else
                _check_extent(end, "tile")
        count = len(ends)
        frame = sys._getframe(1)  # the usual caller, a kernel's own line: its site is remembered here
        known = _USER_SITES.get((id(frame.f_code), frame.f_lasti))
        if known is None or known[0] is not frame.f_code:
            known = _remember_site(frame)
        return TileRange([0] * count, ends, [None] * count, True, False, *known[1])
    begins, ends, multi = _normalize_range(begin_or_end, end_or_none, "tile")
    if block_size is None:
        sizes, multi_b = [None] * len(ends), False
    else:
        sizes, multi_b = _as_list(block_size)
        if len(sizes) == 1 and len(ends) > 1:  # one block size for every dimension (as Helion's eager mode takes it)
            sizes = sizes * len(ends)
        if len(sizes) != len(ends):
            raise exc.TesseraError(
                f"hl.tile got {len(sizes)} block sizes for {len(ends)} dimensions",
                location=user_location(), hint="pass one block size per dimension, or None to tune it")
        for size in sizes:
            _check_block_size(size)
    for extent in begins + ends:
        _check_extent(extent, "tile")
    return TileRange(begins, ends, sizes, multi or multi_b, False, *_site_and_location())


def jagged_tile(parent: Any) -> TileRange:
    """Tiles of a loop whose length differs per lane of the enclosing tiles: `parent[i, ...]` is
    the end for lane `(i, ...)`. The loop runs to `parent.amax()`; lanes at or past their own end
    are left out of every load (they read 0), store and reduction over the tile.

    >>> for tile_b in hl.tile(b):                                   # doctest: +SKIP
    ...     lengths = row_lengths[tile_b]
    ...     for tile_k in hl.jagged_tile(lengths):
    ...         acc = acc + x[tile_b, tile_k].sum(dim=1)
    """
    interpreter.current("jagged_tile")
    if not hasattr(parent, "dim") or parent.dim() == 0 or isinstance(parent, Tile):
        raise exc.InvalidJaggedTileUsage(f"hl.jagged_tile takes a tensor of per-lane ends over enclosing tiles, got {parent!r}",
                               location=user_location(), hint="e.g. hl.jagged_tile(lengths) with lengths = n[tile_b]")
    end = parent.amax()
    _check_extent(end, "jagged_tile")
    return TileRange([0], [end], [None], False, False, *_site_and_location(), jagged_ends=parent)


def grid(begin_or_end: Any, end_or_none: Any = None, step: Any = None) -> TileRange:
    """Iterate over single indices: one program per index (a tile of block size 1).

    >>> for g in hl.grid(num_groups):             # doctest: +SKIP
    ...     m = hl.load(sizes, [g])
    """
    interpreter.current("grid")
    begins, ends, multi = _normalize_range(begin_or_end, end_or_none, "grid")
    steps, _ = _as_list(1 if step is None else step)
    if len(steps) == 1 and len(ends) > 1:
        steps = steps * len(ends)
    for extent in begins + ends:
        _check_extent(extent, "grid")
    # a step the host knows per call (an int argument, a closure's int: a symbol when traced)
    # is pinned, with a guard: the loop needs its value to count iterations
    steps = [_host_step(size) for size in steps]
    for size in steps:
        if isinstance(size, bool) or not isinstance(size, (int, sympy.Integer)) or int(size) <= 0:
            raise exc.ConfigError(f"hl.grid step {size!r} is not a positive int", location=user_location(),
                                  hint="pass a step of 1 or more")
    return TileRange(begins, ends, steps, multi, True, *_site_and_location())


def _host_step(step: Any) -> Any:
    if isinstance(step, sympy.Basic) and not step.is_Integer:
        try:
            return specialize_p.bind(step)
        except exc.TesseraError:  # a value loaded on the device: refused below
            return step
    return step


def register_block_size(min_or_max: Any, max_or_none: Any = None) -> Any:
    """Declare a tunable block size shared by every `hl.tile(..., block_size=it)` that uses it.

    `register_block_size(max)` or `register_block_size(min, max)`; returns the block size the
    current Config assigns (one `block_sizes` entry, counted where this call stands).

    >>> m_block = hl.register_block_size(m)       # doctest: +SKIP
    >>> for mb in hl.tile(m, block_size=m_block): ...
    """
    active = interpreter.current("register_block_size")
    low, high = (1, min_or_max) if max_or_none is None else (min_or_max, max_or_none)
    # a compile-time int, as after hl.specialize: usable as a register size (hl.zeros([block]),
    # hl.arange(block)); the Config that chose it already tells its variants apart
    site = _call_site()
    value = BlockSizeInt(active.registered_block_size(site, static_int(low) or 1, static_int(high)))
    slots = getattr(active, "slots", None)
    if slots is not None:
        # the block_sizes entry it is: a tile loop given it as its block is tuned through it
        # (the trace records that loop's axis under this entry: its role, what it loads)
        value.slot = slots.first_slot(site, 1)
    return value


def register_tunable(name: str, fragment: ConfigFragment) -> Any:
    """Declare a tunable value of your own: Config key `name`, with the values `fragment` allows.

    Returns the current Config's `name` entry, else the fragment's default (eager mode, an
    untuned call); the autotuner searches it with the block sizes. An int is a compile-time
    constant, like a `register_block_size` value.

    >>> split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256))   # doctest: +SKIP
    """
    if not isinstance(fragment, ConfigFragment):
        raise exc.ConfigError(f"hl.register_tunable({name!r}, {fragment!r}): the second argument must be a "
                              "config fragment", location=user_location(),
                              hint="e.g. hl.register_tunable('split_k', PowerOfTwoFragment(1, 256)) from "
                                   "tessera.autotuner")
    value = interpreter.current("register_tunable").tunable(name, fragment)
    return SpecializedInt(value) if isinstance(value, int) and not isinstance(value, bool) else value


def static_range(begin_or_end: int, end_or_none: int | None = None, step: int = 1) -> range:
    """A loop that is unrolled when compiled (its bounds must be Python ints).

    >>> for i in hl.static_range(4): ...         # doctest: +SKIP
    """
    return range(0, begin_or_end, step) if end_or_none is None else range(begin_or_end, end_or_none, step)


def barrier() -> None:
    """A grid-wide barrier between two top-level tile loops: everything the first stored is
    visible to the second. Each top-level loop is its own kernel launch, run in order on the
    device's stream, so the launch boundary already is that barrier; inside a tile loop there is
    no grid-wide barrier to take, and the call is refused.

    >>> for tile in hl.tile(n): partial[tile] = ...          # doctest: +SKIP
    >>> hl.barrier()
    >>> for tile in hl.tile(m): out[tile] = partial[...].sum(0)
    """
    barrier_p.bind()


def _barrier_eager() -> None:
    if getattr(interpreter.active(), "loop_depth", 0):
        _refuse_barrier()


def _barrier_trace(tracer: Any) -> None:
    _refuse_barrier()


def _refuse_barrier() -> None:
    raise exc.UnsupportedSyntaxError(
        "hl.barrier() inside a tile loop: it separates top-level tile loops (kernel launches), and "
        "the programs of one launch have no grid-wide barrier", location=user_location(),
        hint="call hl.barrier() between two top-level `for ... in hl.tile(...)` loops")


barrier_p = defined_primitive("barrier", _barrier_eager, _barrier_trace, device_only=False)


# -- Helion's function spellings of a tile's attributes: `hl.tile_begin(t)` is `t.begin` ---------
def _tile_of(tile: Any, function: str) -> Any:
    interpreter.current(function)
    if not hasattr(tile, "block_size") or not hasattr(tile, "index"):
        raise exc.TesseraError(f"hl.{function} of {tile!r}: not a tile of a tile loop", location=user_location(2),
                               hint="pass the variable of a `for tile in hl.tile(...)` loop")
    return tile


def tile_index(tile: Any) -> Any:
    """The indices of a tile (`tile.index`)."""
    return _tile_of(tile, "tile_index").index


def tile_begin(tile: Any) -> Any:
    """The tile's first index (`tile.begin`)."""
    return _tile_of(tile, "tile_begin").begin


def tile_end(tile: Any) -> Any:
    """One past the tile's last index (`tile.end`)."""
    return _tile_of(tile, "tile_end").end


def tile_block_size(tile: Any) -> Any:
    """The tile's block size (`tile.block_size`)."""
    return _tile_of(tile, "tile_block_size").block_size


def tile_id(tile: Any) -> Any:
    """The tile's number along its loop (`tile.id`)."""
    return _tile_of(tile, "tile_id").id
