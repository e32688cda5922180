"""The tile IR: ops, axes, nodes, blocks and the traced kernel (`KernelIR`), all frozen values.

A value's shape is a tuple of `Axis` objects, one per dimension. An axis is an iteration
dimension of the kernel: a tile of a top-level loop (`LAUNCH`), a tile of an inner loop (`LOOP`),
a whole tensor dimension read with `:` (`WHOLE`), or the unit axis of a size-1 dimension. Two
dimensions broadcast together when they are the same axis or one of them is the unit axis:
PyTorch's rule with identity instead of equal ints. Extents are sympy expressions over the
kernel's symbols; blocks are register sizes.

Everything here is immutable: passes build new nodes (`dataclasses.replace`, `substitute_axes`)
instead of editing old ones, so a `KernelIR` handed to a backend never changes under it.
"""
from __future__ import annotations

import dataclasses
import enum
import types
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import sympy
import torch

if TYPE_CHECKING:
    from tessera.location import SourceLocation


class Op(enum.Enum):
    """What a node computes. Each backend has one lowering per op."""

    # values computed lane by lane
    ELEMENTWISE = "elementwise"  # params: fn (an elementwise op name), compute (dtype it computes in)
    CAST = "cast"
    SYMBOLIC = "symbolic"        # a 0-d value of a sympy expression (loop variables, loaded scalars); params: expr
    # creation
    FULL = "full"                # inputs: (fill value,)
    ARANGE = "arange"            # params: begin, step
    TILE_INDEX = "tile_index"    # the indices of an axis; params: axis
    DEVICE_PRINT = "device_print"  # prints its inputs (tile values), no result; params: prefix
    BREAKPOINT = "breakpoint"    # Python's breakpoint() in each program (Triton's interpreter only), no result
    INLINE_ASM = "inline_asm"    # elementwise assembly (GPU only); params: asm, constraints, is_pure, pack
                                 # (and dtypes, for several results)
    INLINE_TRITON = "inline_triton"  # hl.inline_triton / hl.triton_kernel; inputs: the tile values it reads;
                                 # params: source, function (a @triton.jit name, else a snippet), keys,
                                 # arguments, outputs (0: none; several: dtypes, shapes, see ITEM)
    RANDOM = "random"            # Philox numbers; inputs: (seed, offsets | None); params: fn ("rand",
                                 # "randint" or "rand4x": four results, see ITEM), low, high; without offsets, each element's row-major
                                 # number in the loops' full extents (params: extents)
    # memory
    LOAD = "load"                # inputs: (mask | None,); params: tensor, accesses, eviction_policy
    STORE = "store"              # inputs: (value, mask | None); params: tensor, accesses, atomic, sem
    # reductions and products
    REDUCE = "reduce"            # params: fn, dim, keepdim, axis, accumulate (fn "combine": see COMBINE)
    SCAN = "scan"                # prefix over one axis; params: fn ("sum", "prod" or "combine"), dim, axis,
                                 # reverse, accumulate
    DOT = "dot"                  # inputs: (a, b, acc | None); params: accumulate, k_axis, small
    DEQUANTIZE = "dequantize"    # a block-scaled operand in fp32 (hl.dot_scaled); inputs: (data, scale);
                                 # params: format, rows (K along axis 1: the left operand; else axis 0)
    # layout
    VIEW = "view"                # adds/removes unit axes; params: what
    PERMUTE = "permute"          # params: order
    RESHAPE = "reshape"          # splits or merges whole axes held exactly (row-major order kept)
    BROADCAST = "broadcast"
    JOIN = "join"                # inputs: (a, b); a new last axis of 2 holding them
    SPLIT = "split"              # the two halves of a last axis of 2 (two results, see ITEM)
    CAT = "cat"                  # inputs: (a, b) concatenated along params dim (a whole axis of each)
    SORT = "sort"                # along the last axis (params axis): values and int64 indices (two
                                 # results); params descending, k (topk: the k first, else None)
    # control flow
    LOOP = "loop"                # inputs: entry values; params: loops, carried, outputs; blocks: (body,)
    CARRIED = "carried"          # a loop-carried value inside its loop (inputs: (entry,))
    # user combine functions (hl.reduce, hl.associative_scan): a REDUCE or SCAN node with fn
    # "combine" holds the traced function as its one block: ARGUMENT nodes (its parameters, left
    # operands then right ones) and 0-d values computed from them; params `results` name the
    # nodes it returns. With several operands the node's dtype is None, params `dtypes` hold one
    # dtype per result and ITEM nodes take them apart.
    ARGUMENT = "argument"        # params: position
    ITEM = "item"                # one result of a node with several (inputs: (node,)); params: index


MEMORY_OPS = frozenset({Op.LOAD, Op.STORE})
LAYOUT_OPS = frozenset({Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.BROADCAST, Op.JOIN, Op.SPLIT, Op.CAT})
CONTROL_OPS = frozenset({Op.LOOP, Op.CARRIED})
COMBINE_OPS = frozenset({Op.REDUCE, Op.SCAN})  # may hold a combine function (fn "combine")


class AxisKind(enum.Enum):
    LAUNCH = "launch"  # a tile of a top-level loop: its offset comes from the program id
    LOOP = "loop"      # a tile of an inner device loop: its offset is the loop variable
    WHOLE = "whole"    # a whole dimension read with `:` (one block, or chunks under reduction_loops)
    UNIT = "unit"      # a dimension of size 1


@dataclasses.dataclass(frozen=True, eq=False)
class Axis:
    """One iteration dimension: indices `begin + arange(block)`, valid where `< end`.

    `range_begin`/`range_end` are the bounds of the loop the axis tiles (`hl.tile(begin, end)`);
    for a whole dimension they are 0 and its size. Axes compare by identity.
    """

    name: str
    kind: AxisKind
    begin: sympy.Expr          # first index of the block (e.g. the tile's offset)
    end: sympy.Expr            # one past the last valid index
    block: int                 # register size (a power of two)
    needs_mask: bool = True    # False when the block provably divides the extent
    range_begin: Any = 0
    range_end: Any = None

    def __repr__(self) -> str:
        return self.name

    @property
    def is_unit(self) -> bool:
        return self.kind is AxisKind.UNIT

    @property
    def is_tile(self) -> bool:
        """A tile of a loop (its element count varies on the tail tile)."""
        return self.kind in (AxisKind.LAUNCH, AxisKind.LOOP)


UNIT = Axis("1", AxisKind.UNIT, sympy.Integer(0), sympy.Integer(1), 1, needs_mask=False,
            range_end=sympy.Integer(1))


class AccessKind(enum.Enum):
    AXIS = "axis"      # the dimension is indexed by an axis's index vector
    SCALAR = "scalar"  # by one symbolic int
    VALUE = "value"    # by a tile value of indices (a gather or scatter)


@dataclasses.dataclass(frozen=True, eq=False)
class DimAccess:
    """How one dimension of a tensor is addressed by a load or store."""

    kind: AccessKind
    axis: Axis | None = None     # AXIS: the axis whose index vector gives the offsets
    scalar: Any = None           # SCALAR: a symbolic int
    value: Node | None = None    # VALUE: the index tile value
    bound: Any = None            # an extra `index < bound` mask where no guard could prove it
    # AXIS: an extra `index >= 0` mask, for a tile whose loop may begin below 0 on the device
    # (a loaded offset); SCALAR: the index may be negative at run time, and wraps like torch's
    # (`i + size` where `i < 0`) before it is masked into `[0, size)`
    check_negative: bool = False
    # AXIS with a bound: the tile runs past the dimension in this call and the access has an
    # extra_mask that must cover those lanes (TESSERA_CHECK_INDICES reports lanes it leaves
    # unmasked, as for an out-of-range index tensor; eager mode raises)
    user_masked: bool = False
    # SCALAR: the index is known to lie inside the dimension (a one-lane launch tile's offset,
    # ir/unit_tiles.py: its grid stops at the extent the trace checked), so it needs no mask
    inside: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class TensorRef:
    """A tensor argument, or a view of one (offset, sizes, strides relative to the argument).

    `limits` are flat-offset bounds accesses must stay under (a reshape to more elements than
    its source); `conditions` are (position, size) pairs a scalar index must satisfy.
    `aligned16`: the pointer is 16-byte aligned for this variant (part of the cache key).
    """

    name: str
    dtype: torch.dtype
    sizes: tuple[Any, ...]
    strides: tuple[Any, ...]
    offset: Any = sympy.Integer(0)
    limits: tuple[Any, ...] = ()
    conditions: tuple[tuple[Any, Any], ...] = ()
    aligned16: bool = False

    @property
    def is_view(self) -> bool:
        """A view with an offset or access checks (not a plain argument)."""
        return self.offset != 0 or bool(self.limits) or bool(self.conditions)

    def __repr__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True, eq=False)
class LoopDim:
    """One dimension of an inner loop: `for variable in range(begin, end, step)`; `axis` is the
    tile it defines (None for `hl.grid` loops, whose variable is the index itself)."""

    variable: sympy.Symbol
    begin: Any
    end: Any
    step: int
    axis: Axis | None


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    """One operation. `inputs` are Nodes or constants; `blocks` hold loop bodies."""

    op: Op
    inputs: tuple[Any, ...]
    shape: tuple[Axis, ...]
    dtype: torch.dtype | None
    params: Mapping[str, Any] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    location: SourceLocation | None = None
    name: str = ""
    blocks: tuple[Block, ...] = ()

    def __repr__(self) -> str:
        return self.name or f"<{self.op.value}>"


@dataclasses.dataclass(frozen=True, eq=False)
class Block:
    """A straight-line sequence of nodes (a kernel body or a loop body)."""

    nodes: tuple[Node, ...] = ()


def freeze_params(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """Params as a read-only mapping, lists turned into tuples."""
    return types.MappingProxyType({key: _freeze(value) for key, value in params.items()})


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class GridDim:
    """One dimension of the launch grid: program p covers `begin + p * step`."""

    begin: Any
    end: Any
    step: int


@dataclasses.dataclass(frozen=True)
class RowLoop:
    """The whole row a launch processes in chunks (`reduction_loops`), and whether the Config
    asked for it (`requested`) or the row is merely long (then it may go back to one block)."""

    axis: Axis
    requested: bool


@dataclasses.dataclass(frozen=True, eq=False)
class KernelIR:
    """One traced top-level tile loop: what a backend lowers.

    `parameters` are the kernel's parameter names in order; `symbols` the host symbols among
    them (sizes, strides, scalars) with their dtypes. `guards` are conditions on those symbols
    the IR relies on, checked before a compiled variant is reused. `row_loop` is the whole row
    processed in chunks; `row_schedule` (set by the `schedule_row_passes` pass) says in which
    pass each node runs.
    """

    name: str
    parameters: tuple[str, ...]
    symbols: Mapping[sympy.Symbol, torch.dtype]
    body: Block
    grid: tuple[GridDim, ...]
    launch_axes: tuple[Axis, ...]
    whole_axes: tuple[Axis, ...]
    guards: tuple[tuple[sympy.Basic, str], ...] = ()
    int64_indexing: bool = False
    launch_index: int = 0
    row_loop: RowLoop | None = None
    row_schedule: tuple[Any, ...] | None = None  # of Node | rolling.ChunkPass
    # the host symbols' values in the call that was traced: a backend may specialize its code
    # on them (e.g. TMA for strides that are multiples of 16 bytes) if it adds a guard
    example: Mapping[sympy.Symbol, Any] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    location: SourceLocation | None = None  # the top-level tile loop's line
    # torch.rand_like & co. in the body: their seeds are this many trailing one-element int64
    # parameters, drawn from torch's generator by the host at each launch (draw_seeds)
    random_seeds: int = 0

    def replace(self, **changes: Any) -> KernelIR:
        return dataclasses.replace(self, **changes)

    def nodes(self) -> Iterator[Node]:
        """Every node, loop bodies included, in body order."""
        return walk(self.body)

    def __str__(self) -> str:
        return format_kernel(self)


def walk(block: Block) -> Iterator[Node]:
    for node in block.nodes:
        yield node
        for inner in node.blocks:
            yield from walk(inner)


def walk_blocks(blocks: tuple[Block, ...]) -> Iterator[Node]:
    """Every node of `blocks` (a node's loop or combine bodies), nested ones included, in order."""
    for block in blocks:
        yield from walk(block)


def substitute_axes(block: Block, axes: Mapping[Axis, Axis]) -> Block:
    """`block` with every axis in `axes` replaced (shapes, params, accesses, loop dims); nodes
    that change are rebuilt and every use follows them."""
    if not axes:
        return block
    return Rebuilder(axes).block(block)


def with_axes(ir: KernelIR, axes: Mapping[Axis, Axis]) -> KernelIR:
    """`ir` with the axes in `axes` replaced everywhere (body, axis lists, the row loop)."""
    if not axes:
        return ir
    row = ir.row_loop
    return ir.replace(
        body=substitute_axes(ir.body, axes),
        launch_axes=tuple(axes.get(a, a) for a in ir.launch_axes),
        whole_axes=tuple(axes.get(a, a) for a in ir.whole_axes),
        row_loop=dataclasses.replace(row, axis=axes.get(row.axis, row.axis)) if row is not None else None)


def rewrite_block(block: Block, nodes: Mapping[Node, Node],
                  insert_after: Mapping[Node, tuple[Node, ...]] = types.MappingProxyType({})) -> Block:
    """`block` with every use of a node in `nodes` reading its replacement instead, and the nodes
    of `insert_after[n]` placed right after `n` wherever it stands (at any depth). Nodes that read
    none of the replaced ones are kept as they are (same objects), and so are the keys of `nodes`
    mapped to themselves: a pass can insert and redirect without touching the rest.

    >>> rewrite_block(ir.body, {old_result: new_result}, {loop: (tail_loop,)})   # doctest: +SKIP
    """
    return Rebuilder({}, nodes, insert_after=insert_after).block(block)


def clone_node(node: Node, axes: Mapping[Axis, Axis], nodes: Mapping[Node, Node], suffix: str) -> Node:
    """A copy of `node` and everything inside it (loop bodies, carried placeholders), each copy
    named with `suffix`, `axes` replaced; nodes outside it are read, not copied, except those
    in `nodes`, which the copy reads in their place.

    >>> tail = clone_node(loop, {tile: tail_tile}, {}, "_tail")   # doctest: +SKIP
    """
    inside = list(walk_blocks(node.blocks))
    scope = {node, *inside, *node.params.get("carried", ())}
    for inner in inside:
        scope.update(inner.params.get("carried", ()))
    return Rebuilder(axes, nodes, scope=scope, suffix=suffix).node(node)


class Rebuilder:
    """One rebuild of a block: axes and nodes replaced, each node rebuilt once (remembered in
    `nodes`, so every use reads the same rebuilt node). `scope` (when given) limits which nodes
    are rebuilt (others are read as they are), and `suffix` renames what is rebuilt (a copy).

    A pass that changes nodes in ways the replacement maps cannot say subclasses it: `finish`
    sees each node rebuilt (inputs, blocks and params already rebuilt) and returns what replaces
    it, and `place_before` puts a new node right before the node being rebuilt, in its block.

    >>> class Renamed(Rebuilder):                                       # doctest: +SKIP
    ...     def finish(self, original, rebuilt):
    ...         return dataclasses.replace(rebuilt, name=rebuilt.name.upper())
    >>> Renamed({}).block(ir.body)                                      # doctest: +SKIP
    """

    def __init__(self, axes: Mapping[Axis, Axis], nodes: Mapping[Node, Node] = types.MappingProxyType({}),
                 scope: set[Node] | None = None, suffix: str = "",
                 insert_after: Mapping[Node, tuple[Node, ...]] = types.MappingProxyType({})) -> None:
        self.axes = axes
        self.nodes: dict[Node, Node] = dict(nodes)
        self.scope = scope
        self.suffix = suffix
        self.insert_after = insert_after
        self._before: list[Node] = []  # what `place_before` placed while the current node was rebuilt

    def block(self, block: Block) -> Block:
        outer, rebuilt = self._before, []  # a node's inner blocks are rebuilt while it is
        for node in block.nodes:
            self._place(node, rebuilt)
            for extra in self.insert_after.get(node, ()):
                self._place(extra, rebuilt)
        self._before = outer
        if all(a is b for a, b in zip(rebuilt, block.nodes)) and len(rebuilt) == len(block.nodes):
            return block
        return Block(tuple(rebuilt))

    def _place(self, node: Node, rebuilt: list[Node]) -> None:
        """Append `node` rebuilt to `rebuilt`, after whatever its rebuild placed before it."""
        self._before = []
        built = self.node(node)
        rebuilt.extend(self._before)
        rebuilt.append(built)

    def finish(self, original: Node, rebuilt: Node) -> Node:
        """The node that replaces `original`, given it `rebuilt` with axes and nodes replaced
        (`original` itself when nothing changed); called once per node."""
        return rebuilt

    def place_before(self, node: Node) -> None:
        """Put `node` (new, already rebuilt) right before the node being rebuilt, in its block."""
        self._before.append(node)

    def node(self, node: Node) -> Node:
        known = self.nodes.get(node)
        if known is not None:
            return known
        if self.scope is not None and node not in self.scope:
            return node
        # carried placeholders are referenced from inside the loop body: rebuild them first
        carried = tuple(self.node(c) for c in node.params.get("carried", ()))
        inputs = tuple(self.value(i) for i in node.inputs)
        blocks = tuple(self.block(b) for b in node.blocks)
        params = {key: self.value(value) for key, value in node.params.items()}
        if carried:
            params["carried"] = carried
        shape = tuple(self.axis(a) for a in node.shape)
        unchanged = (not self.suffix and _same(inputs, node.inputs) and _same(blocks, node.blocks)
                     and _same(shape, node.shape) and all(params[k] is v for k, v in node.params.items()))
        rebuilt = node if unchanged else dataclasses.replace(
            node, inputs=inputs, shape=shape, params=types.MappingProxyType(params), blocks=blocks,
            name=node.name + self.suffix if node.name else node.name)
        rebuilt = self.finish(node, rebuilt)
        self.nodes[node] = rebuilt
        return rebuilt

    def axis(self, axis: Axis) -> Axis:
        return self.axes.get(axis, axis)

    def value(self, value: Any) -> Any:
        if isinstance(value, Node):
            return self.node(value)
        if isinstance(value, Axis):
            return self.axis(value)
        if isinstance(value, tuple):
            items = tuple(self.value(v) for v in value)
            return value if _same(items, value) else items
        if isinstance(value, DimAccess):
            axis = self.axis(value.axis) if value.axis is not None else None
            index = self.node(value.value) if value.value is not None else None
            return value if axis is value.axis and index is value.value else \
                dataclasses.replace(value, axis=axis, value=index)
        if isinstance(value, LoopDim):
            axis = self.axis(value.axis) if value.axis is not None else None
            return value if axis is value.axis else dataclasses.replace(value, axis=axis)
        return value


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


_SHORT_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int32: "i32", torch.int64: "i64", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1",
}


def short_dtype(dtype: torch.dtype | None) -> str:
    if dtype is None:
        return "none"
    return _SHORT_DTYPES.get(dtype, str(dtype).replace("torch.", ""))


def short_type(dtype: torch.dtype | None, shape: tuple[Axis, ...]) -> str:
    """`f32[t0, r0]`: the dtype and the axes of a value."""
    if dtype is None:
        return "none"
    return f"{short_dtype(dtype)}[{', '.join(axis.name for axis in shape)}]"


# -- the text form ------------------------------------------------------------------------------
# `str(kernel_ir)`: the IR as deterministic text, one node per line.
#
#     kernel add(out, x, y, x_size0)
#       grid: (0, x_size0, step 64)
#       axis t0: launch [offset_0 + 64) < x_size0, masked
#       v0: f32[t0] = load(None) tensor=x accesses=(t0) eviction_policy=None
#       v1: f32[t0] = elementwise(v0, 1.0) fn=add compute=f32
#
# Names come from the trace (`v<n>`, axes `t<n>` / `r<n>`) and params print in the order they
# were given, so two traces of the same kernel print the same text; tests compare it literally.
def format_kernel(ir: KernelIR) -> str:
    lines = [f"kernel {ir.name}({', '.join(ir.parameters)})"]
    for dim in ir.grid:
        lines.append(f"  grid: ({_value(dim.begin)}, {_value(dim.end)}, step {dim.step})")
    for axis in (*ir.launch_axes, *ir.whole_axes):
        lines.append(f"  axis {format_axis(axis)}")
    for condition, reason in ir.guards:
        lines.append(f"  guard: {condition}  # {reason}")
    if ir.int64_indexing:
        lines.append("  int64 indexing")
    if ir.row_loop is not None:
        lines.append(f"  row loop: {ir.row_loop.axis.name} in chunks of {ir.row_loop.axis.block}"
                     f"{'' if ir.row_loop.requested else ' (long row)'}")
    lines.extend(format_block(ir.body))
    if ir.row_schedule is not None:
        lines.append("  row schedule:")
        for item in ir.row_schedule:
            if isinstance(item, Node):
                lines.append(f"    {item.name}")
            else:
                reduced = f" -> {', '.join(r.name for r in item.reductions)}" if item.reductions else ""
                if item.online is not None:
                    reduced = f" -> {item.online.maximum.name}, {item.online.total.name} (online sum of exp)"
                lines.append(f"    pass {item.index}: {', '.join(n.name for n in item.nodes)}{reduced}")
    return "\n".join(lines)


def format_axis(axis: Axis) -> str:
    """`t0: launch [offset_0 + 64) < n, masked`."""
    mask = ", masked" if axis.needs_mask else ""
    return f"{axis.name}: {axis.kind.value} [{_value(axis.begin)} + {axis.block}) < {_value(axis.end)}{mask}"


def format_block(block: Block, indent: str = "  ") -> list[str]:
    """One line per node: `name: type = op(inputs) param=value ...`; loop bodies indented."""
    lines = []
    for node in block.nodes:
        inputs = ", ".join(_value(i) for i in node.inputs)
        params = " ".join(f"{key}={_value(value)}" for key, value in node.params.items())
        lines.append(f"{indent}{node.name}: {short_type(node.dtype, node.shape)} = {node.op.value}({inputs})"
                     + (f" {params}" if params else ""))
        for inner in node.blocks:
            lines.extend(format_block(inner, indent + "  "))
    return lines


def _value(value: Any) -> str:
    if isinstance(value, (Node, Axis, TensorRef)):
        return value.name
    if isinstance(value, torch.dtype):
        return short_dtype(value)
    if isinstance(value, DimAccess):
        if value.kind is AccessKind.AXIS:
            text = value.axis.name if value.axis is not None else "?"
        elif value.kind is AccessKind.SCALAR:
            text = _value(value.scalar)
        else:
            text = f"gather {_value(value.value)}"
        low = (" >= 0" if value.kind is AccessKind.AXIS else " wrapped") if value.check_negative else ""
        return text + low + (f" < {_value(value.bound)}" if value.bound is not None else "")
    if isinstance(value, LoopDim):
        tile = f" -> {value.axis.name}" if value.axis is not None else ""
        return f"{value.variable} in range({_value(value.begin)}, {_value(value.end)}, {value.step}){tile}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_value(v) for v in value) + ")"
    if isinstance(value, sympy.Basic):
        return str(value)
    return repr(value) if isinstance(value, str) else str(value)
