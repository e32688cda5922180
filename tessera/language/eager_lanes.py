"""Which tile each dim of an eager value runs over: what `hl.jagged_tile` needs in eager mode.

The trace knows the axes of every value, so it can leave out of a load, store or reduction the
lanes of a jagged tile past their own row's end (`Tracer.jagged_mask`). Eager values are plain
tensors; for kernels that use `hl.jagged_tile`, each eager value carries per dim the `Tile` that
dim runs over (or None), set where values are made (tile indices, loads, `hl.zeros`) and carried
through torch calls by their shapes. A value whose dims could not be followed is marked lost,
and a jagged mask on it is refused rather than guessed.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

import torch

from tessera import exc
from tessera.location import user_location
from tessera.language.tile import LANES_ATTRIBUTE, Tile

Lanes = tuple[Any, ...]  # per dim: the Tile it runs over, or None
_LANES = LANES_ATTRIBUTE
LOST = "lost"  # the attribute's value for a tensor whose dims could not be followed
_state = threading.local()


@contextlib.contextmanager
def tracking(jagged: bool) -> Iterator[None]:
    """Follow the lanes of eager values while the body runs (Helion's broadcast by tile needs
    them in every kernel); `jagged`: the kernel's own body calls hl.jagged_tile (or draws random
    numbers by lane), so its tile loops may be jagged."""
    previous = getattr(_state, "on", False), getattr(_state, "jagged", False)
    _state.on, _state.jagged = True, jagged
    try:
        yield
    finally:
        _state.on, _state.jagged = previous


def is_tracking() -> bool:
    return getattr(_state, "on", False)


def jagged_allowed() -> bool:
    """Whether the running kernel's body calls hl.jagged_tile (see `tracking`)."""
    return getattr(_state, "jagged", False)


def lanes_of(value: Any) -> Lanes | str:
    """The lanes of a value: its tag, all None for an untagged tensor or a number, or LOST."""
    if not isinstance(value, torch.Tensor):
        return ()
    tag = getattr(value, _LANES, None)
    return tag if tag is not None else (None,) * value.dim()


@contextlib.contextmanager
def inside_jagged_loop() -> Iterator[None]:
    _state.jagged_depth = getattr(_state, "jagged_depth", 0) + 1
    try:
        yield
    finally:
        _state.jagged_depth -= 1


def tag(value: Any, lanes: Lanes | str) -> Any:
    if isinstance(value, torch.Tensor):
        setattr(value, _LANES, lanes if lanes == LOST or len(lanes) == value.dim() else LOST)
    return value


def aligned(shape: Sequence[int], operands: Sequence[Any]) -> Lanes | str:
    """Lanes of a result of `shape` broadcast from `operands` (dims aligned from the right); a dim
    takes the tile of an operand dim of the same size."""
    lanes: list[Any] = [None] * len(shape)
    for operand in operands:
        own = lanes_of(operand)
        if own == LOST:
            return LOST
        offset = len(shape) - len(own)
        if offset < 0:
            return LOST
        for i, lane in enumerate(own):
            if lane is not None and lanes[offset + i] is None and operand.shape[i] == shape[offset + i]:
                lanes[offset + i] = lane
    return tuple(lanes)


BLOCK = "block"
"""The lane of an allocation's dim sized by hl.register_block_size: it combines with any tile of
that block lane for lane (the trace's block-size axis)."""


def same_tile(a: Any, b: Any) -> bool:
    """Whether two lanes are one tile's, or two tiles of one loop dim (the trace's one axis)."""
    return a is b or (isinstance(a, Tile) and isinstance(b, Tile) and a.dim_key is not None
                      and a.dim_key is b.dim_key)


def _fits_tile(lane: Any, reference: Any, size: int) -> bool:
    """Whether a dim running over tile `lane` broadcasts against a reference dim (its lane and
    size) as the trace's `unify_axes` lets it: the same tile, a block-size allocation's dim, or
    a size-1 dim of no tile."""
    return same_tile(reference, lane) or reference == BLOCK or (reference is None and size == 1)


def placed_by_tile(value: torch.Tensor, theirs: Lanes | str, shape: Sequence[int]) -> list[int] | None:
    """Helion's broadcast by tile (trace/tile_alignment.py), for eager values: where a dim of
    the lower-rank `value` runs over a tile that right alignment would put against another dim
    of the reference (its lanes `theirs`, its `shape`), the position there each dim of `value`
    takes (each tile where the same tile stands, other dims at the next dim they fit); None where
    torch's right alignment means the same. Raises where no placement exists (the trace's
    broadcast refuses those too)."""
    own = lanes_of(value)
    rank = len(shape)
    if own == LOST or theirs == LOST or not 0 < value.dim() <= rank:
        return None
    offset = rank - value.dim()
    # a size-1 dim broadcasts the same wherever it stands (and its lane may be a guess of
    # `aligned`): only dims of several lanes decide
    if value.dim() == rank:  # nothing to place; two different tiles facing each other never broadcast
        if any(isinstance(lane, Tile) and isinstance(other, Tile) and not same_tile(lane, other)
               and value.size(d) > 1 and shape[d] > 1 for d, (lane, other) in enumerate(zip(own, theirs))):
            raise _not_facing(value, own, shape, theirs)
        return None
    if all(not isinstance(lane, Tile) or value.size(d) == shape[offset + d] == 1
           or _fits_tile(lane, theirs[offset + d], shape[offset + d]) for d, lane in enumerate(own)):
        return None
    positions: list[int] = []
    position = 0
    for d, lane in enumerate(own):
        size = value.size(d)
        if lane is None and size == 1:
            candidates = [position] if position < rank else []
        elif isinstance(lane, Tile):
            candidates = [p for p in range(position, rank) if same_tile(theirs[p], lane)] or \
                [p for p in range(position, rank) if not isinstance(theirs[p], Tile)
                 and _fits_tile(lane, theirs[p], shape[p])]
        else:
            candidates = [p for p in range(position, rank) if not isinstance(theirs[p], Tile)
                          and shape[p] in (size, 1)]
        if not candidates and size == 1 and position < rank:
            candidates = [position]  # one lane broadcasts wherever it stands
        if not candidates:
            raise _not_facing(value, own, shape, theirs)
        positions.append(candidates[0])
        position = candidates[0] + 1
    return positions


def _not_facing(value: torch.Tensor, own: Lanes, shape: Sequence[int], theirs: Lanes) -> exc.ShapeMismatchError:
    def names(lanes: Lanes) -> str:
        return "[" + ", ".join(f"tile {lane.begin}:{lane.end}" if isinstance(lane, Tile) else "-" for lane in lanes) + "]"
    return exc.ShapeMismatchError(
        f"a value of shape {list(value.shape)} (dims over {names(own)}) does not broadcast against one of shape "
        f"{list(shape)} (dims over {names(theirs)}): its tiles do not face the same tiles (the other modes "
        "refuse this too)", location=user_location(),
        hint="operands must have the same tiles in the same positions, or size 1 to broadcast; place dims "
             "explicitly, e.g. b[tile0, None], or permute")


def regrouped(source: Any, shape: Sequence[int]) -> Lanes | str:
    """Lanes of a view of `source` that only adds or drops size-1 dims (unsqueeze, view(b, 1), ...):
    its dims matched in order, a tile's dim kept even when the tile has one element."""
    own = lanes_of(source)
    if own == LOST:
        return LOST
    kept = [(size, lane) for size, lane in zip(source.shape, own) if size != 1 or lane is not None]
    lanes: list[Any] = []
    for size in shape:
        if kept and kept[0][0] == size:
            lanes.append(kept.pop(0)[1])
        elif size == 1:
            lanes.append(None)
        else:
            return LOST
    if kept:
        return LOST
    return tuple(lanes)


def _subscript_lanes(source: Any, index: Any) -> Lanes | str:
    """Lanes of a tile value's view `v[:, None]` / `v[..., None]`, or of constant slices and ints
    of its whole dims (`v[:, :3]`, `v[:, 0]`): a whole dim's lanes stay whole, an int drops its dim."""
    own = lanes_of(source)
    items = list(index) if isinstance(index, tuple) else [index]
    if own == LOST or not all(item is None or item is Ellipsis or isinstance(item, slice)
                              or (isinstance(item, int) and not isinstance(item, bool)) for item in items):
        return LOST
    if any(item is Ellipsis for item in items):
        spot = next(i for i, item in enumerate(items) if item is Ellipsis)
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (source.dim() - consumed)
    lanes, dims = [], iter(own)
    for item in items:
        if item is None:
            lanes.append(None)
            continue
        lane = next(dims, None)
        if lane is not None and item != slice(None):  # part of a tile: not followed
            return LOST
        if isinstance(item, slice):
            lanes.append(lane)
    return tuple(lanes) + tuple(dims)


# ops that move lanes only within whole dims (rearrange.py, sorting.py): a dim keeps its tile where
# its size is unchanged (they refuse tile dims, so a tile dim is never the one moved)
_WHOLE_DIM_MOVES = frozenset({"flip", "roll", "repeat", "torch_tile", "index_select", "narrow", "tensor_split",
                              "argsort", "sort", "topk", "pad"})


def _whole_dim_lanes(name: str, source: torch.Tensor, args: tuple, kwargs: dict, result: torch.Tensor) -> Lanes | str:
    own = lanes_of(source)
    if own == LOST:
        return LOST
    if name == "select":  # drops its dim
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        return tuple(lane for d, lane in enumerate(own) if d != int(dim) % max(source.dim(), 1))
    if name == "mv":
        return (own[0],)
    if name == "outer":
        return (own[0], lanes_of(args[1])[0]) if lanes_of(args[1]) != LOST else LOST
    extra = result.dim() - source.dim()  # repeat/tile may add leading dims
    if extra < 0:
        return LOST
    return (None,) * extra + tuple(lane if result.size(extra + d) == source.size(d) else None
                                   for d, lane in enumerate(own))


def access_mask(tensor: torch.Tensor, index: tuple, mask: Any, what: str) -> tuple[Any, Lanes | str]:
    """(`mask` and the lanes inside every jagged end, the lanes of `tensor[index]`) of a load or store."""
    lanes = index_lanes(tensor, index)
    if lanes == LOST:
        refuse_lost(what)
        return mask, LOST
    jagged = jagged_mask(lanes, what)
    if jagged is None:
        return mask, lanes
    return (jagged if mask is None else torch.as_tensor(mask, device=jagged.device) & jagged), lanes


def index_lanes(tensor: torch.Tensor, index: Any) -> Lanes | str:
    """Lanes of `tensor[index]` (the index as written, with its Tiles):
    a tile's dim runs over it; index tensors' lanes, broadcast, stand where the first one stands."""
    own = lanes_of(tensor)
    if own == LOST:
        return LOST
    items = list(index) if isinstance(index, (tuple, list)) else [index]
    if any(item is Ellipsis for item in items):
        spot = next(i for i, item in enumerate(items) if item is Ellipsis)
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        items[spot:spot + 1] = [slice(None)] * (tensor.dim() - consumed)
    lanes: list[Any] = []
    gathered: list[Any] = []
    spot = None
    dim = 0
    for item in items:
        if item is None:
            lanes.append(None)
            continue
        if isinstance(item, Tile):
            lanes.append(item)
        elif isinstance(item, slice):
            lanes.append(own[dim] if item == slice(None) else None)
        elif isinstance(item, torch.Tensor) and item.dim() > 0:
            gathered.append(item)
            spot = len(lanes) if spot is None else spot
        dim += 1
    if gathered:
        shape = torch.broadcast_shapes(*(item.shape for item in gathered))
        inner = aligned(shape, gathered)
        if inner == LOST:
            return LOST
        lanes[spot:spot] = list(inner)
    return tuple(lanes) + tuple(own[dim:])  # dims the index leaves out are read whole (`x[tile]` of a matrix)


def jagged_mask(lanes: Lanes | str, what: str) -> torch.Tensor | None:
    """True where every jagged tile among `lanes` is below its lane's end (None: no jagged tile)."""
    if lanes == LOST:
        return None
    mask = None
    for position, lane in enumerate(lanes):
        if not isinstance(lane, Tile) or lane.jagged_ends is None:
            continue
        ends = lane.jagged_ends
        placed = _placed_ends(ends, lanes, what, lane)
        index = lane.index.view([-1 if d == position else 1 for d in range(len(lanes))])
        inside = index < placed
        mask = inside if mask is None else mask & inside
    return mask


def _placed_ends(ends: torch.Tensor, lanes: Lanes, what: str, jagged: Tile) -> torch.Tensor:
    """The per-lane ends viewed along the dims of `lanes` their own tiles stand at."""
    own = lanes_of(ends)
    kept = [(size, lane) for size, lane in zip(ends.shape, own if own != LOST else (None,) * ends.dim())
            if size != 1 or lane is not None]
    if own == LOST or any(lane is None for _, lane in kept):
        raise exc.UnsupportedOperationError(
            f"{what}: eager mode cannot tell which tiles the ends of the jagged tile {jagged} run over",
            location=user_location(), hint="compute the ends from loads over the enclosing tiles, e.g. "
                                            "lengths = n[tile_b]; or run the kernel in interpret mode")
    positions = []
    for _, lane in kept:
        found = [i for i, mine in enumerate(lanes) if mine is lane]
        if not found:
            raise exc.InvalidJaggedTileUsage(
                f"{what} uses the jagged tile {jagged} without the tiles its ends are over", location=user_location(),
                hint="index with the enclosing tiles too, e.g. x[tile_b, tile_k]")
        positions.append(found[0])
    squeezed = ends.reshape([size for size, _ in kept])
    order = sorted(range(len(positions)), key=positions.__getitem__)
    squeezed = squeezed.permute(order) if order else squeezed
    view = [1] * len(lanes)
    for rank in order:
        view[positions[rank]] = kept[rank][0]
    return squeezed.reshape(view)


def reduction_identity(kind: str, dtype: torch.dtype) -> Any:
    """The value that never changes a reduction's result (what lanes past a jagged end hold)."""
    if kind == "sum":
        return 0
    largest = kind in ("amin", "argmin")
    if dtype == torch.bool:
        return largest
    if dtype.is_floating_point:
        return float("inf") if largest else float("-inf")
    return torch.iinfo(dtype).max if largest else torch.iinfo(dtype).min


def before_reduction(name: str, args: tuple, kwargs: dict) -> tuple:
    """The arguments of a reduction `name` with lanes past a jagged end taking its identity; a
    reduction the trace builds from others (mean, softmax, ...) over a jagged tile is refused."""
    value = args[0] if args else None
    if (name not in REDUCTIONS and name not in OTHER_REDUCTIONS) or not isinstance(value, torch.Tensor) \
            or value.dim() == 0:
        return args
    dims = reduced_dims(value, args, kwargs)
    if dims is None:
        return args
    if name in REDUCTIONS:
        kind = REDUCTIONS[name]
        return (reduced(value, dims, reduction_identity(kind, value.dtype), f"a {name} reduction"), *args[1:])
    lanes = lanes_of(value)
    if lanes != LOST and any(isinstance(lanes[d], Tile) and lanes[d].jagged_ends is not None for d in dims):
        raise exc.UnsupportedOperationError(
            f"torch.{name} over an hl.jagged_tile dim in eager mode", location=user_location(),
            hint="reduce with sum/amax/amin/argmax/argmin (which leave out lanes past each end), or run the "
                 "kernel in interpret mode")
    return args


def reduced(value: torch.Tensor, dims: Sequence[int], identity: Any, what: str) -> torch.Tensor:
    """`value` with lanes past a jagged end set to the reduction's identity when a reduced dim is
    a jagged tile (they must not count), else `value` itself."""
    lanes = lanes_of(value)
    if lanes == LOST:
        refuse_lost(what)
        return value
    if not any(isinstance(lanes[d], Tile) and lanes[d].jagged_ends is not None for d in dims):
        return value
    inside = jagged_mask(lanes, what)
    kept = torch.where(inside, value, torch.as_tensor(identity, dtype=value.dtype, device=value.device))
    return tag(kept, lanes)


def refuse_lost(what: str) -> None:
    """A jagged loop's load, store or reduction on a value whose dims eager mode lost track of."""
    if getattr(_state, "jagged_depth", 0):
        raise exc.UnsupportedOperationError(
            f"{what} inside an hl.jagged_tile loop: eager mode lost track of which tiles this value's dims run "
            "over, so it cannot leave out the lanes past each end", location=user_location(),
            hint="build the value from tile indices, loads and elementwise ops (v[:, None], unsqueeze, "
                 "permute), or run the kernel in interpret mode")


# the reductions whose identity leaves lanes past a jagged end out (as the trace's
# `_outside_jagged_ends`); "max"/"min" with a dim are amax/amin plus the argmax/argmin
REDUCTIONS = {"sum": "sum", "amax": "amax", "amin": "amin", "argmax": "argmax", "argmin": "argmin",
              "max": "amax", "min": "amin"}
# reductions the trace builds from those (mean, softmax, ...): refused over a jagged tile in eager
OTHER_REDUCTIONS = frozenset({"mean", "softmax", "log_softmax", "var", "std", "logsumexp", "any", "all",
                              "count_nonzero", "prod", "cumsum", "cumprod", "associative_scan", "reduce",
                              "cummax", "cummin", "logcumsumexp", "kthvalue", "median", "nansum", "nanmean",
                              "aminmax", "softmin"})
_PRODUCTS = frozenset({"mm", "addmm", "dot"})
_BROADCASTS = frozenset({"expand", "broadcast_to"})


# where the dim argument sits: after the combine function and the input for hl.associative_scan/reduce,
# after k for torch.kthvalue
_DIM_POSITIONS = {"associative_scan": 2, "reduce": 2, "kthvalue": 2}


def reduced_dims(value: torch.Tensor, args: tuple, kwargs: dict, position: int = 1) -> list[int] | None:
    """The dims a reduction `f(value, dim, keepdim)` reduces (None: not a reduction over dims);
    `position`: where `dim` sits among `args`."""
    dim = kwargs.get("dim", args[position] if len(args) > position else None)
    if isinstance(dim, torch.Tensor):  # torch.max(a, b): elementwise
        return None
    if dim is None:
        return list(range(value.dim()))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return [int(d) % max(value.dim(), 1) for d in dims]


def result_lanes(name: str, args: tuple, kwargs: dict, result: torch.Tensor) -> Lanes | str:
    """Lanes of `result` of the primitive `name` on `args`, by its shape rule's kind."""
    operands = [item for operand in (*args, *kwargs.values())
                for item in (operand if isinstance(operand, (tuple, list)) else (operand,))
                if isinstance(item, torch.Tensor)]
    if not operands or not any(hasattr(operand, _LANES) for operand in operands):
        return (None,) * result.dim()  # nothing runs over a tile (host tensors, numbers)
    source = operands[0]
    if name in REDUCTIONS or name in OTHER_REDUCTIONS:
        dims = reduced_dims(source, args, kwargs, _DIM_POSITIONS.get(name, 1))
        if dims is not None and result.dim() != source.dim():  # keepdim=False: the dims go
            own = lanes_of(source)
            return LOST if own == LOST else tuple(lane for d, lane in enumerate(own) if d not in dims)
        if dims is not None:
            own = lanes_of(source)
            return LOST if own == LOST else tuple(None if d in dims else lane for d, lane in enumerate(own))
    if name == "getitem" and len(args) == 2:
        return _subscript_lanes(source, args[1])
    if name in _WHOLE_DIM_MOVES or name in ("select", "mv", "outer"):
        return _whole_dim_lanes(name, source, args, kwargs, result)
    if name == "unsqueeze":
        own = lanes_of(source)
        dim = int(kwargs.get("dim", args[1] if len(args) > 1 else 0)) % (source.dim() + 1)
        return LOST if own == LOST else (*own[:dim], None, *own[dim:])
    if name in _PERMUTATIONS:
        return _permuted(name, source, args, kwargs)
    if name in _PRODUCTS:
        return _product_lanes(name, args, result)
    if name in _LAYER_FUNCTIONS:
        return _layer_lanes(name, operands, args, kwargs, result)
    broadcast = _broadcast_shape([tuple(operand.shape) for operand in operands])
    if broadcast == tuple(result.shape) or name in _BROADCASTS:
        return aligned(result.shape, operands)
    if len(operands) == 1:
        return regrouped(source, result.shape)
    return LOST if any(lanes_of(operand) != (None,) * operand.dim() for operand in operands) else \
        (None,) * result.dim()


# session 12's layer functions and losses (language/layer_functions.py, losses.py, contractions.py)
_LAYER_FUNCTIONS = frozenset({"linear", "inner", "cosine_similarity", "one_hot", "cross_entropy", "nll_loss",
                              "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss", "kl_div",
                              "binary_cross_entropy_with_logits"})


def _layer_lanes(name: str, operands: list[torch.Tensor], args: tuple, kwargs: dict,
                 result: torch.Tensor) -> Lanes | str:
    """Lanes of a layer function's or loss's result (so that a later torch.rand_like / F.dropout
    finds its tiles): each keeps its operands' lanes on the dims it keeps, whole dims elsewhere."""
    if result.dim() == 0:  # a loss reduced to one value
        return ()
    own = lanes_of(operands[0])
    if own == LOST:
        return LOST
    if name == "linear":  # [..., k] @ weight.T: the weight's rows are a whole dim
        return (*own[:-1], None)[-result.dim():] if result.dim() == operands[0].dim() else own[:-1]
    if name == "inner":  # a's dims but its last, then b's but its last
        theirs = lanes_of(operands[1]) if len(operands) > 1 else LOST
        return LOST if theirs == LOST else (*own[:-1], *theirs[:-1])
    if name == "one_hot":  # the classes: a new whole dim
        return (*own, None)
    if name in ("cross_entropy", "nll_loss"):  # the class dim (the last, or dim 1) goes
        return own[:1] if operands[0].dim() == 2 else ()
    if name == "cosine_similarity":  # dim goes from the operands broadcast together
        shape = _broadcast_shape([tuple(operand.shape) for operand in operands[:2]])
        both = LOST if shape is None else aligned(shape, operands[:2])
        if both == LOST:
            return LOST
        dim = int(kwargs.get("dim", args[2] if len(args) > 2 else 1)) % len(both)
        return tuple(lane for d, lane in enumerate(both) if d != dim)
    broadcast = aligned(result.shape, operands)
    return broadcast if broadcast != LOST and len(broadcast) == result.dim() else LOST


def _broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """torch's broadcast of `shapes` (None where they do not broadcast), without its overhead."""
    rank = max(len(shape) for shape in shapes)
    result = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape, rank - len(shape)):
            if size != result[i]:
                if result[i] != 1 and size != 1:
                    return None
                result[i] = max(result[i], size) if size != 0 and result[i] != 0 else 0
    return tuple(result)


# the views that reorder dims: each must move its dims' tiles with them (a square tile value's
# `.T` keeps its shape, so only the lanes tell `v` from `v.T`)
_PERMUTATIONS = frozenset({"permute", "transpose", "swapaxes", "swapdims", "t", "T", "H", "mT", "mH", "adjoint"})


def _permuted(name: str, source: torch.Tensor, args: tuple, kwargs: dict) -> Lanes | str:
    own = lanes_of(source)
    rank = source.dim()
    if own == LOST or rank < 2:
        return own
    order = list(range(rank))
    if name == "permute":
        dims = kwargs["dims"] if "dims" in kwargs else \
            args[1:] if len(args) > 2 or not isinstance(args[1], (tuple, list)) else args[1]
        order = [int(d) % rank for d in dims]
    elif name in ("T", "H"):  # every dim reversed (the matrix transpose at rank 2)
        order.reverse()
    else:
        if name in ("transpose", "swapaxes", "swapdims"):
            a = kwargs.get("dim0", kwargs.get("axis0", args[1] if len(args) > 1 else None))
            b = kwargs.get("dim1", kwargs.get("axis1", args[2] if len(args) > 2 else None))
            a, b = int(a) % rank, int(b) % rank
        else:  # t (rank 2), mT / mH / adjoint: the last two dims
            a, b = rank - 2, rank - 1
        order[a], order[b] = order[b], order[a]
    return tuple(own[d] for d in order)


def _product_lanes(name: str, args: tuple, result: torch.Tensor) -> Lanes | str:
    """`a @ b` (batched): the batch dims broadcast, then a's rows and b's columns; `addmm`'s
    accumulator aligns with the result."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name == "dot":  # hl.dot(a, b, acc): the accumulator comes last
        accumulator, (a, b) = (tensors[2] if len(tensors) == 3 else None), tensors[:2]
    else:
        accumulator, (a, b) = (tensors[0], tensors[1:3]) if name == "addmm" or len(tensors) == 3 else (None, tensors[:2])
    left, right = lanes_of(a), lanes_of(b)
    if LOST in (left, right):
        return LOST
    if a.dim() < 2 or b.dim() < 2:  # a 1-D operand (matmul): its dim is contracted, the other's remain
        if a.dim() < 2 and b.dim() < 2:
            return ()
        return left[:-1] if b.dim() < 2 else (*right[:-2], right[-1])
    batch: list[Any] = [None] * (result.dim() - 2)
    for operand, own in ((a, left), (b, right)):
        offset = len(batch) - (operand.dim() - 2)
        for i, lane in enumerate(own[:-2]):
            if lane is not None and batch[offset + i] is None:
                batch[offset + i] = lane
    lanes = (*batch, left[-2], right[-1])
    if accumulator is not None:
        extra = aligned(result.shape, [accumulator])
        if extra == LOST:
            return LOST
        lanes = tuple(mine if mine is not None else theirs for mine, theirs in zip(lanes, extra))
    return lanes
