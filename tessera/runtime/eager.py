"""Eager mode: run the kernel function as Python, tile loops iterating real slices.

Eager is the specification every other mode is tested against. It uses the same block sizes a
compiled config would, so tail tiles and block-size-dependent results (`tile.id`, per-block
partial buffers) match compiled runs. Torch ops inside kernels are plain torch ops; products
are computed in fp32 (as a compiled `tl.dot` accumulates) so CPU fp16/bf16 and mixed-dtype
products work.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from tessera import exc
from tessera.config import Config
from tessera.frontend.block_slots import BlockSlotTable
from tessera.location import user_location
import tessera.language  # noqa: F401  (defines the primitives whose eager rules _OVERRIDES reads)
from tessera.ir.primitive import ALL_PRIMITIVES, TORCH_FUNCTIONS, Primitive
from tessera.ir.tile_range import TileRange, reversed_range_error, static_bounds
from tessera.language import eager_write_back
from tessera.language.eager_indexing import (cut_padded_rows, holds_memory_rows, is_padded_row, is_tile_value,
                                             lane_tail_marks,
                                             mark_memory_rows, mark_tile_values)
from tessera.language.elementwise import ELEMENTWISE_OPS
from tessera.language.formulas import LANE_WISE_FUNCTIONS
from tessera.language.rng import LaunchSeeds
from tessera.ir.tunables import tunable_value
from tessera.language import eager_lanes
from tessera.language.constexpr import BlockSizeInt
from tessera.language.tail_fill import OTHER_VALUE, past_end_fill
from tessera.language.tile import LANES_ATTRIBUTE, Tile
from tessera.ir import interpreter
from tessera.ir.aliasing import AccessLog
from tessera.trace.block_sizes import choose_block_sizes
from tessera.trace.proxy import TileValue, out_argument_error, unsupported_operation


EAGER_MAX_REGISTERED_BLOCK = 1024
# hl.load / hl.store / hl.atomic_* in host code (Helion's reference mode runs them there): an
# eager access of a whole host tensor, in every mode, as the host code's torch ops are
HOST_MEMORY_PRIMITIVES = frozenset({"load", "store", "atomic"})


class EagerInterpreter:
    """Runs primitives by their eager rules and iterates tile loops as real tiles."""

    def __init__(self, slots: BlockSlotTable, config: Config, device: torch.device,
                 roomy_registered_blocks: bool = False) -> None:
        self.slots = slots
        self.config = config
        self.device = device
        # a kernel run eagerly without a Config's block sizes: hl.register_block_size gives the
        # widest block that fits (each tile costs Python time per op; the result does not change)
        self.roomy_registered_blocks = roomy_registered_blocks
        self.loop_depth = 0
        self.primitive_depth = 0  # > 0 while a primitive's eager rule runs (its torch calls are plain torch)
        self.open_tiles: list[tuple] = []  # per open loop (outermost first), its current tiles
        self.launch_seeds: LaunchSeeds | None = None  # seeds of torch.rand_like & co. in the open top-level loop
        self.launch_accesses: AccessLog | None = None  # the tensors the open top-level loop read and wrote
        self.arguments: dict[int, tuple[str, torch.Tensor]] = {}  # id -> (name, tensor) of the tensor arguments

    def process(self, primitive: Primitive, args: tuple, params: dict) -> Any:
        if primitive.device_only and self.loop_depth == 0 and primitive.name not in HOST_MEMORY_PRIMITIVES:
            raise exc.NotInTileLoopError(
                interpreter.public_name(primitive.name), location=user_location(),
                hint="move it into a `for tile in hl.tile(...)` loop, or use the torch "
                     "equivalent on the host (torch.zeros, tensor indexing, ...)")
        assert primitive.eager_rule is not None, f"{primitive} has no eager rule"
        tracking = self.loop_depth and eager_lanes.is_tracking()
        if tracking and eager_lanes.jagged_allowed():
            args = eager_lanes.before_reduction(primitive.name, args, params)
        self.primitive_depth += 1
        try:
            result = primitive.eager_rule(*args, **params)
        finally:
            self.primitive_depth -= 1
        if tracking:
            _tag_lanes(primitive.name, args, params, result)
        return mark_tile_values(result) if self.loop_depth else result

    def block_sizes(self, site: tuple[str, int, int] | None, count: int,
                    bounds: list[tuple[int, int | None]]) -> list[int]:
        return choose_block_sizes(self.slots, self.config, site, count, bounds)

    def registered_block_size(self, site: tuple[str, int, int] | None, low: int, high: int | None) -> int:
        if self.roomy_registered_blocks and self.config.get("block_sizes") is None and high is not None:
            # the widest block the bounds allow (Helion's: at most max rounded up to a power of two)
            widest = min(_power_of_two_at_least(high), EAGER_MAX_REGISTERED_BLOCK)
            return max(_power_of_two_at_least(low), widest)
        return self.block_sizes(site, 1, [(low, high)])[0]

    def tunable(self, name: str, fragment: Any) -> Any:
        """`hl.register_tunable`: the Config's value, else the fragment's default."""
        return tunable_value(self.config, name, fragment)

    def _resolved_blocks(self, tile_range: TileRange) -> list[int]:
        tunable = [i for i, block in enumerate(tile_range.block_sizes) if block is None]
        blocks = list(tile_range.block_sizes)
        if tunable:
            bounds = static_bounds(tile_range)
            chosen = self.block_sizes(tile_range.site, len(tunable), [bounds[i] for i in tunable])
            for i, block in zip(tunable, chosen):
                blocks[i] = block
        return [int(block) for block in blocks]

    def iterate_tiles(self, tile_range: TileRange) -> Iterator[Any]:
        ends = tile_range.jagged_ends
        if ends is not None and not eager_lanes.jagged_allowed():
            # the lanes of values are followed only for kernels whose own body calls hl.jagged_tile
            raise exc.UnsupportedOperationError(
                "hl.jagged_tile in a function the kernel calls runs in interpret and compiled modes only",
                location=tile_range.location, hint="call hl.jagged_tile in the kernel's own body")
        blocks = self._resolved_blocks(tile_range)
        per_dim = []
        for begin, end, block in zip(tile_range.begins, tile_range.ends, blocks):
            # a top-level loop's host bounds (as the tracer checks them); device-loaded bounds and
            # inner loops (bounds from tiles) run no iterations when reversed, as when compiled
            on_host = self.loop_depth == 0 and not isinstance(begin, torch.Tensor) and not isinstance(end, torch.Tensor)
            begin, end = int(begin), int(end)
            if on_host and begin > end:
                raise reversed_range_error(begin, end)
            count = max(-(-(end - begin) // block), 0)
            dim_key = object()
            per_dim.append([Tile(b, min(b + block, end), block, i, count, self.device, begin, end, ends, dim_key)
                            for i, b in enumerate(range(begin, end, block))])
        loop = self._loop(per_dim, tile_range.multi_dim)
        return loop if ends is None else self._jagged(loop)

    @staticmethod
    def _jagged(loop: Iterator[Any]) -> Iterator[Any]:
        """An hl.jagged_tile loop: loads and stores in it on values whose lanes are lost are refused."""
        with eager_lanes.inside_jagged_loop():
            yield from loop

    def iterate_grid(self, tile_range: TileRange) -> Iterator[Any]:
        per_dim = [list(range(int(b), int(e), int(s)))
                   for b, e, s in zip(tile_range.begins, tile_range.ends, tile_range.block_sizes)]
        return self._loop(per_dim, tile_range.multi_dim)

    def _loop(self, per_dim: list[list[Any]], multi_dim: bool) -> Iterator[Any]:
        # Row-major order: the last dimension varies fastest, like nested Python loops.
        if self.loop_depth == 0:  # a top-level loop: a launch, drawing its own seeds
            self.launch_seeds = LaunchSeeds(self.device)
            self.launch_accesses = AccessLog(self.arguments)
        self.loop_depth += 1
        self.open_tiles.append(())
        try:
            for combo in itertools.product(*per_dim):
                self.open_tiles[-1] = combo
                yield combo if multi_dim else combo[0]
        finally:
            self.open_tiles.pop()
            self.loop_depth -= 1


def _eager_overrides() -> dict[Callable[..., Any], Callable[..., Any]]:
    """torch callables whose meaning inside a kernel differs from torch's: those of primitives
    whose eager rule is not the torch function itself (tiles index like slices, with bounds
    checks; products accumulate in fp32 with PyTorch's dtype promotion)."""
    return {function: primitive.eager_rule for primitive in ALL_PRIMITIVES.values()
            for function in primitive.torch_functions
            if primitive.eager_rule is not None and primitive.eager_rule is not primitive.torch_functions[0]}


_OVERRIDES = _eager_overrides()


def _reads_tile_value(args: tuple, kwargs: dict) -> bool:
    """Whether an operand (or an element of a tuple/list operand) is a tile value."""
    return any(is_tile_value(item) for operand in (*args, *kwargs.values())
               for item in (operand if isinstance(operand, (tuple, list)) else (operand,)))


def _makes_tile_value(func: Callable[..., Any], args: tuple, kwargs: dict, result: Any) -> bool:
    """Whether a torch call inside a tile loop computed a tile value. A view of memory
    (`x[a:b]`, `x[i]`, `x.reshape(m, k)`, even with sizes loaded on the device) is memory still,
    as it is when traced; a load (`x[tile]`, `x[index_tensor]`) and anything computed from a
    tile value are tile values."""
    source = args[0] if args else None
    if (isinstance(source, torch.Tensor) and not is_tile_value(source) and isinstance(result, torch.Tensor)
            and result.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()):
        return False
    return func is torch.Tensor.__getitem__ or _reads_tile_value(args, kwargs)


# torch's messages, by the Tessera error class the trace raises for the same mistake
_TORCH_ERROR_CLASSES: tuple[tuple[tuple[str, ...], type[exc.TesseraError]], ...] = (
    (("must match the size", "cannot be multiplied", "shape", "size mismatch", "expanded size"), exc.ShapeMismatchError),
    (("not implemented for", "expected scalar type", "dtype", "result type"), exc.DtypeError),
    (("index", "out of bounds", "out of range"), exc.IndexingError),
)


def _located_torch_error(func: Callable[..., Any], error: Exception) -> exc.TesseraError:
    """A torch error inside a tile loop in eager mode, as the TesseraError at the user's line that
    the other modes raise for the same mistake (else TorchOperationError), torch's message kept."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
    lowered = message.lower()
    kind = next((cls for words, cls in _TORCH_ERROR_CLASSES if any(w in lowered for w in words)),
                exc.TorchOperationError)
    return kind(f"torch.{name} failed in eager mode: {message}", location=user_location(),
                hint="the other modes compute the same op; check the operands' shapes, dtypes and values at this line")


# Tensor callables eager mode lets through on tile values without a primitive: what a tile value
# has in every mode (its shape, dtype, ...: TileValue's own attributes) and, for debugging, what
# reads its numbers (print, .item(), ...; the trace refuses those with a located error).
_TILE_VALUE_ATTRIBUTES = frozenset(name for name in dir(TileValue) if not name.startswith("_")) | {
    "item", "tolist", "numpy", "__array__", "cpu", "detach", "numel", "is_floating_point", "element_size",
    "dim", "size", "stride", "is_contiguous", "data_ptr", "untyped_storage", "storage_offset"}


@functools.cache
def _primitive_names() -> frozenset[str]:
    return frozenset(getattr(function, "__name__", "") for function in TORCH_FUNCTIONS)


def _refused_on_tile_values(func: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
    """Whether the trace refuses `func` on these operands: a torch callable with no primitive
    applied to a tile value."""
    # operators (`v == 0`, `v % 3`: torch runs them as `Tensor.remainder`, `v *= 2` as
    # `Tensor.mul_`): the trace maps them through its own tables to the primitive of the same
    # name (an augmented assignment rebinds), or refuses them
    name = getattr(func, "__name__", "").removesuffix("_")
    if func in TORCH_FUNCTIONS or name in _TILE_VALUE_ATTRIBUTES or name.startswith("__") or name in _primitive_names() \
            or name in ("zero", "fill", "copy"):  # v.zero_() / v.fill_(x) / v.copy_(w): zeros_like / full_like / w, rebound
        return False
    return _reads_tile_value(args, kwargs)


# torch factories of constants that tile loops may call without naming a device (the shaped ones,
# torch.zeros/full/arange ..., are primitives whose eager rules allocate on the kernel's device)
_CONSTANT_FACTORIES = frozenset({torch.tensor, torch.as_tensor, torch.linspace, torch.eye, torch.randint})


class EagerTorchMode(TorchFunctionMode):
    """Routes the torch calls listed in `_OVERRIDES` to their eager-mode meaning, and marks the
    tile values computed inside tile loops."""

    def __init__(self, eager: EagerInterpreter) -> None:
        super().__init__()
        self.eager = eager

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.eager.primitive_depth:  # inside an eager rule: its own torch calls mean plain torch
            return func(*args, **kwargs)
        if self.eager.loop_depth and func in _CONSTANT_FACTORIES and "device" not in kwargs:
            # a constant made in a tile loop (`torch.tensor([2, 0])`) lives where the kernel runs, as in
            # generated code: on a GPU it otherwise met the tile values on the CPU (a raw device error)
            kwargs = {**kwargs, "device": self.eager.device}
        override = _OVERRIDES.get(func)
        if override is None and self.eager.loop_depth and _refused_on_tile_values(func, args, kwargs):
            raise unsupported_operation(func)  # what the trace raises: eager is no looser
        if self.eager.loop_depth and kwargs.get("out") is not None and func in TORCH_FUNCTIONS:
            raise out_argument_error(func)
        tracking = self.eager.loop_depth and eager_lanes.is_tracking()
        if tracking:
            name = _primitive_name(func)
            if eager_lanes.jagged_allowed():
                args = eager_lanes.before_reduction(name, args, kwargs)
        elementwise = self.eager.loop_depth and _elementwise_name(func) in _ELEMENTWISE_NAMES
        if tracking and (elementwise or func is torch.Tensor.expand_as):
            args = _aligned_by_tile(func, args)
        original = args
        # (only ops that combine lane for lane carry tail marks: a view moves dims)
        tails = elementwise and tail_marks(args)
        if tails:
            args = fit_to_block_sizes(func, args, tails)
        try:
            result = override(*args, **kwargs) if override is not None else func(*args, **kwargs)
            if tails:
                result = original[0] if result is args[0] and args[0] is not original[0] else result
                mark_tails(result, tails)
        except (RuntimeError, TypeError, ValueError, IndexError, ArithmeticError) as error:
            if not self.eager.loop_depth or isinstance(error, exc.TesseraError):
                raise  # host code is plain Python: its torch errors are the user's own
            fitted = fit_padded_rows(func, args) or fit_tail_reshape(func, args)
            if fitted is None:
                raise _located_torch_error(func, error) from error
            result = self.__torch_function__(func, types, fitted, kwargs)
            return args[0] if result is fitted[0] and fitted[0] is not args[0] else result  # in place: the whole
        if tracking:
            _tag_lanes(name, args, kwargs, result)
        if self.eager.loop_depth and isinstance(result, torch.Tensor):
            _carry_memory_rows(args, result)
        if self.eager.loop_depth and _makes_tile_value(func, args, kwargs, result):
            mark_tile_values(result)
        if func is torch.where and len(args) == 3 and not kwargs and self.eager.loop_depth:
            eager_write_back.note_where(result, *args)
        return result


def _carry_memory_rows(args: tuple, result: torch.Tensor) -> None:
    """A result of the shape of an operand of memory rows holds real lanes too (`v.to(dtype)`, `v * 2`)."""
    if any(holds_memory_rows(a) and a.shape == result.shape for a in args if isinstance(a, torch.Tensor)):
        mark_memory_rows(result)


def _primitive_name(func: Callable[..., Any]) -> str:
    primitive = TORCH_FUNCTIONS.get(func)
    if primitive is not None:
        return primitive.name
    descriptor = getattr(func, "__self__", None)  # a property read (`v.T`, `v.mT`) arrives as its getter
    if type(descriptor).__name__ == "getset_descriptor":
        return descriptor.__name__
    return getattr(func, "__name__", "").removesuffix("_")


def _aligned_by_tile(func: Callable[..., Any], args: tuple) -> tuple:
    """The operands of an elementwise op with Helion's broadcast by tile applied as the trace
    applies it (`a[t0, t1] + b[t0]`: `b` stands along t0), where torch's right alignment would put
    a tile against another dim (eager_lanes.placed_by_tile)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if len(tensors) < 2:
        return args
    reference = max(tensors, key=lambda t: t.dim())  # the first of the highest rank
    in_place = getattr(func, "__name__", "").endswith("_") or getattr(func, "__name__", "").startswith("__i")
    aligned = []
    for number, arg in enumerate(args):
        if isinstance(arg, torch.Tensor) and arg is not reference and not (in_place and number == 0):
            positions = eager_lanes.placed_by_tile(arg, eager_lanes.lanes_of(reference), reference.shape)
            if positions is not None:
                arg = placed_dims(arg, positions, reference.dim())
        aligned.append(arg)
    return tuple(aligned)


def placed_dims(value: torch.Tensor, positions: list[int], rank: int) -> torch.Tensor:
    """`value` viewed with size-1 dims inserted so that its dim d stands at `positions[d]` of
    `rank` dims, its lanes, tail marks and tile-value mark following."""
    own = eager_lanes.lanes_of(value)
    shape, lanes = [1] * rank, [None] * rank
    for d, position in enumerate(positions):
        shape[position], lanes[position] = value.size(d), own[d]
    placed = value.reshape(shape)
    tails = getattr(value, _TAILS, None)
    if tails:
        setattr(placed, _TAILS, {rank - positions[value.dim() - p]: t for p, t in tails.items()})
    eager_lanes.tag(placed, tuple(lanes))
    return mark_tile_values(placed) if is_tile_value(value) else placed


def _tag_lanes(name: str, args: tuple, kwargs: dict, result: Any) -> None:
    """Record which tiles the dims of a result run over (kernels with hl.jagged_tile only)."""
    for item in (result if isinstance(result, (tuple, list)) else (result,)):
        if isinstance(item, torch.Tensor) and not hasattr(item, LANES_ATTRIBUTE):
            if name == "full":  # hl.zeros/hl.full([tile_b, block]): the tiles (and block sizes) of the shape
                lanes = tuple(d if isinstance(d, Tile) else eager_lanes.BLOCK if isinstance(d, BlockSizeInt) else None
                              for d in args[0])
            else:
                try:
                    lanes = eager_lanes.result_lanes(name, args, kwargs, item)
                except (ValueError, IndexError, TypeError):  # operands by keyword, odd arities: not followed
                    lanes = eager_lanes.LOST
            eager_lanes.tag(item, lanes)


def fit_to_block_sizes(func: Callable[..., Any], args: tuple, tails: dict[int, tuple[int, int, int]]) -> tuple:
    """The operands of an op that combines a tail tile's values (length L, marked by `tail_marks`)
    with a register_block_size allocation (length B, the tile's block size), made to fit as the
    compiled kernel combines them lane for lane: an inner loop's tile is padded with zeros to B
    (its lanes past the loop's end join the allocation as 0), the allocation is cut to a top-level
    tile's L (the launch masks the lanes past its end). Other shapes are left to torch."""
    targets: dict[int, int] = {}  # position from the right -> the length the operands take there
    for position, (block, length, depth) in tails.items():
        if any(isinstance(a, torch.Tensor) and a.dim() >= position and a.size(-position) == block
               and position not in own_tail_marks(a) for a in args):
            targets[position] = block if depth else length
    if not targets:
        return args
    in_place = getattr(func, "__name__", "").endswith("_") or getattr(func, "__name__", "").startswith("__i")
    name = _elementwise_name(func)
    # torch.Tensor.where(x, condition, y): the operands in torch.where's order
    roles = (1, 0, 2) if func is torch.Tensor.where else range(len(args))
    fitted = []
    for number, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            role = roles[number] if number < len(roles) else number
            fill = past_end_fill(name, role, arg.dtype)
            if fill is OTHER_VALUE:
                other = args[roles.index(3 - role)] if func is torch.Tensor.where else args[3 - role]
                fill = other
            resized = _resized(arg, targets, fill)
            if resized is not arg and in_place and number == 0 and resized._base is None:
                return args  # the updated tensor cannot grow: torch's error says so
            arg = mark_tile_values(resized) if is_tile_value(arg) else resized
        fitted.append(arg)
    return tuple(fitted)


def fit_padded_rows(func: Callable[..., Any], args: tuple) -> tuple | None:
    """The operands of an elementwise op whose sizes differ only where one is a row of n lanes and
    another that row padded to the next power of two (`hl.zeros([tile, next_power_of_2(n)])`),
    the padded ones cut to n as the compiled code masks them; None when that is not the case."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if _elementwise_name(func) not in _ELEMENTWISE_NAMES or len(tensors) < 2:
        return None
    rows: dict[int, int] = {}  # position from the right -> the row's length
    for position in range(1, max(t.dim() for t in tensors) + 1):
        sizes = {t.size(-position) for t in tensors if t.dim() >= position} - {1}
        if len(sizes) == 2 and is_padded_row(max(sizes), min(sizes)):
            rows[position] = min(sizes)
        elif len(sizes) > 1:
            return None
    if not rows:
        return None
    fitted = tuple(cut_padded_rows(a, [rows.get(a.dim() - d, a.size(d)) for d in range(a.dim())])
                   if isinstance(a, torch.Tensor) else a for a in args)
    return None if all(f is a for f, a in zip(fitted, args)) else fitted  # only memory rows: nothing to cut


_RESHAPES = frozenset({torch.Tensor.reshape, torch.Tensor.view, torch.reshape})


def fit_tail_reshape(func: Callable[..., Any], args: tuple) -> tuple | None:
    """`v.reshape([tile.block_size, n])` of a tail tile's value (fewer rows than the block), as the
    compiled code reshapes the whole block: the size that names the block is the tile's length
    here. None when the value has no tail dim the sizes name by its block."""
    if func not in _RESHAPES or not args or not isinstance(args[0], torch.Tensor):
        return None
    marks = getattr(args[0], _TAILS, None)
    sizes = list(args[1]) if len(args) == 2 and isinstance(args[1], (tuple, list, torch.Size)) else list(args[1:])
    if not marks or len(sizes) != args[0].dim():
        return None
    fitted = [marks[len(sizes) - d][1] if len(sizes) - d in marks and size == marks[len(sizes) - d][0] else size
              for d, size in enumerate(sizes)]
    return None if fitted == sizes else (args[0], fitted)


# the ops that combine operands lane for lane (their in-place and operator spellings included)
_ELEMENTWISE_NAMES = frozenset(function.__name__ for op in ELEMENTWISE_OPS for function in op.torch_functions) \
    | {"truediv", "logical_and", "logical_or", "logical_xor", "clamp", "lerp"} \
    | {function.__name__ for function in LANE_WISE_FUNCTIONS}


def _elementwise_name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", "")
    if name.startswith("__"):  # __iadd__ -> add, __radd__ -> add
        name = name.strip("_").removeprefix("i").removeprefix("r")
    return name.removesuffix("_")


# eager tile values of a tail tile (fewer elements than the block) remember, per dim counted from
# the right, (block size, length, loop depth): what `fit_to_block_sizes` needs to tell them from
# size-1 dims that broadcast
_TAILS = "_tessera_tails"


def tail_marks(args: tuple) -> dict[int, tuple[int, int, int]]:
    """The tail-tile dims of the tensor operands (merged), empty when none has any."""
    marks: dict[int, tuple[int, int, int]] = {}
    for arg in args:
        if isinstance(arg, torch.Tensor):
            marks.update(own_tail_marks(arg))
    return marks


def own_tail_marks(value: torch.Tensor) -> dict[int, tuple[int, int, int]]:
    """A tensor's tail marks: those a load by a tile set, else those its lanes tell."""
    return getattr(value, _TAILS, None) or lane_tail_marks(value)


def mark_tails(result: Any, tails: dict[int, tuple[int, int, int]]) -> None:
    """Carry the tail marks to a result whose dims there still have the tile's length."""
    if isinstance(result, torch.Tensor):
        kept = {p: t for p, t in tails.items() if result.dim() >= p and result.size(-p) == t[1]}
        if kept:
            setattr(result, _TAILS, kept)


def _resized(tensor: torch.Tensor, targets: dict[int, int], fill: Any = 0) -> torch.Tensor:
    """`tensor` cut or padded to the `targets` lengths; padding takes `fill` (language/tail_fill.py:
    the op's identity, or the lanes there of where's other value)."""
    marked = own_tail_marks(tensor)
    for position, length in targets.items():
        if tensor.dim() < position or tensor.size(-position) == length \
                or tensor.size(-position) == 1 and position not in marked:  # a dim that broadcasts
            continue
        dim = tensor.dim() - position
        if tensor.size(dim) > length:
            tensor = tensor.narrow(dim, 0, length)
            continue
        shape = list(tensor.shape)
        shape[dim] = length - tensor.size(dim)
        if isinstance(fill, torch.Tensor) and position in own_tail_marks(fill):
            fill = 0  # where's other value is a tail tile's too: no lanes of its own there
        if isinstance(fill, torch.Tensor):
            padding = fill.to(tensor.dtype)
            if padding.dim() >= position and padding.size(-position) == length:
                padding = padding.narrow(padding.dim() - position, tensor.size(dim), shape[dim])
            padded = list(torch.broadcast_shapes(shape, padding.shape))
            whole = list(padded)
            whole[-position] = tensor.size(dim)
            tensor = torch.cat([tensor.expand(whole), padding.expand(padded)], len(padded) - position)
        else:
            tensor = torch.cat([tensor, tensor.new_full(shape, fill)], dim)
    return tensor


def _tensor_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[int, tuple[str, torch.Tensor]]:
    """id -> (parameter name, tensor) of the call's tensor arguments (elements of list ones too)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"argument {i}": value for i, value in enumerate(args)} | kwargs
    found: dict[int, tuple[str, torch.Tensor]] = {}
    for name, value in bound.items():
        items = enumerate(value) if isinstance(value, (list, tuple)) else ((None, value),)
        for index, item in items:
            if isinstance(item, torch.Tensor):
                found[id(item)] = (name if index is None else f"{name}[{index}]", item)
    return found


def _power_of_two_at_least(value: int) -> int:
    return 1 << max(int(value) - 1, 0).bit_length()


def run_eager(fn: Callable[..., Any], args: tuple, kwargs: dict, slots: BlockSlotTable,
              config: Config, device: torch.device, track_lanes: bool = False) -> Any:
    """Call the kernel function in eager mode; `track_lanes` (kernels that call hl.jagged_tile)
    follows which tiles each value's dims run over (eager_lanes.py)."""
    eager = EagerInterpreter(slots, config, device, roomy_registered_blocks=True)
    eager.arguments = _tensor_arguments(fn, args, kwargs)
    with interpreter.activate(eager), EagerTorchMode(eager), eager_lanes.tracking(track_lanes), \
            _one_cpu_thread(device):
        return fn(*args, **kwargs)


@contextlib.contextmanager
def _one_cpu_thread(device: torch.device) -> Iterator[None]:
    """Run a CPU call's torch ops on one thread. Eager mode's ops are tile-sized: splitting one
    over threads gains nothing, and on a machine whose cores are busy a small multi-threaded
    matmul waits for them (17 ms instead of 12 us for 64x64 @ 64x32, measured). The caller's
    thread count is restored after the call."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
