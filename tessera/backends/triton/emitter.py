"""The Triton emitter: what every lowering rule writes through.

It holds the lines being written and knows the generated code's conventions: node `v7`
is variable `v7` (`v7_p1` when a chunk pass computes it again), axis `t0` has index vector
`idx_t0` and mask `mask_t0`, dtypes print as `tl.float32`, and a load or store's address is
`pointer + offsets` with its masks.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import sympy
import torch

from tessera import exc
from tessera.backends.base import LoweringOptions
from tessera.backends.source_text import EmitterBase, gather_expanders, provably_inside
from tessera.backends.triton.chunked_dots import plan_chunked_dots
from tessera.backends.triton.heuristics import SHARED_MEMORY_MARGIN, shared_memory_limit
from tessera.backends.triton.printer import print_expr
from tessera.config import Config
from tessera.ir.graph import UNIT, AccessKind, Axis, KernelIR, Node
from tessera.ir.symbolic import is_integral

# Helion's backend-neutral dot precisions, as Triton's input_precision
_TRITON_PRECISIONS = {"default": "tf32", "high": "tf32x3", "highest": "ieee"}


def triton_input_precision(dot_precision: str) -> str:
    """Triton's `input_precision=` for a kernel's `dot_precision` setting.

    >>> triton_input_precision("highest")
    'ieee'
    """
    return _TRITON_PRECISIONS.get(dot_precision, dot_precision)
TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int32: "tl.int32", torch.int64: "tl.int64", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
    torch.float8_e4m3fn: "tl.float8e4nv", torch.float8_e5m2: "tl.float8e5",
    torch.float4_e2m1fn_x2: "tl.uint8",  # packed fp4: the kernel receives its bytes (runtime/call_keys.py)
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)  # AMD's fnuz formats are refused when traced (view.py)


class Emitter(EmitterBase):
    """Writes the body of one Triton kernel."""

    def __init__(self, ir: KernelIR, config: Config, options: LoweringOptions) -> None:
        self.ir = ir
        # Triton's interpreter computes products exactly; on the GPU the kernel's setting decides
        self.dot_precision = "ieee" if options.interpret else triton_input_precision(options.dot_precision)
        self.fp8_fast_accum = options.fp8_fast_accum
        self.config = config
        self.parameters = set(ir.parameters)
        self.guards: list[tuple[sympy.Basic, str]] = []  # what the generated code relies on beyond the IR's guards
        self.prelude: list[str] = []    # lines at the kernel top (tensor descriptors)
        self._access_numbers: dict[Node, int] = {}  # load/store node -> its number, for per-access choices
        self._kind_numbers: dict[str, dict[Node, int]] = {}  # see numbered()
        self.twins: dict[Node, Node] = {}  # a peeled tail loop's node -> its whole tiles' node (ir/loop_peel.py)
        self.lines: list[str] = []
        self.indent = 1
        self.int64_indexing = ir.int64_indexing
        self.interpret = options.interpret
        self.helpers: set[str] = set()  # names of @triton.jit helpers the body calls
        self.generated: dict[str, list[str]] = {}  # helpers written for this kernel (combine functions)
        self.last_comment: str | None = None
        self.locations: dict[int, Any] = {}  # body line index -> kernel SourceLocation
        self.renamed: dict[Node, str] = {}  # nodes computed again in a chunk pass get a per-pass name
        # batched products of one matrix per program whose accumulator a loop carries in 2-D
        # (lowering._flat_accumulators): the carried placeholder and the product -> the 2-D name
        self.flat: dict[Node, str] = {}
        self.split_loop: Node | None = None  # the loop whose tiles the programs share (split_programs)
        self.split_reduction: Any = None     # the K loop split over `splits` programs per tile (split_k)
        self.splits = 1
        self.split_persistent = False         # ... dealt out across all grid points (persistent_interleaved)
        self.check_indices = options.check_indices
        self.index_checks: list[Any] = []  # with check_indices: the line of each checked access
        self.gather_ranges: list[str] = []  # the in-range terms of the last address()'s index tensors
        # products over a whole K too wide for shared memory, emitted as K loops (chunked_dots.py)
        stages = max(1, int(config.get("num_stages", 2) or 2))
        budget = int(shared_memory_limit(not options.interpret) * SHARED_MEMORY_MARGIN)
        self.chunked_dots, self.skipped = plan_chunked_dots(ir, budget, stages)

    def numbered(self, kind: str, node: Node) -> int:
        """The position of `node` among the body's nodes of one kind ('load', 'loop'), in
        emission order: what Helion's per-load and per-loop Config lists are indexed by."""
        numbers = self._kind_numbers.setdefault(kind, {})
        return numbers.setdefault(self.twins.get(node, node), len(numbers))

    def access_number(self, node: Node) -> int:
        """The position of a load/store among the body's accesses (stable when code is re-emitted)."""
        return self._access_numbers.setdefault(self.twins.get(node, node), len(self._access_numbers))

    def evaluate(self, expr: Any) -> Any:
        """The value of a host expression in the call the IR was traced for."""
        return sympy.sympify(expr).xreplace(dict(self.ir.example))

    def guard(self, condition: sympy.Basic, reason: str) -> None:
        """Rely on `condition` (over host symbols): the variant is reused only where it holds."""
        self.guards.append((condition, reason))

    def nested(self) -> Emitter:
        """An emitter for the body of a helper function (indent 1, its own lines), sharing this
        one's helpers."""
        inner = copy.copy(self)
        inner.lines, inner.indent, inner.locations, inner.last_comment = [], 1, {}, None
        return inner

    # -- names and casts ------------------------------------------------------------------------
    def name_of(self, node: Node) -> str:
        return self.renamed.get(node, node.name)

    def operand(self, value: Any, dtype: torch.dtype | None) -> str:
        if isinstance(value, Node):
            name = self.name_of(value)
            return self.cast(name, value.dtype, dtype) if dtype is not None else name
        if isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0:
            # Triton turns a -0.0 constant into +0.0 (`-0.0 * x` was `0.0 * x`): make it at run time
            wide = dtype if dtype in (torch.float32, torch.float64) else torch.float32
            return self.cast(f"(tl.full([], 0.0, {TRITON_DTYPES[wide]}) * -1.0)", wide, dtype)
        if self.interpret and dtype == torch.bfloat16 and not (isinstance(value, sympy.Basic) and is_integral(value)):
            # Triton 3.6's interpreter has no bf16 constants (`tl.where(c, float('-inf'), v_bf16)`),
            # nor bf16 casts of a float scalar argument (F.pad(v, (1, 2), value=s)): make the
            # scalar in fp32 and round it
            return self.cast(f"tl.full([], {print_expr(value)}, tl.float32)", torch.float32, dtype)
        # parenthesized: templates like "({0} / {1})" must not re-associate `a - b`
        return f"({print_expr(value)})"

    def cast(self, text: str, source: torch.dtype | None, target: torch.dtype | None) -> str:
        if target is None or source == target:
            return text
        if source is not None and (source in FP8_DTYPES or target in FP8_DTYPES):
            # Triton casts fp8 only to and from fp16, bf16 and fp32 ("cannot cast int32 to fp8e4nv";
            # the interpreter has no fp8 <-> fp64): ints, bools, fp64 and the other fp8 go through
            # fp32, exact for every fp8 value and rounding once, as torch does
            other = target if source in FP8_DTYPES else source
            if other not in (torch.float16, torch.bfloat16, torch.float32):
                text, source = f"{text}.to(tl.float32)", torch.float32
        if self.interpret and source == torch.bfloat16:
            self.helpers.add("widen_bf16")
            text, source = f"widen_bf16({text})", torch.float32
            if target == torch.float32:
                return text
        if self.interpret and target == torch.bfloat16:
            # Triton 3.6's interpreter truncates fp32 -> bf16 and gives NaN or garbage for int and
            # bool -> bf16; PyTorch (through fp32, as c10::BFloat16 does) and the GPU round to
            # nearest even
            self.helpers.add("round_to_bf16")
            return f"round_to_bf16({text}.to(tl.float32))"
        if self.interpret and target in FP8_DTYPES:
            # the interpreter truncates fp32 -> fp8; round to nearest even first, as torch and the GPU do
            helper = f"round_to_{TRITON_DTYPES[target].removeprefix('tl.')}"
            self.helpers.add(helper)
            return f"{helper}({text}.to(tl.float32))"
        if target not in TRITON_DTYPES:
            raise exc.DtypeError(f"Triton has no {target} type: a cast to it cannot be compiled")
        return f"{text}.to({TRITON_DTYPES[target]})"

    # -- axes -----------------------------------------------------------------------------------
    def define_axis(self, axis: Axis) -> None:
        name = axis.name
        self.line(f"idx_{name} = {print_expr(axis.begin)} + tl.arange(0, {axis.block})")
        if self.int64_indexing:
            self.line(f"idx_{name} = idx_{name}.to(tl.int64)")
        if axis.needs_mask:
            self.line(f"mask_{name} = idx_{name} < {print_expr(axis.end)}")

    def block_shape(self, shape: tuple[Axis, ...]) -> str:
        return "[" + ", ".join(str(axis.block) for axis in shape) + "]"

    def reshape(self, name: str, source: tuple[Axis, ...], target: tuple[Axis, ...]) -> str:
        # axes of block 1 (the unit axis, a whole dim of size <= 1) may come and go freely
        # (blocks, not axes: a tile's lanes may become a block-size allocation's, trace.onto_block_axes)
        if [a.block for a in source if a.block != 1] != [a.block for a in target if a.block != 1]:
            raise exc.TesseraError("internal error: a view changed the order of tile dimensions")
        if not target:
            return f"tl.reshape({name}, [])" if source else name
        if [a.block for a in source] == [a.block for a in target]:
            return name
        return self.reshape_blocks(name, [a.block for a in source], [a.block for a in target])

    def reshape_blocks(self, name: str, source: list[int], target: list[int]) -> str:
        """`name` (blocks `source`) as blocks `target`. Where `target` only inserts unit dims this
        is indexing with None (`v[:, None]`), not `tl.reshape`: Triton 3.6 gives the reshape of a
        one-element tensor a layout in which every thread holds the whole broadcast result, so
        `mean[:, None]` of a one-row tile broadcast against a [1, 16384] row made each thread
        hold 16384 values and compiling layer norm's backward took minutes instead of 2 s."""
        inserted = _unit_dims_inserted(source, target)
        if inserted is not None and source:
            return f"{name}[{', '.join('None' if unit else ':' for unit in inserted)}]"
        return f"tl.reshape({name}, {list(target)})"

    # -- memory ----------------------------------------------------------------------------------
    def address(self, node: Node, shape: tuple[Axis, ...] | None = None) -> tuple[str, list[str], list[str]]:
        """(pointer expression, block mask terms, scalar mask terms) of a load or store node.

        Scalar and gathered indices come from data or host ints: they are masked against the
        dimension's size (out-of-range lanes read 0 and are not written) so no access leaves
        the tensor. `shape`: the node's shape less some axes of block 1, addressed as scalars
        (their tile's first index), so the pointer block has that lower rank (`squeezable_load`)."""
        tensor = node.params["tensor"]
        shape = node.shape if shape is None else shape
        terms: list[str] = []
        masks = self.shape_mask(shape)
        scalar_masks: list[str] = []
        expanders = gather_expanders(node)
        self.gather_ranges = []
        for dim, access in enumerate(node.params["accesses"]):
            stride = print_expr(tensor.strides[dim])
            if access.kind is AccessKind.AXIS and access.axis not in shape:
                index, checks = self._unit_axis_index(access)
                scalar_masks.extend(checks)
            elif access.kind is AccessKind.AXIS:
                index = self.axis_index(access.axis, shape)
                if access.bound is not None:
                    masks.append(f"({index} < {print_expr(access.bound)})")
                    if access.user_masked:  # the user's mask must cover lanes past the bound
                        self.gather_ranges.append(masks[-1])
                if access.check_negative:  # a tile loop that may begin below 0 (a loaded begin)
                    masks.append(f"({index} >= 0)")
            elif access.kind is AccessKind.SCALAR:
                index = f"({print_expr(access.scalar)})"
                if access.check_negative:  # negative at run time: counts from the end, as in torch
                    index = f"tl.where({index} < 0, {index} + {print_expr(tensor.sizes[dim])}, {index})"
                if not (access.inside or provably_inside(access.scalar, tensor.sizes[dim])):
                    below = f"({index} < {print_expr(tensor.sizes[dim])})"
                    # a constant index's `(0) >= 0` is a Python bool in Triton's compiler, which
                    # `&` with a tensor refuses ('bool' object has no attribute 'handle')
                    known_nonnegative = access.scalar.is_nonnegative and not access.check_negative
                    scalar_masks.append(below if known_nonnegative else f"({index} >= 0) & {below}")
                if self.int64_indexing:
                    index = f"tl.full([], {index}, tl.int64)"
            else:
                value = access.value
                index = self.name_of(value)
                if self.int64_indexing:
                    index = f"{index}.to(tl.int64)"
                elif value.dtype in (torch.int8, torch.int16):  # sizes above their range compare and add in int32
                    index = f"{index}.to(tl.int32)"
                if value.dtype not in (torch.uint8, torch.bool):  # negative values count from the end, as in torch
                    index = f"tl.where({index} < 0, {index} + {print_expr(tensor.sizes[dim])}, {index})"
                index += expanders[dim]
                inside = f"({index} >= 0) & ({index} < {print_expr(tensor.sizes[dim])})"
                masks.append(inside)
                self.gather_ranges.append(inside)
            terms.append(index if stride == "1" else f"{index} * {stride}")
        offset = " + ".join(terms) if terms else "0"
        if tensor.is_view:
            # a view of the argument: its base offset, and the checks that keep accesses inside it
            if tensor.offset != 0:
                offset = f"({print_expr(tensor.offset)}) + {offset}"
            block = any(access.kind is not AccessKind.SCALAR for access in node.params["accesses"])
            for limit in tensor.limits:
                (masks if block else scalar_masks).append(f"(({offset}) < ({print_expr(limit)}))")
            for position, size in tensor.conditions:
                if not provably_inside(position, size):
                    scalar_masks.append(f"(({print_expr(position)}) >= 0) & (({print_expr(position)}) < ({print_expr(size)}))")
        return f"{tensor.name} + ({offset})", masks, scalar_masks

    def _unit_axis_index(self, access: Any) -> tuple[str, list[str]]:
        """The scalar index of an axis of block 1 addressed outside the pointer block, and the
        checks its one lane gets as a block axis (its tile's end, an access bound, >= 0)."""
        axis = access.axis
        index = f"({print_expr(axis.begin)})"
        checks = [f"({index} < {print_expr(axis.end)})"] if axis.needs_mask else []
        if access.bound is not None:
            checks.append(f"({index} < {print_expr(access.bound)})")
        if access.check_negative:
            checks.append(f"({index} >= 0)")
        if self.int64_indexing:
            index = f"tl.full([], {index}, tl.int64)"
        return index, checks


INDEX_ERRORS = "tessera_index_errors"  # the extra argument of a kernel lowered with check_indices


def emit_index_check(emitter: Emitter, node: Node, masks: list[str], extra: Node | None,
                     scalar_masks: list[str]) -> None:
    """With check_indices: flag this access if an unmasked lane's index tensor is out of range.

    `masks` are the address's block mask terms; the index tensors' own in-range terms
    (`emitter.gather_ranges`) are what is checked, the rest say which lanes count."""
    if not (emitter.check_indices and emitter.gather_ranges):
        return
    slot = len(emitter.index_checks)
    emitter.index_checks.append(node.location)
    lanes = join_masks(emitter, [m for m in masks if m not in emitter.gather_ranges], extra, scalar_masks)
    outside = f"~({' & '.join(emitter.gather_ranges)})"
    bad = outside if lanes is None else f"({lanes}) & {outside}"
    emitter.line(f"tl.store({INDEX_ERRORS} + {slot}, 1, mask=tl.max(tl.where({bad}, 1, 0)) > 0)")


def join_masks(emitter: Emitter, masks: list[str], extra: Node | None = None,
               scalar_masks: list[str] | None = None) -> str | None:
    """The `&` of the block mask terms, the scalar ones, and an extra mask node. Scalars select
    with tl.where: Triton's interpreter cannot `&` a scalar bool with a block."""
    scalars = list(scalar_masks or [])
    if extra is not None and all(axis is UNIT for axis in extra.shape):
        scalars.append(emitter.name_of(extra))
    elif extra is not None:
        masks = masks + [emitter.name_of(extra)]
    block = " & ".join(masks) if masks else None
    scalar = " & ".join(f"({m})" for m in scalars) if scalars else None
    if block and scalar:
        return f"tl.where({scalar}, {block}, False)"
    return block or scalar


def _unit_dims_inserted(source: list[int], target: list[int]) -> list[bool] | None:
    """For each dim of `target`, whether it is a unit dim inserted into `source` (the other dims
    being `source`'s, in order); None when `target` is not `source` with unit dims inserted."""
    inserted, position = [], 0
    for block in target:
        if position < len(source) and source[position] == block:
            inserted.append(False)
            position += 1
        elif block == 1:
            inserted.append(True)
        else:
            return None
    return inserted if position == len(source) else None
