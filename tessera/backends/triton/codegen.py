"""Tile IR + Config -> readable Triton source.

Every node becomes one line `v7 = ...` with a `# file:line` comment pointing at the kernel
source. Axis index vectors and masks are defined once where their axis begins (the kernel top
for launch and whole-dimension axes, the loop head for loop axes).
"""
from __future__ import annotations

import os
from typing import Any

import sympy
import torch

from tessera import exc
from tessera.backends.triton.indexing import BlockAccess, element_size, strategy_for
from tessera.backends.triton.printer import print_expr
from tessera.backends.triton.program_ids import ProgramMapping, emit_program_ids
from tessera.backends.triton.rules import TRITON_RULES
from tessera.ir.graph import UNIT, Axis, Block, Node

TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int32: "tl.int32", torch.int64: "tl.int64", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


class Emitter:
    """Writes the body of one Triton kernel."""

    def __init__(self, int64_indexing: bool, interpret: bool = False, config: Any = None,
                 parameters: set[str] | None = None, symbols: Any = None) -> None:
        self.config = config
        self.parameters = parameters or set()
        self.symbols = symbols          # guards that generated code relies on go here
        self.prelude: list[str] = []    # lines at the kernel top (tensor descriptors)
        self._access_numbers: dict[int, int] = {}  # load/store node -> its number, for per-access choices
        self.lines: list[str] = []
        self.indent = 1
        self.int64_indexing = int64_indexing
        self.interpret = interpret
        self.helpers: set[str] = set()  # names of @triton.jit helpers the body calls
        self._axis_names: dict[Axis, str] = {}
        self._last_comment: str | None = None
        self.locations: dict[int, Any] = {}  # body line index -> kernel SourceLocation

    def access_number(self, node: Node) -> int:
        """The position of a load/store among the body's accesses (stable when code is re-emitted)."""
        return self._access_numbers.setdefault(id(node), len(self._access_numbers))

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    # -- names and casts ------------------------------------------------------------------------
    def name_of(self, node: Node) -> str:
        return node.name

    def operand(self, value: Any, dtype: torch.dtype | None) -> str:
        if isinstance(value, Node):
            return self.cast(value.name, value.dtype, dtype) if dtype is not None else value.name
        # parenthesized: templates like "({0} / {1})" must not re-associate `a - b`
        return f"({print_expr(value)})"

    def cast(self, text: str, source: torch.dtype | None, target: torch.dtype | None) -> str:
        if target is None or source == target:
            return text
        if self.interpret and target == torch.bfloat16 and source in (torch.float32, torch.float64):
            # Triton 3.6's interpreter truncates fp32 -> bf16; PyTorch and the GPU round to nearest even
            self.helpers.add("round_to_bf16")
            return f"round_to_bf16({text}.to(tl.float32))"
        return f"{text}.to({TRITON_DTYPES[target]})"

    # -- axes -----------------------------------------------------------------------------------
    def define_axis(self, axis: Axis) -> None:
        name = axis.name
        self._axis_names[axis] = name
        self.line(f"idx_{name} = {print_expr(axis.begin)} + tl.arange(0, {axis.block})")
        if self.int64_indexing:
            self.line(f"idx_{name} = idx_{name}.to(tl.int64)")
        if axis.needs_mask:
            self.line(f"mask_{name} = idx_{name} < {print_expr(axis.end)}")

    @staticmethod
    def _placed(name: str, position: int, rank: int) -> str:
        if rank <= 1:
            return name
        return f"{name}[{', '.join(':' if i == position else 'None' for i in range(rank))}]"

    def axis_index(self, axis: Axis, shape: tuple[Axis, ...]) -> str:
        return self._placed(f"idx_{axis.name}", shape.index(axis), len(shape))

    def axis_mask(self, axis: Axis, shape: tuple[Axis, ...]) -> str:
        return self._placed(f"mask_{axis.name}", shape.index(axis), len(shape))

    def block_shape(self, shape: tuple[Axis, ...]) -> str:
        return "[" + ", ".join(str(axis.block) for axis in shape) + "]"

    def reshape(self, name: str, source: tuple[Axis, ...], target: tuple[Axis, ...]) -> str:
        # axes of block 1 (the unit axis, a whole dim of size <= 1) may come and go freely
        if [a for a in source if a.block != 1] != [a for a in target if a.block != 1]:
            raise exc.TesseraError("internal error: a view changed the order of tile dimensions")
        if not target:
            return f"tl.reshape({name}, [])" if source else name
        return f"tl.reshape({name}, {self.block_shape(target)})"

    def shape_mask(self, shape: tuple[Axis, ...]) -> list[str]:
        return [self.axis_mask(axis, shape) for axis in shape if axis is not UNIT and axis.needs_mask]

    # -- memory ----------------------------------------------------------------------------------
    def address(self, node: Node) -> tuple[str, list[str], list[str]]:
        """(pointer expression, block mask terms, scalar mask terms) of a load or store node.

        Scalar and gathered indices come from data or host ints: they are masked against the
        dimension's size (out-of-range lanes read 0 and are not written) so no access leaves
        the tensor."""
        tensor = node.params["tensor"]
        shape = node.shape
        rank = len(shape)
        terms: list[str] = []
        masks = self.shape_mask(shape)
        scalar_masks: list[str] = []
        gather_offset = None
        for dim, access in enumerate(node.params["accesses"]):
            stride = print_expr(tensor.strides[dim])
            if access.kind == "axis":
                index = self.axis_index(access.axis, shape)
                if access.bound is not None:
                    masks.append(f"({index} < {print_expr(access.bound)})")
            elif access.kind == "scalar":
                index = f"({print_expr(access.scalar)})"
                if not _provably_inside(access.scalar, tensor.sizes[dim]):
                    scalar_masks.append(f"({index} >= 0) & ({index} < {print_expr(tensor.sizes[dim])})")
                if self.int64_indexing:
                    index = f"tl.full([], {index}, tl.int64)"
            else:
                value = access.value
                if gather_offset is None:
                    gather_offset = _find_run(shape, value.shape)
                index = value.name
                if self.int64_indexing:
                    index = f"{index}.to(tl.int64)"
                if len(value.shape) < rank:
                    pieces = ["None"] * rank
                    for i in range(len(value.shape)):
                        pieces[gather_offset + i] = ":"
                    index = f"{index}[{', '.join(pieces)}]"
                masks.append(f"({index} >= 0) & ({index} < {print_expr(tensor.sizes[dim])})")
            terms.append(index if stride == "1" else f"{index} * {stride}")
        offset = " + ".join(terms) if terms else "0"
        if getattr(tensor, "is_view", False):
            # a view of the argument: its base offset, and the checks that keep accesses inside it
            if tensor.offset != 0:
                offset = f"({print_expr(tensor.offset)}) + {offset}"
            block = any(access.kind != "scalar" for access in node.params["accesses"])
            for limit in tensor.limits:
                (masks if block else scalar_masks).append(f"(({offset}) < ({print_expr(limit)}))")
            for position, size in tensor.conditions:
                if not _provably_inside(position, size):
                    scalar_masks.append(f"(({print_expr(position)}) >= 0) & (({print_expr(position)}) < ({print_expr(size)}))")
        return f"{tensor.name} + ({offset})", masks, scalar_masks


def _provably_inside(index: Any, size: Any) -> bool:
    index, size = sympy.sympify(index), sympy.sympify(size)
    return bool(index.is_Integer and size.is_Integer and 0 <= int(index) < int(size))


def _find_run(shape: tuple[Axis, ...], run: tuple[Axis, ...]) -> int:
    for start in range(len(shape) - len(run) + 1):
        if all(a is b or b is UNIT for a, b in zip(shape[start:], run)):
            return start
    return 0


def _join_masks(masks: list[str], extra: Node | None = None, scalar_masks: list[str] | None = None) -> str | None:
    """The `&` of the block mask terms, the scalar ones, and an extra mask node. Scalars select
    with tl.where: Triton's interpreter cannot `&` a scalar bool with a block."""
    scalars = list(scalar_masks or [])
    if extra is not None and all(axis is UNIT for axis in extra.shape):
        scalars.append(extra.name)
    elif extra is not None:
        masks = masks + [extra.name]
    block = " & ".join(masks) if masks else None
    scalar = " & ".join(f"({m})" for m in scalars) if scalars else None
    if block and scalar:
        return f"tl.where({scalar}, {block}, False)"
    return block or scalar


def emit_block(emitter: Emitter, block: Block) -> None:
    for node in block.nodes:
        if node.location is not None:
            comment = (f"# {os.path.basename(node.location.filename)}:{node.location.lineno}: "
                       f"{node.location.source_line().strip()}")
            if comment != emitter._last_comment:  # one comment per run of nodes from one line
                emitter.line(comment)
                emitter._last_comment = comment
            emitter.locations[len(emitter.lines)] = node.location  # the node's first line, 0-based
        special = _STATEMENTS.get(node.op)
        if special is not None:
            special(emitter, node)
            continue
        rule = TRITON_RULES.get(node.op)
        if rule is None:
            raise exc.UnsupportedOperationError(f"no Triton lowering for IR op {node.op!r}", location=node.location)
        emitter.line(f"{node.name} = {rule(emitter, node)}")


def _block_access(emitter: Emitter, node: Node) -> tuple[str, BlockAccess | None]:
    """The indexing strategy of this load/store, and its block form when not 'pointer'."""
    strategy = strategy_for(emitter.config, emitter.access_number(node))
    if (strategy == "pointer" or emitter.int64_indexing or getattr(node.params["tensor"], "is_view", False)
            or not BlockAccess.possible(node)):  # views: offsets and checks only the pointer path has
        return "pointer", None
    access = BlockAccess(node)
    if strategy == "tensor_descriptor":
        size = element_size(access.tensor.dtype)
        if not (getattr(access.tensor, "aligned16", False) and access.descriptor_ok(size, emitter.parameters)):
            return "block_ptr", access
        strides = access.symbolic_leading_strides()
        if any(emitter.symbols.evaluate(stride) * size % 16 for stride in strides):
            return "block_ptr", access  # this call's layout cannot use TMA
        for stride in strides:
            emitter.symbols.guard(sympy.Eq(sympy.Mod(stride * size, 16), 0),
                                  f"stride {stride} of {access.tensor.name} is a multiple of 16 bytes (TMA)")
    return strategy, access


def _descriptor_name(emitter: Emitter, access: BlockAccess) -> str:
    name = f"desc_{len(emitter.prelude)}"
    emitter.prelude.append(f"{name} = {access.descriptor()}")
    return name


def _load(emitter: Emitter, node: Node) -> None:
    strategy, access = _block_access(emitter, node)
    if access is not None:
        if strategy == "tensor_descriptor":
            text = f"{_descriptor_name(emitter, access)}.load({access.descriptor_offsets()})"
        else:
            # padding without a boundary check makes Triton's tensor-pointer rewrite emit an
            # invalid masked load (static shapes prove every check away)
            padding = ", padding_option='zero'" if access.checked else ""
            text = f"tl.load({access.block_pointer()}, boundary_check={access.boundary_check()}{padding})"
        if len(access.kept_shape) != len(node.shape):
            text = f"tl.reshape({text}, {emitter.block_shape(node.shape)})"
        emitter.line(f"{node.name} = {text}")
        return
    pointer, masks, scalar_masks = emitter.address(node)
    mask = _join_masks(masks, node.inputs[0], scalar_masks)
    extra = f", mask={mask}, other=0" if mask else ""
    emitter.line(f"{node.name} = tl.load({pointer}{extra})")


def _store(emitter: Emitter, node: Node) -> None:
    strategy, access = _block_access(emitter, node)
    value, mask_node = node.inputs
    target = node.params["tensor"].dtype
    text = emitter.operand(value, target) if isinstance(value, Node) else f"tl.full({emitter.block_shape(node.shape)}, {print_expr(value)}, {TRITON_DTYPES[target]})"
    if isinstance(value, Node) and value.shape != node.shape:
        text = f"tl.broadcast_to({text}, {emitter.block_shape(node.shape)})"
    if access is not None:
        if len(access.kept_shape) != len(node.shape):
            text = f"tl.reshape({text}, [{', '.join(str(a.block) for a in access.kept_shape)}])"
        if strategy == "tensor_descriptor":
            emitter.line(f"{_descriptor_name(emitter, access)}.store({access.descriptor_offsets()}, {text})")
        else:
            emitter.line(f"tl.store({access.block_pointer()}, {text}, boundary_check={access.boundary_check()})")
        return
    pointer, masks, scalar_masks = emitter.address(node)
    mask = _join_masks(masks, mask_node, scalar_masks)
    extra = f", mask={mask}" if mask else ""
    atomic = node.params.get("atomic")
    if atomic:
        emitter.line(f"tl.atomic_{atomic}({pointer}, {text}{extra}, sem='relaxed')")
    else:
        emitter.line(f"tl.store({pointer}, {text}{extra})")


def _full(emitter: Emitter, node: Node) -> None:
    emitter.line(f"{node.name} = tl.full({emitter.block_shape(node.shape)}, {print_expr(node.inputs[0])}, "
                 f"{TRITON_DTYPES[node.dtype]})")


def _symbolic(emitter: Emitter, node: Node) -> None:
    emitter.line(f"{node.name} = {print_expr(node.params['expr'])}")


def _tile_index(emitter: Emitter, node: Node) -> None:
    emitter.line(f"{node.name} = idx_{node.params['axis'].name}.to(tl.int32)")


def _arange(emitter: Emitter, node: Node) -> None:
    axis = node.shape[0]
    emitter.line(f"{node.name} = ({node.params['begin']} + idx_{axis.name} * {node.params['step']})"
                 f".to({TRITON_DTYPES[node.dtype]})")


def _dot(emitter: Emitter, node: Node) -> None:
    a, b, acc = node.inputs
    common = torch.promote_types(a.dtype, b.dtype)
    if node.params["interpret"] and common in (torch.float16, torch.bfloat16):
        common = torch.float32  # triton 3.6's interpreter gets 16-bit tl.dot wrong; fp32 is exact here
    accumulate = node.params["accumulate"]
    if node.params.get("small"):
        # a block below tl.dot's minimum of 16: broadcast, multiply and sum over k (exact in fp32)
        rank = len(node.shape)
        left = emitter.operand(a, accumulate) + "[" + ", ".join([":"] * rank + ["None"]) + "]"
        right = emitter.operand(b, accumulate) + "[" + ", ".join([":"] * (rank - 2) + ["None", ":", ":"]) + "]"
        product = f"tl.sum({left} * {right}, axis={rank - 1})"
        if acc is not None:
            product = f"{emitter.operand(acc, accumulate)} + {product}"
        emitter.line(f"{node.name} = {product}")
        if node.dtype != accumulate:
            emitter.line(f"{node.name} = {emitter.cast(node.name, accumulate, node.dtype)}")
        return
    left, right = emitter.operand(a, common), emitter.operand(b, common)
    accumulator = emitter.operand(acc, accumulate) if acc is not None else None
    # A batched (3-D) tl.dot whose batch blocks are all 1 is a plain matrix product: as 2-D it
    # gets the tensor-core path (wgmma on Hopper), which 3-D dots do not.
    squeeze = len(node.shape) > 2 and all(axis.block == 1 for axis in node.shape[:-2])
    if squeeze:
        left = f"tl.reshape({left}, {emitter.block_shape(a.shape[-2:])})"
        right = f"tl.reshape({right}, {emitter.block_shape(b.shape[-2:])})"
        if accumulator is not None:
            accumulator = f"tl.reshape({accumulator}, {emitter.block_shape(node.shape[-2:])})"
    precision = f", input_precision='{node.params['precision']}'" if common == torch.float32 else ""
    if accumulator is not None:
        text = f"tl.dot({left}, {right}, acc={accumulator}{precision}, out_dtype={TRITON_DTYPES[accumulate]})"
    else:
        text = f"tl.dot({left}, {right}{precision}, out_dtype={TRITON_DTYPES[accumulate]})"
    emitter.line(f"{node.name} = {f'tl.reshape({text}, {emitter.block_shape(node.shape)})' if squeeze else text}")
    if node.dtype != accumulate:
        emitter.line(f"{node.name} = {emitter.cast(node.name, accumulate, node.dtype)}")


def _loop(emitter: Emitter, node: Node) -> None:
    placeholders = node.params["carried"]
    for placeholder, entry in zip(placeholders, node.inputs):
        emitter.line(f"{placeholder.name} = {entry.name}")
    for variable, begin, end, step, _ in node.params["loops"]:
        emitter.line(f"for {variable} in tl.range({print_expr(begin)}, {print_expr(end)}, {step}):")
        emitter.indent += 1
    for *_, axis in node.params["loops"]:
        if axis is not None:
            emitter.define_axis(axis)
    emit_block(emitter, node.blocks[0])
    for placeholder, output in zip(placeholders, node.params["outputs"]):
        emitter.line(f"{placeholder.name} = {output.name}")
    if not placeholders and not node.blocks[0].nodes:
        emitter.line("pass")
    emitter.indent -= len(node.params["loops"])


_STATEMENTS = {"load": _load, "store": _store, "full": _full, "tile_index": _tile_index, "arange": _arange,
               "dot": _dot, "loop": _loop, "symbolic": _symbolic}


_HELPERS: dict[str, list[str]] = {
    "round_to_bf16": [
        "",
        "@triton.jit",
        "def round_to_bf16(x):",
        "    # fp32 -> bf16 rounding to nearest even, by integer arithmetic on the bits",
        "    bits = x.to(tl.uint32, bitcast=True)",
        "    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16",
        "    truncated = bits >> 16",
        "    kept = tl.where(x != x, truncated | 0x40, rounded)  # NaN stays NaN",
        "    return kept.to(tl.uint16).to(tl.bfloat16, bitcast=True)",
        "",
    ],
}


def generate_kernel(name: str, parameters: list[str], tracer: Any, grid_dims: list[tuple[Any, Any, int]],
                    launch_axes_top: list[Axis], mapping: ProgramMapping | None = None) -> tuple[str, dict[int, Any]]:
    """The full source of one Triton kernel (imports included), and for each 1-based line of it
    that starts a node's code, the kernel source location it comes from."""
    emitter = Emitter(tracer.int64_indexing, tracer.interpret, tracer.config, set(parameters), tracer.symbols)
    mapping = mapping or ProgramMapping(tuple(range(len(grid_dims))))
    emitter.indent = emit_program_ids(emitter.lines, mapping, grid_dims, tracer.int64_indexing)
    tracer.settle_row_loop()
    looped = tracer.looped_axes()
    for axis in launch_axes_top + [a for a in tracer.full_axes() if a not in looped]:
        emitter.define_axis(axis)
    if looped:
        from tessera.backends.triton.row_loops import emit_looped_row
        emit_looped_row(emitter, tracer.root, looped, tracer.launch_index)
    else:
        emit_block(emitter, tracer.root)
    emitter.lines[:0] = ["    " + line for line in emitter.prelude]
    shift = len(emitter.prelude)
    header = [
        "# Generated by Tessera. Each `# file:line` comment names the kernel source line below it.",
        "import triton",
        "import triton.language as tl",
        "from triton.language.extra import libdevice",
        "",
        *[line for helper in sorted(emitter.helpers) for line in _HELPERS[helper]],
        "",
        "@triton.jit",
        f"def {name}({', '.join(parameters)}):",
    ]
    locations = {index + shift + len(header) + 1: where for index, where in emitter.locations.items()}
    return "\n".join(header + emitter.lines) + "\n", locations
