"""Indexing tensors with tiles in eager mode, with bounds checks and masks.

Eager mode is the oracle, so it must never read or write out of bounds silently: a tile that
runs past a tensor's dimension, or an index tensor with an out-of-range value in an unmasked
lane, is an error here, exactly the accesses the compiled kernel masks or would corrupt.
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from tessera import exc, settings
from tessera.location import user_location
from tessera.ir import interpreter
from tessera.language import eager_lanes, eager_write_back
from tessera.language.tile import TILE_VALUE_ATTRIBUTE, Tile
from tessera.trace.indexing import check_index_dtype
from tessera.trace.proxy import refuse_value_list

Index = tuple[Any, ...]

# Eager mode runs tile values as plain tensors; this attribute marks those computed inside a tile
# loop (loads, hl.* results and everything derived from them), so eager can refuse what compiled
# modes refuse for tile values (an int index, a tile value leaving its loop) instead of answering.
_TILE_VALUE_MARK = TILE_VALUE_ATTRIBUTE


def mark_tile_values(result: Any) -> Any:
    """Marks `result` (a tensor, or a tuple/list of them) as tile values; returns it."""
    for item in (result if isinstance(result, (tuple, list)) else (result,)):
        if isinstance(item, torch.Tensor):
            setattr(item, _TILE_VALUE_MARK, True)
    return result


def is_tile_value(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and getattr(value, _TILE_VALUE_MARK, False)


_MEMORY_ROWS_MARK = "_tessera_memory_rows"


def mark_memory_rows(value: Any) -> Any:
    """Marks a value read from memory (or computed lane for lane from one): its dims hold real
    lanes, never a row padded to a power of two (`is_padded_row`), so nothing cuts them."""
    if isinstance(value, torch.Tensor):
        setattr(value, _MEMORY_ROWS_MARK, True)
    return value


def holds_memory_rows(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and getattr(value, _MEMORY_ROWS_MARK, False)


def is_constant_index(item: Any) -> bool:
    """An int, or a slice of constant ints other than `:`: lanes of a whole dim a tile value gives
    up (language/slicing.py)."""
    if isinstance(item, bool):
        return False
    if isinstance(item, (int, sympy.Integer)):
        return True
    return isinstance(item, slice) and item != slice(None) and all(
        part is None or (isinstance(part, (int, sympy.Integer)) and not isinstance(part, bool))
        for part in (item.start, item.stop, item.step))


def check_tile_value_index(index: Any) -> None:
    """What a tile value can be indexed with in every mode: `:`, None and `...` (views), and
    constant slices and ints (of whole dims when traced)."""
    for item in (index if isinstance(index, tuple) else (index,)):
        if not (item is None or item is Ellipsis or (isinstance(item, slice) and item == slice(None))
                or is_constant_index(item)):
            raise exc.IndexingError(
                f"indexing a tile value with {item!r} is not supported", location=user_location(),
                hint="index the tensor in memory instead (x[tile, i]), or use `:` and None on tile values")


def sliced_tile_dim_error(what: str, dim: int, kind: str = "a tile",
                          error: type[exc.UnsupportedOperationError] = exc.UnsupportedOperationError
                          ) -> exc.UnsupportedOperationError:
    """The error for constant lanes taken of a dim that is not whole (every mode raises it; a split
    raises Helion's class for splits, `error`)."""
    return error(
        f"{what} along dim {dim}, which is {kind}: only whole dimensions (read with `:`) are sliced in registers",
        location=user_location(),
        hint="slice the tensor in memory instead (x[tile, 8:16]), or read that dim whole: x[tile, :]")


def refuse_constant_index_of_tile_dims(value: torch.Tensor, index: Any) -> None:
    """Eager holds a tile as a real slice, so `v[:4]` of a tile dim would answer; traced modes cannot
    (a tile's extent varies per tile), so eager refuses it the same way and the modes agree."""
    lanes = eager_lanes.lanes_of(value)
    if lanes == eager_lanes.LOST:
        return
    items = list(index) if isinstance(index, tuple) else [index]
    if Ellipsis in items:
        spot = items.index(Ellipsis)
        explicit = sum(1 for item in items if item is not None and item is not Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (value.dim() - explicit)
    dim = 0
    for item in items:
        if item is None:
            continue
        if is_constant_index(item) and dim < len(lanes) and lanes[dim] is not None:
            raise sliced_tile_dim_error(f"the tile value index {item!r}", dim)
        dim += 1


def refuse_tile_dims(value: Any, dims: Sequence[int], what: str,
                     error: type[exc.UnsupportedOperationError] = exc.UnsupportedOperationError) -> None:
    """Eager's side of an op that moves lanes within whole dims (`torch.flip`, `torch.roll`, ...):
    on a tile dim torch would rearrange the block eager holds, which traced modes cannot (a tile's
    extent varies per tile), so eager refuses it as they do."""
    lanes = eager_lanes.lanes_of(value)
    if lanes == eager_lanes.LOST or not isinstance(value, torch.Tensor):
        return
    for dim in dims:
        if dim < len(lanes) and lanes[dim] is not None:
            raise sliced_tile_dim_error(what, dim, error=error)


def _as_int(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        return int(value)
    return value


def normalize_index(tensor: torch.Tensor, index: Any, reading: bool = False) -> Index:
    """Tiles become slices (bounds-checked); 0-d int tensors become ints; the result is a tuple.
    `reading` (a load inside a tile loop): an int index, or a tile running past 1, into a
    dimension of size 1 broadcasts, as in Helion, reading its one element."""
    items = list(index) if isinstance(index, (tuple, list)) else [index]
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    if sum(1 for item in items if item is Ellipsis) > 1:
        raise exc.IndexingError("an index can only have a single ellipsis ('...')", location=user_location(),
                                hint="keep one `...`")
    if Ellipsis in items:
        spot = items.index(Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (tensor.dim() - consumed)
    result: list[Any] = []
    dim = 0
    for item in items:
        item = _as_int(item)
        if isinstance(item, slice):
            item = slice(_as_int(item.start), _as_int(item.stop), _as_int(item.step))
        if isinstance(item, Tile):
            if dim >= tensor.dim():
                raise exc.RankMismatch(
                    f"too many indices for tensor of dimension {tensor.dim()}", location=user_location())
            if item.begin < 0:
                raise exc.IndexingError(
                    f"tile {item.begin}:{item.end} begins below 0 in dimension {dim} of size "
                    f"{tensor.size(dim)} (tensor shape {list(tensor.shape)})",
                    location=user_location(),
                    hint="begin tile loops at 0 or above (a negative begin is not Python's from-the-end slicing)")
            if reading and tensor.size(dim) == 1 and item.end > 1:
                item = slice(0, 1)  # a read of a dimension of size 1 broadcasts, as in Helion
            elif item.end > tensor.size(dim):
                raise exc.IndexingError(
                    f"tile {item.begin}:{item.end} is out of bounds for dimension {dim} of size "
                    f"{tensor.size(dim)} (tensor shape {list(tensor.shape)})",
                    location=user_location(),
                    hint="tile each dimension by the size of the tensor it indexes")
            if isinstance(item, Tile):
                item = item.as_slice()
        elif isinstance(item, int) and not isinstance(item, bool):
            if reading and dim < tensor.dim() and tensor.size(dim) == 1:
                item = 0
            _check_int_index(tensor, item, dim)
        elif isinstance(item, torch.Tensor):
            check_index_dtype(item.dtype)
        result.append(item)
        if item is not None:
            dim += 1
    return tuple(result)


def _cut_to_tiles(value: Any, index: Any) -> Any:
    """A stored value whose trailing dims are a register_block_size allocation's (B lanes) where
    the destination has a tail tile of block B: its first lanes, as the compiled store masks the
    rest. Only dims that hold exactly a tile's block size are cut."""
    items = index if isinstance(index, (tuple, list)) else (index,)
    tiles = [item for item in items if isinstance(item, Tile)]
    if not isinstance(value, torch.Tensor) or not tiles or value.dim() < len(tiles) \
            or len(tiles) != sum(1 for item in items if item is not None and item is not Ellipsis):
        return value  # only all-tile destinations: each value dim then faces one tile
    for position, tile in enumerate(tiles):
        dim = value.dim() - len(tiles) + position
        if value.size(dim) == tile.block_size > len(tile):
            value = value.narrow(dim, 0, len(tile))
    return value


def is_padded_row(padded: int, row: int) -> bool:
    """Whether `padded` lanes are a row of `row` padded to the next power of two, as Helion holds
    a whole row (`hl.zeros([tile, next_power_of_2(n)])` combines with an n-wide row)."""
    return 1 < row < padded and padded == 1 << (row - 1).bit_length()


def cut_padded_rows(value: Any, shape: Sequence[int]) -> Any:
    """`value` with each trailing dim of padded lanes (`is_padded_row`) where `shape` has the row
    cut to the row: the lanes the compiled code masks. A value of memory rows is never cut (its
    lanes are data: a store of 8 loaded lanes into a row of 7 is refused, as traced)."""
    if not isinstance(value, torch.Tensor) or holds_memory_rows(value):
        return value
    for position in range(1, min(value.dim(), len(shape)) + 1):
        if is_padded_row(value.size(-position), int(shape[-position])):
            value = value.narrow(value.dim() - position, 0, int(shape[-position]))
    return value


def _check_int_index(tensor: torch.Tensor, item: int, dim: int) -> None:
    """torch's rule for an int index (negative counts from the end), as a located error."""
    if dim >= tensor.dim():
        raise exc.RankMismatch(f"too many indices for tensor of dimension {tensor.dim()}", location=user_location())
    size = tensor.size(dim)
    if not -size <= item < size:
        raise exc.IndexingError(
            f"index {item} is out of bounds for dimension {dim} of size {size} (tensor shape {list(tensor.shape)})",
            location=user_location(), hint="index within the dimension (negative indices count from the end)")


def _tensor_dims(tensor: torch.Tensor, index: Index) -> list[tuple[int, int]]:
    """(position in index, tensor dim) of every index that is a tensor."""
    found, dim = [], 0
    for position, item in enumerate(index):
        if item is None:
            continue
        if isinstance(item, torch.Tensor):
            found.append((position, dim))
        dim += 1
    return found


def _in_bounds(tensor: torch.Tensor, index: Index, tensor_dims: list[tuple[int, int]]) -> torch.Tensor:
    """Bool tensor, broadcastable to `tensor[index]`, True where every index tensor is in range."""
    shape = [1] * tensor.dim()
    for _, dim in tensor_dims:
        shape[dim] = 2
    helper = torch.ones(shape, dtype=torch.bool, device=tensor.device)
    for _, dim in tensor_dims:
        helper.narrow(dim, 1, 1).fill_(False)
    probe: list[Any] = []
    positions = {position: dim for position, dim in tensor_dims}
    for position, item in enumerate(index):
        if position in positions:
            size = tensor.size(positions[position])
            wide = item.long()  # an int8 index compared with a size above 127 must not wrap
            probe.append(((wide < -size) | (wide >= size)).long())  # negative ones count from the end
        elif item is None or isinstance(item, slice):
            probe.append(None if item is None else slice(None))
        else:
            probe.append(0)
    return helper[tuple(probe)]


def _clamped(tensor: torch.Tensor, index: Index, tensor_dims: list[tuple[int, int]]) -> Index:
    items = list(index)
    for position, dim in tensor_dims:
        size = tensor.size(dim)
        wrapped = items[position].long()
        items[position] = torch.where(wrapped < 0, wrapped + size, wrapped).clamp(0, max(size - 1, 0))
    return tuple(items)


def _in_range_lanes(in_bounds: torch.Tensor, mask: Any) -> Any:
    """The lanes an access through index tensors touches: those of `mask` whose indices are in
    range. A lane out of range reads 0 and writes nothing, as in generated code (nothing outside
    the tensor is read, in any mode, and a later `where` may drop the lane, as Helion's jagged
    kernels do); with TESSERA_CHECK_INDICES an unmasked one is a located error in every mode."""
    mask = None if mask is None else torch.as_tensor(mask, device=in_bounds.device)
    if settings.get("check_indices"):
        bad = ~in_bounds if mask is None else (~in_bounds & mask)
        if bool(bad.any()):
            raise exc.IndexingError(
                "an index tensor holds values outside the tensor's dimension in lanes that are not masked "
                "(TESSERA_CHECK_INDICES)", location=user_location(),
                hint="mask those lanes with extra_mask=..., or clamp the indices")
        return mask
    if bool(in_bounds.all()):
        return mask
    return in_bounds if mask is None else in_bounds & mask


def load(tensor: torch.Tensor, index: Any, mask: Any = None) -> torch.Tensor:
    """`tensor[index]` with masked lanes reading 0 and out-of-range lanes rejected.

    An index with a tile reads values into registers in compiled code, so the result here is a
    copy: `v = x[tile]; v *= 2` must not write through to `x`. Slices and ints alone are views
    (`flat[a:b]`, `t[i]`), as they are in compiled code, where writes through them reach the tensor.
    """
    reads_values = any(isinstance(item, Tile) for item in (index if isinstance(index, (tuple, list)) else (index,)))
    _note_access(tensor, False)
    lanes = None
    if eager_lanes.is_tracking():
        mask, lanes = eager_lanes.access_mask(tensor, index, mask, "a load")
    inside, original = None, index
    if mask is not None:
        tensor, inside, index = _padded_past_masked_tiles(tensor, index)
    index = normalize_index(tensor, index, reading=bool(getattr(interpreter.active(), "loop_depth", 0)))
    tensor_dims = _tensor_dims(tensor, index)
    read = _clamped(tensor, index, tensor_dims) if tensor_dims else index
    if tensor_dims:
        mask = _in_range_lanes(_in_bounds(tensor, index, tensor_dims), mask)
    if inside is not None:
        _check_masked_tile_lanes(inside[read], mask)
    value = tensor[read]
    if mask is not None:
        value = torch.where(torch.as_tensor(mask, device=value.device), value, torch.zeros((), dtype=value.dtype,
                                                                                              device=value.device))
    elif (reads_values or _loads_when_traced(original)) and value._base is not None:
        value = value.clone()
    if reads_values and not tensor_dims:
        mark_tail_tiles(value, original)
    if mask is None and inside is None:
        eager_write_back.note_read(value, tensor, original)
    if reads_values:
        mark_memory_rows(value)
    return value if lanes is None else eager_lanes.tag(value, lanes)


def _loads_when_traced(index: Any) -> bool:
    """Whether the trace reads this index into registers although it holds no tile: inside a tile
    loop, ints (a grid's index) and whole slices (`x[i, :]`), no bounded slice (a view)."""
    if not getattr(interpreter.active(), "loop_depth", 0):
        return False
    items = index if isinstance(index, (tuple, list)) else (index,)
    return not any(isinstance(item, slice) and item != slice(None) for item in items)


def _note_access(tensor: torch.Tensor, writes: bool) -> None:
    """Tell the open launch's access log (eager mode, in a tile loop) of this load or store."""
    log = getattr(interpreter.active(), "launch_accesses", None)
    if log is not None and getattr(interpreter.active(), "loop_depth", 0):
        log.note(tensor, writes, user_location())


def mark_tail_tiles(value: torch.Tensor, original: Any, allocation: bool = False) -> None:
    """Mark the dims of a load (or an hl.zeros) that come from a tail tile (fewer elements than its block):
    eager mode fits them to a register_block_size allocation as compiled code does
    (runtime.eager.fit_to_block_sizes), and tells them from size-1 dims that broadcast."""
    items = original if isinstance(original, (tuple, list)) else (original,)
    if Ellipsis in [i for i in items if not isinstance(i, torch.Tensor)]:
        return
    depth_of = _tile_depths()
    # an index's ints select (their dims go); an allocation's ints are sizes
    kept = list(items) if allocation else [item for item in items if not (isinstance(item, int) and not isinstance(item, bool))]
    if len(kept) != value.dim():
        return
    marks = {value.dim() - d: (item.block_size, len(item), depth_of.get(id(item), 0))
             for d, item in enumerate(kept) if isinstance(item, Tile) and len(item) < item.block_size}
    if marks:
        setattr(value, "_tessera_tails", marks)


def lane_tail_marks(value: torch.Tensor) -> dict[int, tuple[int, int, int]]:
    """The tail marks `mark_tail_tiles` gives, read from the lanes of a value that no tile indexed:
    a gather by offsets computed from `tile.index` (`hl.load(x, [t0.index[:, None] * n + t1.index])`,
    the fp4 loads) runs over a tail tile as a load by the tile does; without the mark, a tail of
    one lane broadcast against a register_block_size allocation (a silent wrong answer) and
    others met it as a shape error."""
    lanes = eager_lanes.lanes_of(value)
    if lanes == eager_lanes.LOST:
        return {}
    marks: dict[int, tuple[int, int, int]] = {}
    for d, lane in enumerate(lanes):  # every elementwise op asks: full tiles leave at the first test
        if isinstance(lane, Tile) and lane.end - lane.begin < lane.block_size and value.size(d) == len(lane):
            marks[value.dim() - d] = (lane.block_size, len(lane), _tile_depths().get(id(lane), 0))
    return marks


def _tile_depths() -> dict[int, int]:
    """id(tile) -> the depth of its loop, for the tiles of the open tile loops."""
    open_tiles = getattr(interpreter.active(), "open_tiles", [])
    return {id(tile): depth for depth, combo in enumerate(open_tiles) for tile in combo}


def _padded_past_masked_tiles(tensor: torch.Tensor, index: Any) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
    """A masked load's tiles may run past their dimension (a tile over `out.size(1)` reading the
    part of `out` that `x` covers, the rest masked by `extra_mask`): such a dimension is cut to
    the tile's rows and padded with zeros to the tile's length, and the tile becomes a slice of
    that. Returns (tensor, where its elements are real (None if nothing was padded), index); the
    caller checks that every padded lane is masked."""
    items = list(index) if isinstance(index, (tuple, list)) else [index]
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    inside: torch.Tensor | None = None
    dim = 0
    for position, item in enumerate(items):
        if item is Ellipsis:
            dim += tensor.dim() - consumed
            continue
        if isinstance(item, Tile) and dim < tensor.dim() and item.begin >= 0 and item.end > tensor.size(dim):
            if inside is None:
                inside = torch.ones(tensor.shape, dtype=torch.bool, device=tensor.device)
            tensor, inside = (_cut_and_pad(t, dim, item.begin, item.end) for t in (tensor, inside))
            items[position] = slice(0, item.end - item.begin)
        if item is not None:
            dim += 1
    return tensor, inside, tuple(items) if inside is not None else index


def _cut_and_pad(tensor: torch.Tensor, dim: int, begin: int, end: int) -> torch.Tensor:
    """`tensor[begin:end]` along `dim`, zero-filled past the dimension's end."""
    start = min(begin, tensor.size(dim))
    part = tensor.narrow(dim, start, tensor.size(dim) - start)
    shape = list(tensor.shape)
    shape[dim] = end - begin - part.size(dim)
    return torch.cat([part, torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)], dim)


def _check_masked_tile_lanes(inside: torch.Tensor, mask: Any) -> None:
    if bool((~inside & torch.as_tensor(mask, device=inside.device)).any()):
        raise exc.IndexingError(
            "a tile runs past the tensor's dimension in lanes that extra_mask does not mask",
            location=user_location(),
            hint="mask every lane past the dimension's end (e.g. extra_mask=(tile.index < x.size(1))[None, :]), "
                 "or tile that dimension by the size of the tensor it indexes")


def _coordinates(tensor: torch.Tensor, index: Index) -> tuple[torch.Tensor, ...]:
    """Per tensor dim, the coordinate of every element of `tensor[index]` (clamped indices)."""
    coords = []
    for dim in range(tensor.dim()):
        shape = [1] * tensor.dim()
        shape[dim] = -1
        ruler = torch.arange(tensor.size(dim), device=tensor.device).view(shape).expand(tensor.shape)
        coords.append(ruler[index])
    return tuple(coords)


def store(tensor: torch.Tensor, index: Any, value: Any, mask: Any = None, accumulate: bool = False,
          reduce: str | None = None) -> None:
    """`tensor[index] = value` writing only unmasked lanes; `accumulate` adds (atomic_add)."""
    refuse_value_list(value, "a store")
    _note_access(tensor, True)
    lanes: Any = eager_lanes.LOST
    writing = None if accumulate or reduce is not None else eager_write_back.writing_lanes(tensor, index, value)
    if writing is not None:  # `x[i] = where(keep, new, x[i])`: only the kept lanes write (eager_write_back.py)
        mask = writing if mask is None else torch.as_tensor(mask, device=writing.device) & writing
    if eager_lanes.is_tracking():
        mask, lanes = eager_lanes.access_mask(tensor, index, mask, "a store")
    value = _cut_to_tiles(value, index)
    mask = _cut_to_tiles(mask, index) if writing is not None else mask
    index = normalize_index(tensor, index)
    tensor_dims = _tensor_dims(tensor, index)
    if not tensor_dims and isinstance(value, torch.Tensor) and value.dim():
        value = cut_padded_rows(value, tensor[index].shape)  # a view: no copy
    if tensor_dims:
        mask = _in_range_lanes(_in_bounds(tensor, index, tensor_dims), mask)
        index = _clamped(tensor, index, tensor_dims)
    target_shape = tensor[index].shape
    if isinstance(value, torch.Tensor) and lanes != eager_lanes.LOST:
        value = _placed_by_tile(value, lanes, target_shape)
    if not tensor_dims and mask is None and not accumulate and reduce is None:
        tensor[index] = value
        return
    value = _spread(torch.as_tensor(value, device=tensor.device).to(tensor.dtype), target_shape)
    coords = [c.expand(target_shape) for c in _coordinates(tensor, index)]
    if mask is not None:
        keep = torch.as_tensor(mask, device=tensor.device).expand(target_shape)
        coords = [c[keep] for c in coords]
        value = value[keep]
    if reduce is not None:
        _scatter_reduce(tensor, coords, value, reduce)
    else:
        if tensor_dims and not accumulate:
            _refuse_conflicting_writes(tensor, coords, value)
        tensor.index_put_(tuple(coords), value, accumulate=accumulate)


def _spread(value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """`value` broadcast to the destination's `shape`, or the trace's located error (an atomic of
    a [tile] value into one element: torch's expand raised a raw RuntimeError)."""
    if not _broadcasts(value.shape, shape):
        raise exc.ShapeMismatchError(f"cannot store a value of shape {list(value.shape)} into a destination of "
                                     f"shape {list(shape)}", location=user_location(),
                                     hint="index the destination with the same tiles as the value (or reduce the "
                                          "value first: v.sum())")
    return value.expand(shape)


def _broadcasts(source: torch.Size, target: torch.Size) -> bool:
    return len(source) <= len(target) and all(s in (1, t) for s, t in zip(reversed(source), reversed(target)))


def _placed_by_tile(value: torch.Tensor, lanes: Any, shape: torch.Size) -> torch.Tensor:
    """A stored value with Helion's broadcast by tile applied against its destination, as the
    trace applies it (`out[t0, t1] = b[t0]`: `b` stands along t0; eager_lanes.placed_by_tile)."""
    positions = eager_lanes.placed_by_tile(value, lanes, shape) if len(lanes) == len(shape) else None
    if positions is None:
        return value
    placed = [1] * len(shape)
    for d, position in enumerate(positions):
        placed[position] = value.size(d)
    return value.reshape(placed)


def _refuse_conflicting_writes(tensor: torch.Tensor, coords: list[torch.Tensor], value: torch.Tensor) -> None:
    """Lanes of one store that write different values to one element race on the GPU (which lane
    wins is undefined there, and differs between Triton's interpreter and a GPU), so eager mode,
    the oracle, refuses them instead of picking one. Equal values are one answer: allowed."""
    linear = _linear_index(tensor, coords).reshape(-1)
    if linear.numel() < 2:
        return
    order = torch.argsort(linear, stable=True)
    ordered, values = linear[order], value.reshape(-1)[order]
    same_element = ordered[1:] == ordered[:-1]
    if not bool(same_element.any()):
        return
    left, right = values[:-1], values[1:]
    differ = left != right
    if left.is_floating_point() or left.is_complex():
        differ &= ~(left.isnan() & right.isnan())
    clash = same_element & differ
    if bool(clash.any()):
        element = int(ordered[1:][clash][0])
        raise exc.DuplicateStoreIndicesError(
            f"a store writes different values to one element (flat index {element} of a tensor of shape "
            f"{list(tensor.shape)}) from several lanes: on the GPU which lane wins is undefined",
            location=user_location(),
            hint="leave all but one of those lanes out of the store (extra_mask=... on hl.store, or index a "
                 "scratch row for them), or combine them with hl.atomic_add / atomic_max")


def _linear_index(tensor: torch.Tensor, coords: list[torch.Tensor]) -> torch.Tensor:
    """The row-major element number of each lane's coordinates in `tensor`."""
    linear = torch.zeros_like(coords[0]) if coords else torch.zeros((), dtype=torch.long)
    stride = 1
    for dim in reversed(range(tensor.dim())):
        linear = linear + coords[dim] * stride
        stride *= tensor.size(dim)
    return linear


def _scatter_reduce(tensor: torch.Tensor, coords: list[torch.Tensor], value: torch.Tensor, reduce: str) -> None:
    """Atomic max/min: duplicates among the lanes combine, as on the GPU."""
    flat = tensor.contiguous().view(-1)
    linear = _linear_index(tensor, coords)
    flat.scatter_reduce_(0, linear.reshape(-1), value.reshape(-1), "amax" if reduce == "max" else "amin")
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view(tensor.shape))


def read_modify_write(tensor: torch.Tensor, index: Any, update: Any, *operands: Any) -> None:
    """`tensor[index] = update(tensor[index], *operands)` element by element (atomic and/or/xor/
    xchg/cas): where lanes repeat an element, one after another in lane order, as the GPU
    serializes atomics on one address."""
    _note_access(tensor, True)
    index = normalize_index(tensor, index)
    tensor_dims = _tensor_dims(tensor, index)
    keep = None
    if tensor_dims:
        keep = _in_range_lanes(_in_bounds(tensor, index, tensor_dims), None)
        index = _clamped(tensor, index, tensor_dims)
    target_shape = tensor[index].shape
    values = [torch.as_tensor(v, device=tensor.device).to(tensor.dtype).expand(target_shape).reshape(-1)
              for v in operands]
    coords = tuple(c.expand(target_shape).reshape(-1) for c in _coordinates(tensor, index))
    if keep is not None:  # lanes whose indices are out of range update nothing
        kept = keep.expand(target_shape).reshape(-1)
        values, coords = [v[kept] for v in values], tuple(c[kept] for c in coords)
    if not coords:  # a 0-d tensor: one element
        tensor.copy_(update(tensor, *(v.reshape(()) for v in values)))
        return
    lanes = coords[0].numel()
    if torch.stack(coords).unique(dim=1).size(1) == lanes:  # no element twice: all at once
        tensor[coords] = update(tensor[coords], *values)
        return
    for lane in range(lanes):
        element = tuple(c[lane] for c in coords)
        tensor[element] = update(tensor[element], *(v[lane] for v in values))
