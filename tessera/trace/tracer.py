"""The tracer: runs a kernel body once on proxies and returns its tile IR as a `KernelIR`.

It is the active interpreter while a body runs, so primitives reach `process` (which calls the
primitive's trace rule) and the rewritten inner loops reach `device_loop`. Every equality or
bound the trace relies on goes through the symbol table as a guard. Nodes are frozen as they
are recorded; `finish` merges unified whole dimensions and returns the value.

>>> tracer = Tracer(symbols, slots, config)                          # doctest: +SKIP
>>> ir = tracer.trace_launch("add_kernel", parameters, tile_range, body, cells)
"""
from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Any, Callable, Iterator

import sympy
import torch

from tessera import exc
from tessera.config import DEFAULT_ROW_CHUNK, ONE_BLOCK_ROW_LIMIT, Config, reduction_loop_of
from tessera.ir import interpreter
from tessera.ir.graph import (UNIT, Axis, AxisKind, Block, GridDim, KernelIR, LoopDim, Node,
                              Op, RowLoop, freeze_params, substitute_axes, walk)
from tessera.ir.passes import next_power_of_two, whole_dim_bucket
from tessera.ir.primitive import Primitive
from tessera.ir.tile_range import TileRange, reversed_range_error, static_bounds
from tessera.ir.tunables import TunableDim, tunable_value
from tessera.location import user_location
from tessera.trace.block_sizes import BlockSlots, choose_block_sizes
from tessera.trace.factories import TileFactoryMode
from tessera.trace.indexing import trace_load
from tessera.trace.lane_pairing import pairs_lanes, whole_pairs_tile, window_pairs_tile
from tessera.trace.proxy import TensorProxy, TileProxy, TileValue
from tessera.trace.symbols import SymbolTable


def current_tracer() -> Tracer:
    """The tracer of the kernel body being traced (the active interpreter)."""
    active = interpreter.active()
    if not isinstance(active, Tracer):
        raise exc.TesseraError("internal error: no kernel is being traced")
    return active


def is_constant(value: Any) -> bool:
    return isinstance(value, (bool, int, float, sympy.Basic))


# What the autotuner assumes for a dimension whose extent is loaded inside the kernel (a
# modest guess: block sizes picked from it stay small enough for any group or row).
DATA_DEPENDENT_EXTENT = 64


class Tracer:
    """Records the body of one top-level tile loop as IR nodes."""

    def __init__(self, symbols: SymbolTable, slots: BlockSlots, config: Config, launch_index: int = 0,
                 int64_indexing: bool = False, device: torch.device = torch.device("cpu")) -> None:
        self.symbols = symbols
        self.device = device  # the call's device (`hl.zeros(device=...)` must name it)
        self.slots = slots
        self.config = config
        self.launch_index = launch_index  # which top-level tile loop this is (source order), for per-loop Config keys
        self.int64_indexing = int64_indexing
        self._open_blocks: list[list[Node]] = [[]]
        self._names = 0
        self.launch_axes: list[Axis] = []
        self.grid_dims: list[GridDim] = []
        # one axis per whole dimension read (`x[t, :]`, `hl.zeros([t, n])`): never shared by
        # equal extents, which would make `w[:, :]` of a square `w` read its diagonal; axes of equal
        # size become one where the trace combines them (unify_axes)
        self._full_axes: list[Axis] = []
        self._axis_alias: dict[Axis, Axis] = {}
        # whole axes allocated by a register_block_size value (`hl.zeros([t, block])`): a tile of
        # that block combines with them lane for lane (see `fits_block_axis`)
        self.block_size_axes: set[Axis] = set()
        # window axes (`x[s : s + n]`, trace/views.py) -> (start, size of the view it reads from s on)
        self.window_axes: dict[Axis, tuple[Any, Any]] = {}
        self.dot_axes: set[Axis] = set()
        self.predicate: Node | None = None  # condition of the device `if` branch being traced
        self._tunable_axes: list[tuple[int, Axis, str]] = []  # (block_sizes index, axis, role)
        self._registered_slots: set[int] = set()  # block_sizes entries of hl.register_block_size values
        self.row_loop: RowLoop | None = None  # the whole row processed in chunks (reduction_loops)
        self._row_requested = False  # the Config asked for the chunks (else the row is merely long)
        self.location: Any = None  # the top-level loop's line
        # loop variable (program id, tile offset, inner-loop variable) -> the least value it takes:
        # what proves an index nonnegative (trace/bounds.py)
        self.loop_minimums: dict[sympy.Symbol, Any] = {}
        self.jagged_ends: dict[Axis, TileValue] = {}  # the axis of an hl.jagged_tile -> its per-lane ends
        self.random_sites: dict[Any, TensorProxy] = {}  # call site of torch.rand_like & co. -> its seed parameter
        self.lifted: dict[int, TensorProxy] = {}  # id of a module-global tensor the body reads -> its parameter
        self.rule_depth = 0  # > 0 while a primitive's trace rule runs

    # -- interpreter protocol -------------------------------------------------------------
    def process(self, primitive: Primitive, args: tuple, params: dict) -> Any:
        rule = primitive.trace_rule
        if rule is None:
            raise exc.UnsupportedOperationError(f"hl.{primitive.name} has no compiled lowering yet",
                                                location=user_location(), hint="run this kernel with mode='eager'")
        if self.lifted:  # a module-global tensor read in the body: its kernel parameter
            args = tuple(self.lifted.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in args)
            params = {k: self.lifted.get(id(v), v) if isinstance(v, torch.Tensor) else v for k, v in params.items()}
        self.rule_depth += 1  # a rule's own torch calls are plain torch (factories.py)
        try:
            return rule(self, *args, **params)
        finally:
            self.rule_depth -= 1

    def iterate_tiles(self, tile_range: TileRange) -> Iterator[Any]:
        raise exc.UnsupportedSyntaxError(
            "this hl.tile loop was not recognized by Tessera's rewrite", location=user_location(),
            hint="write tile loops as `for ... in hl.tile(...)` directly in the kernel function")

    iterate_grid = iterate_tiles

    def block_sizes(self, site: Any, count: int, bounds: list[tuple[int, int | None]]) -> list[int]:
        return choose_block_sizes(self.slots, self.config, site, count, bounds)

    def registered_block_size(self, site: Any, low: int, high: int | None) -> int:
        return self.block_sizes(site, 1, [(low, high)])[0]

    def tunable(self, name: str, fragment: Any) -> Any:
        return tunable_value(self.config, name, fragment)

    def implicit_seed(self, site: Any) -> TensorProxy:
        """The seed parameter of an implicitly seeded random call (`torch.rand_like(v)`): one per
        call site, in the order sites are first met, a one-element int64 tensor the host fills
        at each launch. A site met again (a loop body traced twice) keeps its seed."""
        seed = self.random_sites.get(site)
        if seed is None:
            name = f"tessera_seed{len(self.random_sites)}"
            seed = TensorProxy(name, torch.int64, [sympy.Integer(1)], [sympy.Integer(1)], self.device, aligned16=True)
            self.random_sites[site] = seed
        return seed

    # -- building nodes ----------------------------------------------------------------------
    def emit(self, op: Op, inputs: list[Any], shape: tuple[Axis, ...], dtype: torch.dtype | None,
             **params: Any) -> TileValue:
        return TileValue(self._append(self._node(op, inputs, shape, dtype, params)))

    def emit_with_block(self, op: Op, inputs: list[Any], shape: tuple[Axis, ...], dtype: torch.dtype | None,
                        block: Block, **params: Any) -> Node:
        """A node holding a block (a combine function's body): the node itself, since with
        several results it has no single value."""
        node = self._node(op, inputs, shape, dtype, params)
        return self._append(dataclasses.replace(node, blocks=(block,)))

    def _node(self, op: Op, inputs: list[Any], shape: tuple[Axis, ...], dtype: torch.dtype | None,
              params: dict[str, Any], name: str | None = None) -> Node:
        if self.predicate is not None and op in (Op.LOAD, Op.STORE):
            # inside a device `if`: memory accesses happen only where the branch is taken
            position = 0 if op is Op.LOAD else 1
            inputs = list(inputs)
            inputs[position] = self.and_predicate(inputs[position])
        if "accesses" in params:  # like the shape: the index vector of the surviving axis
            params["accesses"] = [access if access.axis is None else
                                  dataclasses.replace(access, axis=self.canonical_axis(access.axis))
                                  for access in params["accesses"]]
        if name is None:
            name = self._next_name()
        return Node(op, tuple(inputs), tuple(self.canonical_axis(a) for a in shape), dtype, freeze_params(params),
                    user_location(), name=name)

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Node]]:
        """Nodes emitted inside the `with` go to a fresh list (a combine function's body), not
        the open block; device `if` predicates do not apply to them."""
        nodes: list[Node] = []
        saved, self.predicate = self.predicate, None
        self._open_blocks.append(nodes)
        try:
            yield nodes
        finally:
            self._open_blocks.pop()
            self.predicate = saved

    def open_blocks(self) -> list[list[Node]]:
        """The nodes traced so far into each block still open, outermost first (read only)."""
        return self._open_blocks

    def _append(self, node: Node) -> Node:
        self._open_blocks[-1].append(node)
        return node

    def _next_name(self) -> str:
        name = f"v{self._names}"
        self._names += 1
        return name

    def canonical_axis(self, axis: Axis) -> Axis:
        while axis in self._axis_alias:
            axis = self._axis_alias[axis]
        return axis

    def pinned_int(self, value: Any, what: str) -> Any:
        """A host int that is a symbol when traced (an int argument, a closure's int) as this call's
        value, guarded (a new value compiles another variant); other values unchanged."""
        expr = self.symbols.canonical(value) if isinstance(value, sympy.Basic) else value
        if not isinstance(expr, sympy.Basic) or expr.is_Integer or not expr.free_symbols <= set(self.symbols.values):
            return int(expr) if isinstance(expr, sympy.Integer) else value
        actual = int(self.symbols.evaluate(expr))
        self.symbols.guard(sympy.Eq(expr, actual), f"{what}: {expr} == {actual}")
        for symbol in expr.free_symbols if isinstance(expr, sympy.Symbol) else ():
            self.symbols.replacements[symbol] = sympy.Integer(actual)
        return actual

    def symbolic_value(self, expr: sympy.Basic) -> TileValue:
        """A 0-d device value computed from a symbolic expression over loop variables and loaded
        scalars (e.g. `tile.end - tile.begin > 2` on a runtime-bounded tile)."""
        dtype = torch.bool if isinstance(expr, (sympy.Rel, sympy.logic.boolalg.Boolean)) else torch.int32
        return self.emit(Op.SYMBOLIC, [], (), dtype, expr=expr)

    def tile_index(self, axis: Axis) -> TileValue:
        return self.emit(Op.TILE_INDEX, [], (axis,), torch.int32, axis=axis)

    def onto_block_axes(self, value: TileValue, shape: tuple[Axis, ...], fill: Any = 0) -> TileValue:
        """`value` (its dims aligned right with `shape`) with its dims renamed where `shape` holds a
        tile for a block-size allocation's dim or the other way round (`unify_axes`): a loop tile's
        lanes past the loop's end take `fill` (a number, or a value over `shape`'s axes: see
        language/tail_fill.py; eager mode pads them alike) as they join the allocation."""
        renamed = self.block_renames(value, shape)
        if not renamed:
            return value
        tiles = {position: value.axes[position] for position in renamed
                 if value.axes[position].is_tile and value.axes[position].needs_mask}
        target_axes = tuple(renamed.get(i, a) for i, a in enumerate(value.axes))
        moved = self.emit(Op.VIEW, [value.node], target_axes, value.dtype, what="tile onto block-size axis")
        for position, axis in tiles.items():
            inside = self.inside_tile(axis, target_axes, position)  # over the tile's lanes, renamed
            other = fill
            if isinstance(fill, TileValue):
                other = fill.node if fill.dtype == value.dtype else \
                    self.emit(Op.CAST, [fill.node], fill.axes, value.dtype).node
            axes = self.broadcast([moved.axes, fill.axes], "a tail tile joining an allocation") \
                if isinstance(fill, TileValue) else moved.axes
            moved = self.emit(Op.ELEMENTWISE, [inside.node, moved.node, other], axes, value.dtype,
                              fn="where", compute=value.dtype)
        return moved

    def onto_windows(self, value: TileValue, shape: tuple[Axis, ...]) -> TileValue:
        """`value` (aligned right with `shape`) with each tile dim that faces a window starting at that
        tile's first index (`out[t.begin : t.begin + block] = x[t]`), or a whole dim its one iteration
        covers, renamed to that axis, where the two have the same lanes on every iteration
        (`window_pairs_tile`, `whole_pairs_tile`)."""
        offset = len(shape) - len(value.axes)
        if offset < 0:
            return value
        target = tuple(shape[offset + i] if window_pairs_tile(self, shape[offset + i], axis)
                       or whole_pairs_tile(self, shape[offset + i], axis) else axis
                       for i, axis in enumerate(value.axes))
        if target == value.axes:
            return value
        return self.emit(Op.VIEW, [value.node], target, value.dtype, what="tile onto the window it fills")

    def block_renames(self, value: TileValue, shape: tuple[Axis, ...]) -> dict[int, Axis]:
        """The dims of `value` (aligned right with `shape`) that `onto_block_axes` renames, and to what."""
        offset = len(shape) - len(value.axes)
        return {position: shape[offset + position] for position, axis in enumerate(value.axes)
                if axis is not shape[offset + position]
                and (self.fits_block_axis(shape[offset + position], axis)
                     or self.fits_block_axis(axis, shape[offset + position])
                     or self.fits_padded_axis(axis, shape[offset + position]))}

    def inside_tile(self, axis: Axis, axes: tuple[Axis, ...], position: int) -> TileValue:
        """True where the lanes of tile `axis`, standing at `position` of `axes` (under that axis's
        name: a block-size axis takes a tile's lanes as they are), are below the loop's end."""
        index = self.emit(Op.VIEW, [self.tile_index(axis).node],
                          tuple(a if i == position else UNIT for i, a in enumerate(axes)), torch.int32,
                          what="tile lanes")
        return self.emit(Op.ELEMENTWISE, [index.node, axis.end], index.axes, torch.bool, fn="lt", compute=torch.int64)

    def zero_past_tile_ends(self, value: TileValue, axes: list[Axis]) -> TileValue:
        """`value` with its lanes past the loop's end of each tile of `axes` (that needs a mask)
        set to 0: they are about to become ordinary lanes, which reductions and products see."""
        for axis in axes:
            if not (axis.is_tile and axis.needs_mask):
                continue
            inside = self.inside_tile(axis, value.axes, value.axes.index(axis))
            zero = False if value.dtype == torch.bool else 0
            value = self.emit(Op.ELEMENTWISE, [inside.node, value.node, zero], value.axes, value.dtype,
                              fn="where", compute=value.dtype)
        return value

    def full_axes(self) -> list[Axis]:
        # aliased axes too: nodes traced before the unification still name them
        return list(self._full_axes)

    def full_axis(self, extent: Any) -> Axis:
        """The axis of a whole dimension read with `:`: one block (the next power of two), or for
        the loop's first whole dimension under `reduction_loops`, chunks (see ir/rolling.py)."""
        extent = self.symbols.canonical(extent)
        name = f"r{len(self._full_axes)}"
        if isinstance(extent, sympy.Basic) and not extent.free_symbols <= set(self.symbols.values):
            # a length that changes from tile to tile (`x[t.begin : t.begin + 4, :]`): no one block fits it
            raise exc.UnsupportedOperationError(
                f"a dimension of length {extent}, which depends on the tile or loop iteration, read whole into "
                "registers", location=user_location(),
                hint="index with the tile itself (x[tile]), a tile of a fixed block_size, or hl.arange(n) offsets")
        actual = self.symbols.evaluate(extent)
        chunk = self._row_chunk(extent, actual) if not self._full_axes else None
        if chunk is not None:
            # any length works in chunks: the loop bound is the runtime extent, no bucket guard
            axis = Axis(name, AxisKind.WHOLE, sympy.Symbol(f"chunk_{name}", integer=True), extent, chunk,
                        range_end=extent)
            self.row_loop = RowLoop(axis, requested=self._row_requested)
            self._full_axes.append(axis)
            return axis
        block = next_power_of_two(actual)
        self._guard_block_bucket(extent, block)
        axis = Axis(name, AxisKind.WHOLE, sympy.Integer(0), extent, block, range_end=extent)
        self._full_axes.append(axis)
        return axis

    def block_size_axis(self, block: int) -> Axis:
        """The axis of an allocation sized by a register_block_size value: one block of `block`
        lanes, all valid (never looped in chunks: it is one tile's worth of lanes)."""
        axis = Axis(f"r{len(self._full_axes)}", AxisKind.WHOLE, sympy.Integer(0), sympy.Integer(block), block,
                    needs_mask=False, range_end=sympy.Integer(block))
        self._full_axes.append(axis)
        self.block_size_axes.add(axis)
        return axis

    def fits_block_axis(self, block_axis: Axis, tile_axis: Axis) -> bool:
        """Whether a tile's values combine lane for lane with a block-size allocation's (Helion's
        `acc = hl.zeros([tile_m, block]); for t in hl.tile(n, block_size=block): acc += x[tile_m, t]`)."""
        return block_axis in self.block_size_axes and tile_axis.is_tile and tile_axis.block == block_axis.block

    def fits_padded_axis(self, padded: Axis, row: Axis) -> bool:
        """Whether a whole dim of exactly a power of two P lanes (`hl.zeros([tile, P])`) combines
        lane for lane with a whole row of n < P lanes held in one block of P: Helion pads a row
        to next_power_of_2(n) lanes, so `hl.zeros([tile, next_power_of_2(n)]) + x[tile, :]` is
        the row (its lanes past n are masked, as the row's are)."""
        full = self._full_axes
        if padded is row or padded not in full or row not in full or padded.block != row.block:
            return False
        if self.row_loop is not None and row is self.row_loop.axis:  # a chunked row: its block is the chunk
            return False
        extent = sympy.sympify(padded.end)
        return (extent.is_Integer and int(extent) == padded.block > 1 and sympy.sympify(row.begin) == 0
                and not self.symbols.on_device(row.end) and self.symbols.evaluate(row.end) < padded.block)

    def _guard_block_bucket(self, extent: Any, block: int) -> None:
        if isinstance(extent, sympy.Basic) and not extent.is_Integer:
            self.symbols.guard(whole_dim_bucket(extent, block), f"whole dimension of size {extent} fits block {block}")

    def _row_chunk(self, extent: Any, actual: int) -> int | None:
        """The chunk of this loop's first whole row, or None to hold it in one block."""
        chunk = reduction_loop_of(self.config, self.launch_index)
        self._row_requested = chunk != "auto"
        if chunk != "auto":
            return chunk
        long_row = sympy.Gt(extent, ONE_BLOCK_ROW_LIMIT)
        if isinstance(extent, sympy.Basic) and not extent.is_Integer:
            self.symbols.guard(long_row if actual > ONE_BLOCK_ROW_LIMIT else sympy.Not(long_row),
                               f"whole dimension of size {extent} is {'' if actual > ONE_BLOCK_ROW_LIMIT else 'not '}"
                               f"longer than {ONE_BLOCK_ROW_LIMIT} (looped in chunks)")
        return DEFAULT_ROW_CHUNK if actual > ONE_BLOCK_ROW_LIMIT else None

    def exact_extent(self, axis: Axis, what: str) -> int | None:
        """The size of a whole dimension whose block holds it exactly (no padding lanes: it may
        be split, merged or joined in registers), or None. A symbolic size is guarded to this
        call's value; the unit axis is 1."""
        if axis is UNIT:
            return 1
        if axis.kind is not AxisKind.WHOLE:
            return None
        extent = sympy.sympify(axis.end)
        if extent.is_Integer:
            return int(extent) if int(extent) == axis.block else None
        if extent.free_symbols <= set(self.symbols.values) and self.symbols.evaluate(extent) == axis.block:
            self.symbols.guard(sympy.Eq(extent, axis.block), f"dimension {extent} is {axis.block}, held whole by {what}")
            return axis.block
        return None

    def unify_axes(self, a: Axis, b: Axis, what: str) -> Axis:
        """Broadcast two dims: the same axis, or a unit axis, or two whole dims of equal size."""
        a, b = self.canonical_axis(a), self.canonical_axis(b)
        if a is b or b is UNIT:
            return a
        if a is UNIT:
            return b
        if self.fits_block_axis(a, b) or self.fits_block_axis(b, a):
            # an inner loop's tile joins the allocation (which outlives the loop); the launch's
            # tile takes the allocation's lanes (its masks cover the lanes past its end)
            block, tile = (a, b) if a in self.block_size_axes else (b, a)
            return tile if tile.kind is AxisKind.LAUNCH else block
        if self.fits_padded_axis(a, b) or self.fits_padded_axis(b, a):
            return b if self.fits_padded_axis(a, b) else a  # the row: its mask drops the padding lanes
        full = self._full_axes
        if a in full and b in full and self.symbols.evaluate(a.end) == self.symbols.evaluate(b.end):
            self.symbols.guard_equal(a.end, b.end, f"{what}: sizes {a.end} and {b.end} are equal")
            if full.index(b) < full.index(a):
                a, b = b, a  # the first whole dim stays: `reduction_loops` is about it
            # one row, one layout: nodes traced with `b` take `a` (its block or chunk loop) in `finish`
            self._axis_alias[b] = a
            return a
        sizes = (self.symbols.evaluate_or_none(a.end), self.symbols.evaluate_or_none(b.end))
        actual = f" ({sizes[0]} vs {sizes[1]} in this call)" if None not in sizes else ""
        raise exc.ShapeMismatchError(
            f"{what}: dimension {a.name} (size {a.end}) does not match dimension {b.name} (size {b.end}){actual}",
            location=user_location(),
            hint="operands must have the same tiles in the same positions, or size 1 to broadcast")

    def contracted_axis(self, a: Axis, b: Axis, what: str) -> Axis:
        """The dim a product sums over, from its operands' inner dims: as `unify_axes`, and also two
        different tiles whose lanes pair up one for one on every iteration (see `pairs_lanes`)."""
        try:
            return self.unify_axes(a, b, what)
        except exc.ShapeMismatchError:
            a, b = self.canonical_axis(a), self.canonical_axis(b)
            if pairs_lanes(self, a, b):
                return a
            if a.is_tile and b.is_tile and a.block == b.block:
                raise exc.ShapeMismatchError(
                    f"{what}: tiles {a.name} and {b.name} are summed lane for lane, but their ranges "
                    f"({a.range_begin}:{a.range_end} and {b.range_begin}:{b.range_end}) do not give them "
                    f"the same lanes on every iteration", location=user_location(),
                    hint=f"both ranges must have the same length, a multiple of the block ({a.block}) or at most "
                         f"one block; else index both operands with the same tile") from None
            raise

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
    def _range_axes(self, tile_range: TileRange, loop_var: Callable[[int], sympy.Expr], kind: AxisKind) -> list[TileProxy]:
        tunable = [i for i, block in enumerate(tile_range.block_sizes) if block is None]
        blocks = list(tile_range.block_sizes)
        slot_of: dict[int, int] = {}
        if tunable:
            bounds = static_bounds(tile_range)
            for i, block in zip(tunable, self.block_sizes(tile_range.site, len(tunable), [bounds[i] for i in tunable])):
                blocks[i] = block
            first = self.slots.first_slot(tile_range.site, len(tunable))
            slot_of = {dim: first + j for j, dim in enumerate(tunable)}
        for dim, block in enumerate(tile_range.block_sizes):
            registered = getattr(block, "slot", None)  # an hl.register_block_size value (tile.py)
            if block is not None and registered is not None:
                slot_of[dim] = registered
                self._registered_slots.add(registered)
        proxies = []
        for dim, (begin, end, block) in enumerate(zip(tile_range.begins, tile_range.ends, blocks)):
            begin, end = self.symbols.canonical(self.scalar_expr(begin)), self.symbols.canonical(self.scalar_expr(end))
            if kind is AxisKind.LAUNCH:  # inner loops' bounds may be tile bounds: empty is fine there
                self._check_range_order(begin, end)
            block = int(self.symbols.evaluate(block))
            if block & (block - 1):
                raise exc.ConfigError(f"block size {block} is not a power of two", location=user_location())
            offset = loop_var(dim)
            self.loop_minimums[offset] = begin
            axis = Axis(f"t{len(self.launch_axes)}", kind, offset, end, block, range_begin=begin, range_end=end)
            self.launch_axes.append(axis)
            if dim in slot_of:
                self._tunable_axes.append((slot_of[dim], axis, kind.value))
            tile_id = sympy.floor((offset - begin) / block) if offset != begin else sympy.Integer(0)
            proxies.append(TileProxy(axis, tile_id, sympy.ceiling((end - begin) / block)))
        return proxies

    def _check_range_order(self, begin: sympy.Expr, end: sympy.Expr) -> None:
        """A top-level hl.tile(begin, end) with begin past end in this call is a mistake (Python's
        range would silently run no iterations); bounds loaded inside the kernel are not known here."""
        host = set(self.symbols.values)  # sizes and scalars of the call (not loop variables or loaded values)
        if (begin.is_Integer and begin == 0) or not (begin.free_symbols | end.free_symbols) <= host:
            return
        first, last = self.symbols.evaluate(begin), self.symbols.evaluate(end)
        if int(first) > int(last):
            raise reversed_range_error(int(first), int(last))

    def scalar_expr(self, value: Any) -> Any:
        """A loop bound, slice bound or view size as a sympy expression.

        Host values are ints or symbols of the launch. A runtime scalar (a 0-d integer tile
        value, e.g. `hl.load(sizes, [g])` or arithmetic on it) becomes a symbol named after its
        IR node (`v7`): the generated code reads that variable, and the host never evaluates it.
        A 0-d tensor argument is loaded inside the kernel (no host sync).
        """
        if isinstance(value, TensorProxy) and value.dim() == 0:
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
                value = self.emit(Op.VIEW, [value.node], (), value.dtype, what="runtime scalar")
            return self.symbols.device_symbol(value.node.name)
        if isinstance(value, torch.Tensor):
            raise exc.UnsupportedOperationError(
                "a loop bound that is a host tensor, inside a tile loop", location=user_location(),
                hint="pass it as a kernel argument (a 0-d tensor is read inside the kernel) or as a host int")
        if isinstance(value, TensorProxy):
            raise exc.ShapeMismatchError(f"a loop bound or size must be a single value, got tensor {value.name}",
                                         location=user_location(), hint="index one element of it")
        return sympy.sympify(value) if not isinstance(value, sympy.Basic) else value

    def tunable_axes(self) -> list[tuple[int, Axis, str]]:
        """(block_sizes entry, axis, role) of each tile axis whose block a Config sets."""
        return list(self._tunable_axes)

    def tunable_dims(self, split_axes: frozenset[str] = frozenset()) -> list[TunableDim]:
        """What this trace learned about each block_sizes entry it used (for the autotuner).
        `split_axes` names the axes of a loop the backend may spread over programs: their role
        is 'split' (ir/loop_split.py)."""
        found: dict[int, TunableDim] = {}
        for index, axis, role in self._tunable_axes:
            if axis.name in split_axes:
                role = "split"
            extent_expr = sympy.sympify(sympy.sympify(axis.end - axis.range_begin).xreplace(self.symbols.values))
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
            found[index] = TunableDim(index, extent, minimum, role, registered=index in self._registered_slots)
        return [found[i] for i in sorted(found)]

    def trace_launch(self, name: str, parameters: tuple[str, ...], tile_range: TileRange,
                     body: Callable[..., Any], cells: list[Any]) -> KernelIR:
        """Trace a top-level loop body; program ids map to its dims, first dim fastest."""
        if tile_range.jagged_ends is not None:
            raise exc.InvalidJaggedTileUsage("hl.jagged_tile as the outermost loop of a kernel", location=tile_range.location,
                                             hint="nest it in a tile loop over the lanes its ends belong to")
        if tile_range.is_grid:
            targets: list[Any] = []
            for dim, (begin, end, step) in enumerate(zip(tile_range.begins, tile_range.ends, tile_range.block_sizes)):
                pid = sympy.Symbol(f"pid_{dim}", integer=True)
                self.loop_minimums[pid] = sympy.Integer(0)
                begin_s, end_s = self.scalar_expr(begin), self.scalar_expr(end)
                self.grid_dims.append(GridDim(begin_s, end_s, int(step)))
                targets.append(begin_s + pid * int(step))
        else:
            proxies = self._range_axes(tile_range, lambda d: sympy.Symbol(f"offset_{d}", integer=True), AxisKind.LAUNCH)
            for proxy in proxies:
                self.grid_dims.append(GridDim(proxy.axis.range_begin, proxy.axis.range_end, proxy.axis.block))
            targets = proxies
        target = tuple(targets) if tile_range.multi_dim else targets[0]
        function = types.FunctionType(body.__code__, body.__globals__, body.__name__, body.__defaults__,
                                      tuple(types.CellType(value) for value in cells))
        self.location = tile_range.location
        with interpreter.activate(self), TileFactoryMode(self):
            try:
                function(target)
            except TypeError as error:  # Python's own, at a line of the body (`s[0]` of a scalar)
                located = exc.python_error_at_user_line(error, body.__code__.co_filename)
                if located is None:
                    raise
                raise located from error
        return self.finish(name, parameters)

    def finish(self, name: str, parameters: tuple[str, ...]) -> KernelIR:
        """The traced body as a `KernelIR`: whole dimensions unified during the trace become one
        axis everywhere (nodes traced before the unification still named the other)."""
        block = Block(tuple(self._open_blocks[0]))
        aliases = _apart_where_one_node_holds_both(block, {axis: self.canonical_axis(axis) for axis in self._axis_alias})
        body = substitute_axes(block, aliases)
        whole = tuple(dict.fromkeys(aliases.get(a, a) for a in self._full_axes))
        return KernelIR(
            name=name, parameters=parameters + tuple(seed.name for seed in self.random_sites.values()),
            random_seeds=len(self.random_sites), symbols=types.MappingProxyType(dict(self.symbols.dtypes)), body=body,
            grid=tuple(self.grid_dims), launch_axes=tuple(a for a in self.launch_axes if a.kind is AxisKind.LAUNCH),
            whole_axes=whole, guards=tuple(self.symbols.guards), int64_indexing=self.int64_indexing,
            launch_index=self.launch_index, row_loop=self.row_loop,
            example=types.MappingProxyType(dict(self.symbols.values)), location=self.location)

    def device_loop(self, tile_range: TileRange, body: Callable[..., Any], carried: tuple) -> tuple:
        """Trace an inner loop: carried values enter as loop variables and leave as results. A
        carried tuple or list of values is carried element by element."""
        carried, structure = _flatten_carried(carried)
        for value in carried:
            if not isinstance(value, TileValue) and not is_constant(value):
                raise exc.UnsupportedOperationError(
                    f"a loop-carried value of type {type(value).__name__} is not supported",
                    location=user_location(), hint="carry tile values (hl.zeros/hl.full) or numbers")
        loop_index = self._names
        if tile_range.is_grid:
            variables = [sympy.Symbol(f"g{loop_index}_{d}", integer=True) for d in range(tile_range.ndim)]
            targets: list[Any] = list(variables)
            loops = [LoopDim(var, self.scalar_expr(b), self.scalar_expr(e), int(s), None) for var, b, e, s
                     in zip(variables, tile_range.begins, tile_range.ends, tile_range.block_sizes)]
            self.loop_minimums.update((loop.variable, loop.begin) for loop in loops)
        else:
            variables = [sympy.Symbol(f"k{loop_index}_{d}", integer=True) for d in range(tile_range.ndim)]
            proxies = self._range_axes(tile_range, lambda d: variables[d], AxisKind.LOOP)
            targets = list(proxies)
            loops = [LoopDim(var, p.axis.range_begin, p.axis.range_end, p.axis.block, p.axis)
                     for var, p in zip(variables, proxies)]
            if tile_range.jagged_ends is not None:
                self.jagged_ends[proxies[0].axis] = tile_range.jagged_ends
        entry = [self._as_carried(value) for value in carried]
        # placeholders live in the loop node's params, not in a block
        placeholders = [self._node(Op.CARRIED, [value.node], value.axes, value.dtype, {}) for value in entry]
        loop_name = self._next_name()
        self._open_blocks.append([])
        try:
            results = body(tuple(targets) if tile_range.multi_dim else targets[0],
                           *_unflatten_carried([TileValue(p) for p in placeholders], structure))
            results = _flatten_results(results, structure)
            # casts and views of the results belong to the loop body, before the loop-back
            outputs = [self._loop_output(TileValue(placeholder), result)
                       for placeholder, result in zip(placeholders, results)]
        finally:
            body_nodes = self._open_blocks.pop()
        loop = self._node(Op.LOOP, [e.node for e in entry], (), None,
                          {"loops": loops, "carried": placeholders, "outputs": outputs}, name=loop_name)
        self._append(Node(loop.op, loop.inputs, loop.shape, loop.dtype, loop.params, loop.location, loop.name,
                          blocks=(Block(tuple(body_nodes)),)))
        return tuple(_unflatten_carried([TileValue(p) for p in placeholders], structure))

    def _loop_output(self, placeholder: TileValue, result: Any) -> Node:
        if isinstance(result, TileValue) and _carrying_loses_values(placeholder.dtype, result.dtype):
            # eager carries the promoted value into the next iteration; a cast back would round or
            # truncate it in every iteration instead
            name = str(placeholder.dtype).replace("torch.", "")
            raise exc.DtypeError(
                f"a loop-carried value changes dtype in the loop: {name} -> "
                f"{str(result.dtype).replace('torch.', '')}, and eager PyTorch would carry the "
                f"{str(result.dtype).replace('torch.', '')} value on", location=user_location(),
                hint=f"start it in the dtype the loop computes (hl.zeros(..., dtype={result.dtype})), or cast "
                     f"in the loop: value = (...).to(torch.{name})")
        result = self._as_carried(result, like=placeholder)
        # whole dims unified inside the loop (the carried value's and the body's) are one axis now
        expected = tuple(self.canonical_axis(axis) for axis in placeholder.axes)
        if tuple(self.canonical_axis(axis) for axis in result.axes) == expected:
            return result.node  # a body axis unified with the carried one (`hl.dot(..., acc=)`): `finish` renames it
        if result.axes != expected and _same_registers(result.axes, expected):
            # `hl.zeros([n])` with a specialized n == 1 is the unit axis, rows read with `:`
            # from a dim of size <= 1 a whole-dimension axis of block 1: the same registers
            result = self.emit(Op.VIEW, [result.node], expected, result.dtype, what="loop-carried value")
        if result.axes != expected:
            raise exc.ShapeMismatchError(
                f"a loop-carried value changes shape in the loop: {list(placeholder.axes)} -> {list(result.axes)}",
                location=user_location(), hint="keep carried values the same shape in every iteration")
        return result.node

    def jagged_mask(self, shape: tuple[Axis, ...], what: str) -> TileValue | None:
        """For a value of axes `shape`: True where every hl.jagged_tile axis in it is below its
        lane's end (None when it has none). The ends' axes must be in `shape` too."""
        mask: TileValue | None = None
        for axis, ends in self.jagged_ends.items():
            if axis not in shape:
                continue
            parents = [self.canonical_axis(a) for a in ends.axes if a is not UNIT]
            if not all(parent in shape for parent in parents):
                raise exc.InvalidJaggedTileUsage(
                    f"{what} uses the jagged tile {axis.name} without the tiles its ends are over ({parents})",
                    location=user_location(), hint="index with the enclosing tiles too, e.g. x[tile_b, tile_k]")
            keep = (axis, *parents)
            placed_ends = self.emit(Op.VIEW, [ends.node], tuple(a if a in parents else UNIT for a in shape),
                                    ends.dtype, what="jagged ends")
            index = self.emit(Op.VIEW, [self.tile_index(axis).node], tuple(a if a is axis else UNIT for a in shape),
                              torch.int32, what="jagged index")
            compute = torch.promote_types(torch.int32, ends.dtype)
            inside = self.emit(Op.ELEMENTWISE, [index.node, placed_ends.node],
                               tuple(a if a in keep else UNIT for a in shape), torch.bool, fn="lt", compute=compute)
            mask = inside if mask is None else TileValue(self.and_predicate(mask.node, inside.node))
        return mask

    def and_predicate(self, mask: Node | None, other: Node | None = None) -> Node:
        """`mask & other` (default: the branch predicate) as a boolean node."""
        extra = other if other is not None else self.predicate
        assert extra is not None
        if mask is None:
            return extra
        saved, self.predicate = self.predicate, None
        try:
            # where(), not &: Triton's interpreter cannot `&` a scalar bool with a bool block
            shape = self.broadcast([extra.shape, mask.shape], "if condition and mask")
            return self.emit(Op.ELEMENTWISE, [extra, mask, False], shape, torch.bool, fn="where",
                             compute=torch.bool).node
        finally:
            self.predicate = saved

    def _as_carried(self, value: Any, like: TileValue | None = None) -> TileValue:
        if isinstance(value, TileValue):
            if like is not None and value.dtype != like.dtype:
                return self.emit(Op.CAST, [value.node], value.axes, like.dtype)
            return value
        dtype = like.dtype if like is not None else (torch.float32 if isinstance(value, float) else torch.int32)
        return self.emit(Op.FULL, [value], like.axes if like is not None else (), dtype)


def _carrying_loses_values(carried: torch.dtype, result: torch.dtype) -> bool:
    """Whether casting a loop body's result back to its carried dtype changes values eager mode
    keeps: a float result into an integer or bool, a wider float into a narrower one, a number
    into a bool. Integer widths may differ (a count carried in int32 that a sum makes int64)."""
    if carried == result:
        return False
    if carried == torch.bool:
        return True
    if result.is_floating_point:
        return not carried.is_floating_point or torch.finfo(result).bits > torch.finfo(carried).bits \
            or torch.promote_types(carried, result) != carried
    return False


def _flatten_carried(values: tuple) -> tuple[list[Any], list[Any]]:
    """The carried values with tuples and lists spread out, and per value its container type and
    length (None for a single value), to rebuild them."""
    leaves: list[Any] = []
    structure: list[Any] = []
    for value in values:
        if isinstance(value, (tuple, list)):
            structure.append((type(value), len(value)))
            leaves.extend(value)
        else:
            structure.append(None)
            leaves.append(value)
    return leaves, structure


def _unflatten_carried(leaves: list[Any], structure: list[Any]) -> list[Any]:
    values, position = [], 0
    for kind in structure:
        if kind is None:
            values.append(leaves[position])
            position += 1
        else:
            container, length = kind
            values.append(container(leaves[position:position + length]))
            position += length
    return values


def _flatten_results(results: Any, structure: list[Any]) -> list[Any]:
    """The loop body's results spread out like the carried values they replace."""
    leaves: list[Any] = []
    for result, kind in zip(results, structure):
        if kind is None:
            leaves.append(result)
            continue
        if not isinstance(result, (tuple, list)) or len(result) != kind[1]:
            raise exc.ShapeMismatchError(
                f"a loop-carried {kind[0].__name__} of {kind[1]} values holds "
                f"{len(result) if isinstance(result, (tuple, list)) else 'a single value'} after an iteration",
                location=user_location(), hint="keep a carried tuple the same length in every iteration")
        leaves.extend(result)
    return leaves


def _same_registers(a: tuple[Axis, ...], b: tuple[Axis, ...]) -> bool:
    """Shapes that differ only by unit axes vs axes of block 1 (a whole dim of size <= 1):
    the same registers; lanes past such a dim's size were masked to 0 when read."""
    return len(a) == len(b) and all(x is y or (x.block == 1 and y.block == 1) for x, y in zip(a, b))


def _apart_where_one_node_holds_both(block: Block, aliases: dict[Axis, Axis]) -> dict[Axis, Axis]:
    """`aliases` without the merges that would give one node the same axis twice.

    Two whole dims of equal size that an elementwise op combines are unified (one layout), but
    the same two may be distinct dims of another node: `w[:, :]` of a square `w`, or a product's
    reduced dim and output dim (`x[t, :] @ w[:, :]` then `x[t, :] * result`). Merging them there
    would index both dims of `w` with one vector. They stay apart: equal whole dims have the same
    index vector and block, so the elementwise op combines them by position all the same."""
    aliases = dict(aliases)
    changed = True
    while changed:
        changed = False
        for node in walk(block):
            held = [a for a in (*node.shape, node.params.get("k_axis")) if isinstance(a, Axis) and a is not UNIT]
            first: dict[Axis, Axis] = {}
            for axis in dict.fromkeys(held):
                target = aliases.get(axis, axis)
                other = first.setdefault(target, axis)
                if other is not axis:
                    del aliases[axis if axis in aliases else other]
                    changed = True
                    break
            if changed:
                break
    return aliases
