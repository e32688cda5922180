"""The tracer: runs a kernel body once on proxies and records tile IR.

It is the active interpreter while a body runs, so `hl.` primitives reach `process`, and the
rewritten loops reach `launch_body` / `device_loop`. Every equality or bound the trace relies
on goes through the symbol table as a guard.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Iterator

import sympy
import torch

from tessera import exc
from tessera.config import DEFAULT_ROW_CHUNK, ONE_BLOCK_ROW_LIMIT, Config, reduction_loop_of
from tessera.frontend.block_slots import BlockSlotTable
from tessera.location import user_location
from tessera.ir.graph import UNIT, Axis, Block, Node
from tessera.ir.primitive import Primitive
from tessera.ir.tile_range import TileRange, static_bounds
from tessera.trace.block_sizes import choose_block_sizes
from tessera.ir.tunables import TunableDim
from tessera.thread_state import ThreadStack
from tessera.trace.proxy import TensorProxy, TileProxy, TileValue
from tessera.trace.symbols import SymbolTable

_current = ThreadStack()  # of Tracer; one per thread


def current_tracer() -> Tracer:
    if not _current.items:
        raise exc.TesseraError("internal error: no kernel is being traced")
    return _current.items[-1]


def is_constant(value: Any) -> bool:
    return isinstance(value, (bool, int, float, sympy.Basic))


# What the autotuner assumes for a dimension whose extent is loaded inside the kernel (a
# modest guess: block sizes picked from it stay small enough for any group or row).
DATA_DEPENDENT_EXTENT = 64


def next_power_of_two(value: int) -> int:
    return 1 if value <= 1 else 1 << (int(value) - 1).bit_length()


class Tracer:
    """Records the body of one top-level tile loop as a `Block` of IR nodes."""

    def __init__(self, symbols: SymbolTable, slots: BlockSlotTable, config: Config) -> None:
        self.symbols = symbols
        self.slots = slots
        self.config = config
        self.root = Block()
        self._blocks: list[Block] = [self.root]
        self._names = 0
        self.launch_axes: list[Axis] = []
        self.grid_dims: list[tuple[sympy.Expr, sympy.Expr, int]] = []  # (begin, end, block) per program dim
        self._full_axes: dict[Any, Axis] = {}
        self._axis_alias: dict[Axis, Axis] = {}
        self.loop_depth = 1
        self.dot_precision = "ieee"
        self.interpret = False
        self.int64_indexing = False
        self.dot_axes: set[Axis] = set()
        self.predicate: Node | None = None  # condition of the device `if` branch being traced
        self._tunable_axes: list[tuple[int, Axis, str]] = []  # (block_sizes index, axis, role)
        self.launch_index = 0  # which top-level tile loop this is (source order), for per-loop Config keys
        self.looped_row: Axis | None = None  # the whole-row axis processed in chunks (reduction_loops)
        self._row_auto = False  # looped because it is long, not because the Config said so

    # -- interpreter protocol -------------------------------------------------------------
    def process(self, primitive: Primitive, args: tuple, params: dict) -> Any:
        rule = primitive.trace_rule
        if rule is None:
            raise exc.UnsupportedOperationError(f"hl.{primitive.name} has no compiled lowering yet",
                                                location=user_location(), hint="run this kernel with mode='eager'")
        return rule(self, *args, **params)

    def iterate_tiles(self, tile_range: TileRange) -> Iterator[Any]:
        raise exc.UnsupportedSyntaxError(
            "this hl.tile loop was not recognized by Tessera's rewrite", location=user_location(),
            hint="write tile loops as `for ... in hl.tile(...)` directly in the kernel function")

    iterate_grid = iterate_tiles

    def block_sizes(self, site: Any, count: int, bounds: list[tuple[int, int | None]]) -> list[int]:
        return choose_block_sizes(self.slots, self.config, site, count, bounds)

    # -- building nodes ----------------------------------------------------------------------
    def emit(self, op: str, inputs: list[Any], shape: tuple[Axis, ...], dtype: torch.dtype | None,
             **params: Any) -> TileValue:
        if self.predicate is not None and op in ("load", "store"):
            # inside a device `if`: memory accesses happen only where the branch is taken
            position = 0 if op == "load" else 1
            inputs = list(inputs)
            inputs[position] = self._and_predicate(inputs[position])
        for access in params.get("accesses", ()):
            if access.axis is not None:  # like the shape: the index vector of the surviving axis
                access.axis = self.canonical_axis(access.axis)
        node = Node(op, inputs, tuple(self.canonical_axis(a) for a in shape), dtype, params, user_location(),
                    name=f"v{self._names}")
        self._names += 1
        self._blocks[-1].nodes.append(node)
        return TileValue(node)

    def canonical_axis(self, axis: Axis) -> Axis:
        while axis in self._axis_alias:
            axis = self._axis_alias[axis]
        return axis

    def symbolic_value(self, expr: sympy.Basic) -> TileValue:
        """A 0-d device value computed from a symbolic expression over loop variables and loaded
        scalars (e.g. `tile.end - tile.begin > 2` on a runtime-bounded tile)."""
        dtype = torch.bool if isinstance(expr, (sympy.Rel, sympy.logic.boolalg.Boolean)) else torch.int32
        return self.emit("symbolic", [], (), dtype, expr=expr)

    def tile_index(self, axis: Axis) -> TileValue:
        return self.emit("tile_index", [], (axis,), torch.int32, axis=axis)

    def full_axes(self) -> list[Axis]:
        # aliased axes too: nodes traced before the unification still name them
        return list(self._full_axes.values())

    def full_axis(self, extent: Any) -> Axis:
        """The axis of a whole dimension read with `:`: one block (the next power of two), or for
        the loop's first whole dimension under `reduction_loops`, chunks (see ir/rolling.py)."""
        extent = self.symbols.canonical(extent)
        if extent in self._full_axes:
            return self._full_axes[extent]
        name = f"r{len(self._full_axes)}"
        actual = self.symbols.evaluate(extent)
        chunk = self._row_chunk(extent, actual) if not self._full_axes else None
        if chunk is not None:
            # any length works in chunks: the loop bound is the runtime extent, no bucket guard
            axis = Axis(name, sympy.Symbol(f"chunk_{name}", integer=True), extent, chunk,
                        needs_mask=not (sympy.Mod(extent, chunk) == 0))
            self.looped_row = axis
            self._full_axes[extent] = axis
            return axis
        block = next_power_of_two(actual)
        self._guard_block_bucket(extent, block)
        axis = Axis(name, sympy.Integer(0), extent, block, needs_mask=not (sympy.Integer(block) == extent))
        self._full_axes[extent] = axis
        return axis

    def _guard_block_bucket(self, extent: Any, block: int) -> None:
        """A whole dim held in one block of `block` lanes: the block is baked into the code, so the
        variant is reused only for extents in its power-of-two bucket."""
        if isinstance(extent, sympy.Basic) and not extent.is_Integer:
            self.symbols.guard(sympy.And(extent <= block, extent > block // 2) if block > 1 else sympy.Le(extent, 1),
                               f"whole dimension of size {extent} fits block {block}")

    def _row_chunk(self, extent: Any, actual: int) -> int | None:
        """The chunk of this loop's first whole row, or None to hold it in one block."""
        chunk = reduction_loop_of(self.config, self.launch_index)
        self._row_auto = chunk == "auto"
        if chunk != "auto":
            return chunk
        long_row = sympy.Gt(extent, ONE_BLOCK_ROW_LIMIT)
        if isinstance(extent, sympy.Basic) and not extent.is_Integer:
            self.symbols.guard(long_row if actual > ONE_BLOCK_ROW_LIMIT else sympy.Not(long_row),
                               f"whole dimension of size {extent} is {'' if actual > ONE_BLOCK_ROW_LIMIT else 'not '}"
                               f"longer than {ONE_BLOCK_ROW_LIMIT} (looped in chunks)")
        return DEFAULT_ROW_CHUNK if actual > ONE_BLOCK_ROW_LIMIT else None

    def settle_row_loop(self) -> None:
        """A row looped only because it is long (no `reduction_loops` entry) whose uses cannot
        be split into passes goes back to one block; an explicit entry is left to fail loudly."""
        from tessera.ir.rolling import why_not_loopable
        if self.looped_row is None or not self._row_auto or why_not_loopable(self.root, self.looped_axes()) is None:
            return
        extent = self.looped_row.end
        block = next_power_of_two(self.symbols.evaluate(extent))
        self._guard_block_bucket(extent, block)
        for axis in self.looped_axes():  # axes are shared by reference: every node follows
            axis.begin, axis.block, axis.needs_mask = sympy.Integer(0), block, not (sympy.Integer(block) == extent)
        self.looped_row = None

    def looped_axes(self) -> set[Axis]:
        """The looped row's axis and the whole-dim axes unified with it."""
        return set() if self.looped_row is None else self._row_axes(self.looped_row)

    def _row_axes(self, row: Axis) -> set[Axis]:
        """`row` and the whole-dim axes broadcasting unified with it."""
        return {axis for axis in self._full_axes.values() if self.canonical_axis(axis) is row}

    def loopable_row_length(self) -> int:
        """The length of this loop's first whole row if `reduction_loops` could chunk it, else 0
        (no whole row, or its uses cannot be split into passes: see ir/rolling.py)."""
        from tessera.ir.rolling import why_not_loopable
        if not self._full_axes:
            return 0
        first = next(iter(self._full_axes.values()))
        if why_not_loopable(self.root, self._row_axes(first)) is not None:
            return 0
        try:
            return int(self.symbols.evaluate(first.end))
        except (TypeError, ValueError, exc.TesseraError):
            return 0

    def unify_axes(self, a: Axis, b: Axis, what: str) -> Axis:
        """Broadcast two dims: the same axis, or a unit axis, or two whole dims of equal size."""
        a, b = self.canonical_axis(a), self.canonical_axis(b)
        if a is b or b is UNIT:
            return a
        if a is UNIT:
            return b
        full = list(self._full_axes.values())
        if a in full and b in full and self.symbols.evaluate(a.end) == self.symbols.evaluate(b.end):
            self.symbols.guard_equal(a.end, b.end, f"{what}: sizes {a.end} and {b.end} are equal")
            if full.index(b) < full.index(a):
                a, b = b, a  # the first whole dim stays: `reduction_loops` is about it
            # one row, one layout: nodes traced with `b` follow `a` into its block or chunk loop
            b.begin, b.block, b.needs_mask = a.begin, a.block, a.needs_mask
            self._axis_alias[b] = a
            return a
        raise exc.ShapeMismatchError(
            f"{what}: dimension {a.name} (size {a.end}) does not match dimension {b.name} (size {b.end})",
            location=user_location(),
            hint="operands must have the same tiles in the same positions, or size 1 to broadcast")

    def broadcast(self, shapes: list[tuple[Axis, ...]], what: str) -> tuple[Axis, ...]:
        rank = max((len(s) for s in shapes), default=0)
        result: list[Axis] = []
        for position in range(rank):
            axis = UNIT
            for shape in shapes:
                offset = position - (rank - len(shape))
                if offset >= 0:
                    axis = self.unify_axes(axis, shape[offset], what)
            result.append(axis)
        return tuple(result)

    # -- loops -----------------------------------------------------------------------------------
    def _range_axes(self, tile_range: TileRange, loop_var: Callable[[int], sympy.Expr], role: str) -> list[TileProxy]:
        tunable = [i for i, block in enumerate(tile_range.block_sizes) if block is None]
        blocks = list(tile_range.block_sizes)
        slot_of: dict[int, int] = {}
        if tunable:
            bounds = static_bounds(tile_range)
            for i, block in zip(tunable, self.block_sizes(tile_range.site, len(tunable), [bounds[i] for i in tunable])):
                blocks[i] = block
            first = self.slots.first_slot(tile_range.site, len(tunable))
            slot_of = {dim: first + j for j, dim in enumerate(tunable)}
        proxies = []
        for dim, (begin, end, block) in enumerate(zip(tile_range.begins, tile_range.ends, blocks)):
            begin, end = self.symbols.canonical(self.scalar_expr(begin)), self.symbols.canonical(self.scalar_expr(end))
            block = int(self.symbols.evaluate(block))
            if block & (block - 1):
                raise exc.ConfigError(f"block size {block} is not a power of two", location=user_location())
            extent = end - begin
            exact = isinstance(extent, (int, sympy.Integer)) and int(extent) % block == 0
            offset = loop_var(dim)
            axis = Axis(f"t{len(self.launch_axes)}", offset, end, block, needs_mask=not exact)
            axis.range_begin, axis.range_end = begin, end  # type: ignore[attr-defined]
            self.launch_axes.append(axis)
            if dim in slot_of:
                self._tunable_axes.append((slot_of[dim], axis, role))
            tile_id = sympy.floor((offset - begin) / block) if offset != begin else sympy.Integer(0)
            proxies.append(TileProxy(axis, tile_id, sympy.ceiling(extent / block)))
        return proxies

    def scalar_expr(self, value: Any) -> Any:
        """A loop bound, slice bound or view size as a sympy expression.

        Host values are ints or symbols of the launch. A runtime scalar (a 0-d integer tile
        value, e.g. `hl.load(sizes, [g])` or arithmetic on it) becomes a symbol named after its
        IR node (`v7`): the generated code reads that variable, and the host never evaluates it.
        A 0-d tensor argument is loaded inside the kernel (no host sync).
        """
        if isinstance(value, TensorProxy) and value.dim() == 0:
            from tessera.trace.indexing import trace_load
            value = trace_load(self, value, ())
        if isinstance(value, TileValue):
            if any(axis is not UNIT for axis in value.axes):
                raise exc.ShapeMismatchError(
                    f"a loop bound or size must be a single value, got a tile of shape {list(value.axes)}",
                    location=user_location(), hint="reduce it first (e.g. .amax()), or load one element")
            if value.dtype.is_floating_point or value.dtype == torch.bool:
                raise exc.DtypeError(f"a loop bound or size must be an integer, got a {value.dtype} value",
                                     location=user_location(), hint="convert it with .to(torch.int32)")
            if value.axes:
                value = self.emit("view", [value.node], (), value.dtype, order=None, what="runtime scalar")
            return self.symbols.device_symbol(value.node.name)
        if isinstance(value, torch.Tensor):
            raise exc.UnsupportedOperationError(
                "a loop bound that is a host tensor, inside a tile loop", location=user_location(),
                hint="pass it as a kernel argument (a 0-d tensor is read inside the kernel) or as a host int")
        if isinstance(value, TensorProxy):
            raise exc.ShapeMismatchError(f"a loop bound or size must be a single value, got tensor {value.name}",
                                         location=user_location(), hint="index one element of it")
        return sympy.sympify(value) if not isinstance(value, sympy.Basic) else value

    def tunable_dims(self) -> list[TunableDim]:
        """What this trace learned about each block_sizes entry it used (for the autotuner)."""
        found: dict[int, TunableDim] = {}
        for index, axis, role in self._tunable_axes:
            begin = getattr(axis, "range_begin", 0)
            extent_expr = sympy.sympify(sympy.sympify(axis.end - begin).xreplace(self.symbols.values))
            if self.symbols.on_device(extent_expr):
                extent = DATA_DEPENDENT_EXTENT  # read from tensor data inside the kernel: unknown here
            else:
                # bounds that depend on program ids or loop variables: take the first program's value
                extent_expr = extent_expr.xreplace({s: 0 for s in extent_expr.free_symbols})
                extent = max(int(extent_expr), 0)
            minimum = 16 if axis in self.dot_axes else 1
            known = found.get(index)
            if known is not None:
                extent, minimum = max(extent, known.extent), max(minimum, known.min_block)
            found[index] = TunableDim(index, extent, minimum, role)
        return [found[i] for i in sorted(found)]

    def trace_launch(self, tile_range: TileRange, body: Callable[..., Any], cells: list[Any]) -> None:
        """Trace a top-level loop body; program ids map to its dims, first dim fastest."""
        if tile_range.is_grid:
            targets: list[Any] = []
            for dim, (begin, end, step) in enumerate(zip(tile_range.begins, tile_range.ends, tile_range.block_sizes)):
                pid = sympy.Symbol(f"pid_{dim}", integer=True)
                begin_s, end_s = self.scalar_expr(begin), self.scalar_expr(end)
                self.grid_dims.append((begin_s, end_s, int(step)))
                targets.append(begin_s + pid * int(step))
        else:
            proxies = self._range_axes(tile_range, lambda d: sympy.Symbol(f"offset_{d}", integer=True), "launch")
            for dim, proxy in enumerate(proxies):
                self.grid_dims.append((proxy.axis.range_begin, proxy.axis.range_end, proxy.axis.block))  # type: ignore[attr-defined]
            targets = proxies
        target = tuple(targets) if tile_range.multi_dim else targets[0]
        function = types.FunctionType(body.__code__, body.__globals__, body.__name__, body.__defaults__,
                                      tuple(types.CellType(value) for value in cells))
        from tessera.ir import interpreter
        _current.items.append(self)
        try:
            with interpreter.activate(self):
                function(target)
        finally:
            _current.items.pop()

    def device_loop(self, tile_range: TileRange, body: Callable[..., Any], carried: tuple) -> tuple:
        """Trace an inner loop: carried values enter as loop variables and leave as results."""
        for value in carried:
            if not isinstance(value, TileValue) and not is_constant(value):
                raise exc.UnsupportedOperationError(
                    f"a loop-carried value of type {type(value).__name__} is not supported",
                    location=user_location(), hint="carry tile values (hl.zeros/hl.full) or numbers")
        loop_index = self._names
        if tile_range.is_grid:
            variables = [sympy.Symbol(f"g{loop_index}_{d}", integer=True) for d in range(tile_range.ndim)]
            targets: list[Any] = list(variables)
            loops = [(var, self.scalar_expr(b), self.scalar_expr(e), int(s), None) for var, b, e, s
                     in zip(variables, tile_range.begins, tile_range.ends, tile_range.block_sizes)]
        else:
            variables = [sympy.Symbol(f"k{loop_index}_{d}", integer=True) for d in range(tile_range.ndim)]
            proxies = self._range_axes(tile_range, lambda d: variables[d], "loop")
            targets = list(proxies)
            loops = [(var, p.axis.range_begin, p.axis.range_end, p.axis.block, p.axis)  # type: ignore[attr-defined]
                     for var, p in zip(variables, proxies)]
        entry = [self._as_carried(value) for value in carried]
        placeholders = [self.emit("carried", [value.node], value.axes, value.dtype) for value in entry]
        loop_node = self.emit("loop", [e.node for e in entry], (), None, loops=loops, carried=[p.node for p in placeholders])
        body_block = Block()
        loop_node.node.blocks.append(body_block)
        # placeholders belong to the loop, not the enclosing block
        self._blocks[-1].nodes.remove(loop_node.node)
        for placeholder in placeholders:
            self._blocks[-1].nodes.remove(placeholder.node)
        self._blocks[-1].nodes.append(loop_node.node)
        self._blocks.append(body_block)
        try:
            results = body(tuple(targets) if tile_range.multi_dim else targets[0], *placeholders)
            # casts and views of the results belong to the loop body, before the loop-back
            outputs = [self._loop_output(placeholder, result) for placeholder, result in zip(placeholders, results)]
        finally:
            self._blocks.pop()
        loop_node.node.params["outputs"] = outputs
        return tuple(TileValue(p.node) for p in placeholders)

    def _loop_output(self, placeholder: TileValue, result: Any) -> Node:
        result = self._as_carried(result, like=placeholder)
        if result.axes != placeholder.axes and _same_registers(result.axes, placeholder.axes):
            # `hl.zeros([n])` with a specialized n == 1 is the unit axis, rows read with `:`
            # from a dim of size <= 1 a whole-dimension axis of block 1: the same registers
            result = self.emit("view", [result.node], placeholder.axes, result.dtype, order=None,
                               what="loop-carried value")
        if result.axes != placeholder.axes:
            raise exc.ShapeMismatchError(
                f"a loop-carried value changes shape in the loop: {list(placeholder.axes)} -> {list(result.axes)}",
                location=user_location(), hint="keep carried values the same shape in every iteration")
        return result.node

    def device_if(self, condition: TileValue, then_body: Callable[..., tuple], else_body: Callable[..., tuple],
                  values: tuple) -> tuple:
        """An `if` on a device scalar: both branches are traced (if-conversion); loads and stores
        inside a branch are masked by its condition, and each name assigned in a branch becomes
        `where(condition, then_value, else_value)`."""
        from tessera.frontend.rewrite import UNDEFINED
        from tessera.language.elementwise import apply_elementwise
        if any(axis is not UNIT for axis in condition.axes):
            raise exc.ShapeMismatchError(
                f"`if` needs a single boolean, but the condition is a tile of shape {list(condition.axes)}",
                location=user_location(),
                hint="use torch.where(condition, a, b) for per-element choices, or reduce the condition "
                     "(e.g. condition.any())")
        taken = condition if condition.dtype == torch.bool else apply_elementwise(self, "ne", condition, 0)
        outer = self.predicate
        results = []
        for branch, body in ((taken, then_body), (apply_elementwise(self, "invert", taken), else_body)):
            self.predicate = branch.node if outer is None else self._and_predicate(outer, branch.node)
            try:
                results.append(body(*values))
            finally:
                self.predicate = outer
        merged = []
        for before, then_value, else_value in zip(values, *results):
            if then_value is else_value:
                merged.append(then_value)
            elif then_value is UNDEFINED or else_value is UNDEFINED:
                merged.append(UNDEFINED)  # like Python: unbound after the if, reading it fails
            else:
                merged.append(apply_elementwise(self, "where", taken, then_value, else_value))
        return tuple(merged)

    def _and_predicate(self, mask: Node | None, other: Node | None = None) -> Node:
        from tessera.language.elementwise import apply_elementwise
        extra = other if other is not None else self.predicate
        if mask is None:
            return extra
        saved, self.predicate = self.predicate, None
        try:
            # where(), not &: Triton's interpreter cannot `&` a scalar bool with a bool block
            return apply_elementwise(self, "where", TileValue(extra), TileValue(mask), False).node
        finally:
            self.predicate = saved

    def _as_carried(self, value: Any, like: TileValue | None = None) -> TileValue:
        if isinstance(value, TileValue):
            if like is not None and value.dtype != like.dtype:
                return self.emit("cast", [value.node], value.axes, like.dtype)
            return value
        dtype = like.dtype if like is not None else (torch.float32 if isinstance(value, float) else torch.int32)
        return self.emit("full", [value], like.axes if like is not None else (), dtype)


def _same_registers(a: tuple[Axis, ...], b: tuple[Axis, ...]) -> bool:
    """Shapes that differ only by unit axes vs axes of block 1 (a whole dim of size <= 1):
    the same registers; lanes past such a dim's size were masked to 0 when read."""
    return len(a) == len(b) and all(x is y or (x.block == 1 and y.block == 1) for x, y in zip(a, b))
