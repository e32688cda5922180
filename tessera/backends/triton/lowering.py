"""The Triton backend's lowering table: one rule per IR `Op`, each writing lines through the emitter.

    LOWERINGS[Op.REDUCE](emitter, node)    # writes `v5 = tl.sum(tl.where(mask_r0[None, :], v4, 0), axis=1)`

Elementwise ops lower by name through `ELEMENTWISE_TEMPLATES` (a Triton expression over the
operands `{0} {1} {2}`, each already cast to the dtype the node computes in). A rule that is
missing here fails in `tests/test_ops.py` (`test_every_backend_lowers_every_op_it_supports`), naming the op.
"""
from __future__ import annotations

from typing import Any, Callable

import sympy
import torch

from tessera import exc
from tessera.backends.source_text import PYTHON_OPERATOR_TEMPLATES
from tessera.backends.source_text import emit_block as emit_lines
from tessera.backends.source_text import reduction_identity as shared_identity
from tessera.backends.triton import numerics
from tessera.backends.triton import split_reduction as split_k_code
from tessera.backends.triton.emitter import FP8_DTYPES, TRITON_DTYPES, Emitter, emit_index_check, join_masks
from tessera.backends.triton.indexing import BlockAccess, element_size, strategy_for
from tessera.backends.triton.loop_stages import loop_stages
from tessera.backends.triton.printer import print_expr
from tessera.backends.triton.products import emit_dot, squeezed_product
from tessera.backends.triton.sorting import emit_sort
from tessera.backends.triton.split_loops import emit_split_loop
from tessera.backends.triton.user_code import device_breakpoint, device_print, inline_asm, inline_triton
from tessera.ir.graph import UNIT, AccessKind, Axis, Block, Node, Op, walk_blocks

ELEMENTWISE_TEMPLATES: dict[str, str] = {
    **PYTHON_OPERATOR_TEMPLATES,
    "floordiv": "floordiv",
    "mod": "mod",
    "fmod": "fmod",
    "pow": "libdevice.pow({0}, {1})",
    "maximum": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "minimum": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "lshift": "({0} << {1})",
    "rshift": "({0} >> {1})",
    "invert": "invert",
    "abs": "tl.abs({0})",
    "relu": "tl.where({0} < 0, tl.zeros_like({0}), {0})",  # NaN and -0.0 pass as in torch (GPU maxnum drops NaN)
    "exp": "tl.exp({0})",
    "exp2": "tl.exp2({0})",
    "log": "tl.log({0})",
    "log2": "tl.log2({0})",
    "log1p": "libdevice.log1p({0})",
    "sqrt": "tl.sqrt_rn({0})",
    "rsqrt": "(1.0 / tl.sqrt_rn({0}))",
    "reciprocal": "(1.0 / {0})",
    "sigmoid": "(1.0 / (1.0 + tl.exp(-{0})))",
    "tanh": "libdevice.tanh({0})",
    "sin": "tl.sin({0})",
    "cos": "tl.cos({0})",
    "erf": "tl.erf({0})",
    "gelu": "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))",
    "where": "tl.where({0}, {1}, {2})",
    "silu": "({0} / (1.0 + tl.exp(-{0})))",
    "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})",
    "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
}
# tl.sqrt_rn takes float32 only; for float64 tl.sqrt is already correctly rounded
FLOAT64_TEMPLATES: dict[str, str] = {
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "(1.0 / tl.sqrt({0}))",
}
# libdevice functions have no implementation in Triton 3.6's interpreter: there the op calls a
# helper written with tl operations (backends/triton/codegen.py)
INTERPRETED_TEMPLATES: dict[str, tuple[str, str]] = {
    "tanh": ("interpreted_tanh", "interpreted_tanh({0})"),
    "log1p": ("interpreted_log1p", "interpreted_log1p({0})"),
    "pow": ("interpreted_pow", "interpreted_pow({0}, {1})"),
}
_COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})  # bool results: no cast back
# floor division and modulo by dtype kind (backends/triton/numerics.py says why each is written so)
_DIVISION_TEMPLATES: dict[tuple[str, bool], tuple[str, str | None]] = {
    ("floordiv", True): (numerics.FLOAT_FLOORDIV, "float_floordiv"),
    ("floordiv", False): (numerics.INT_FLOORDIV, None),
    ("mod", True): (numerics.FLOAT_REMAINDER, "float_remainder"),
    ("mod", False): (numerics.INT_REMAINDER, None),
    ("fmod", True): ("exact_fmod({0}, {1})", ""),
    ("fmod", False): ("({0} % {1})", None),  # Triton's integer % truncates, as C's does
}

# `~` on bool is logical not; on uint8 Triton xors with -1, which uint8 cannot hold: flip the bits
# of the same byte read as int8
_INVERT = {torch.bool: "({0} == 0)", torch.uint8: "(~{0}.to(tl.int8, bitcast=True)).to(tl.uint8, bitcast=True)"}

REDUCTION_FUNCTIONS = {"sum": "tl.sum", "amax": "tl.max", "amin": "tl.min", "argmax": "tl.argmax",
                       "argmin": "tl.argmin"}


def reduction_identity(fn: str, dtype: torch.dtype) -> str:
    """The value masked lanes take so they never win."""
    return shared_identity(fn, dtype, "float('inf')")


def working_dtype(accumulate: torch.dtype) -> torch.dtype:
    """The dtype a reduction's lanes are combined in: 16-bit floats compare in fp32 (exact, as
    Triton's tl.max does internally; the interpreter cannot even make 16-bit constants for the
    masked lanes), everything else in the node's accumulate dtype."""
    return torch.float32 if accumulate in (torch.float16, torch.bfloat16) else accumulate


def reduction_text(emitter: Emitter, fn: str, operand: str, dtype: torch.dtype, dim: int, keepdim: bool,
                   shape: tuple[Axis, ...]) -> str:
    """`operand` (a block of `dtype` and axes `shape`, masked lanes filled) reduced over `dim` as
    torch reduces it: NaN propagates through float amax/amin/argmax/argmin (numerics.py)."""
    lanes = Emitter.placed(f"tl.arange(0, {shape[dim].block})", dim, len(shape))  # lane numbers, for argmax
    text, helpers = numerics.reduction_expression(fn, operand, dtype, dim, keepdim, emitter.block_shape(shape),
                                                  lanes, emitter.interpret)
    emitter.helpers.update(helpers)
    return text


def _assign(emitter: Emitter, node: Node, expression: str) -> None:
    emitter.line(f"{emitter.name_of(node)} = {expression}")


def _elementwise(emitter: Emitter, node: Node) -> None:
    fn, compute = node.params["fn"], node.params["compute"]
    operands = [_runtime_scalar(emitter.operand(value, compute if fn != "where" or position > 0 else None),
                                value, compute) for position, value in enumerate(node.inputs)]
    template = FLOAT64_TEMPLATES.get(fn, ELEMENTWISE_TEMPLATES[fn]) if compute == torch.float64 else ELEMENTWISE_TEMPLATES[fn]
    if fn == "neg" and compute.is_floating_point:
        # Triton's unary minus is `0 - x`, which makes -(0.0) +0.0; torch gives -0.0. Times -1 is exact
        template = "({0} * -1.0)"
    if compute == torch.bool and fn == "add":
        # torch adds bools as a logical or; Triton's i1 add wraps on the GPU (True + True is False)
        template = "(({0}.to(tl.int8) + {1}.to(tl.int8)) != 0)"
    if emitter.interpret and fn in INTERPRETED_TEMPLATES:
        helper, template = INTERPRETED_TEMPLATES[fn]
        emitter.helpers.add(helper)
        operands = _blocks(emitter, node, operands, compute)
    elif template.startswith("libdevice.") and compute == torch.float64:
        # a Python float constant enters a libdevice call as fp32, and libdevice has no (fp64, fp32)
        # signature (`torch.float_power(v, 3)` failed to compile): make constants fp64 blocks
        operands = _blocks(emitter, node, operands, compute)
    if template in ("floordiv", "mod", "fmod"):
        division, helper = _DIVISION_TEMPLATES[template, compute.is_floating_point]
        if helper is not None:
            fmod = "exact_fmod_interpreted" if emitter.interpret else "exact_fmod"
            emitter.helpers.update(name for name in (helper, fmod) if name)
            operands = _blocks(emitter, node, operands, compute)
        elif not isinstance(node.inputs[0], Node):  # `7 // v`: the template reads the dividend's dtype
            operands = _blocks(emitter, node, operands, compute)
        text = division.format(*operands)
    elif template == "invert":
        text = _INVERT.get(node.dtype, "(~{0})").format(operands[0])
    else:
        text = template.format(*operands)
    _assign(emitter, node, text if fn in _COMPARISONS else emitter.cast(text, compute, node.dtype))


def _runtime_scalar(text: str, value: Any, compute: torch.dtype) -> str:
    """A runtime int (a kernel argument: Triton's int32 or int64) converted into a narrower integer
    dtype the op computes in, wrapping as torch converts the scalar (`x_int8 // n` with n = 1000
    divides by -24); constants were converted when traced (language/operands.py)."""
    narrow = compute in (torch.int8, torch.int16, torch.int32, torch.uint8)
    if narrow and isinstance(value, sympy.Basic) and value.free_symbols:
        # tl.cast, not `.to`: Triton passes an int argument equal to 1 as a constexpr (a Python int)
        return f"tl.cast({text}, {TRITON_DTYPES[compute]})"
    return text


def _blocks(emitter: Emitter, node: Node, operands: list[str], compute: torch.dtype) -> list[str]:
    """Scalar operands as blocks of the node's shape: a helper's `|` and `&` on a Python bool and a
    block fail in the interpreter, and its `tl.floor(2.5)` is no tensor."""
    return [text if isinstance(value, Node) else f"tl.full({emitter.block_shape(node.shape)}, {text}, {TRITON_DTYPES[compute]})"
            for value, text in zip(node.inputs, operands)]


def _reduce(emitter: Emitter, node: Node) -> None:
    fn = node.params["fn"]
    if fn == "combine":
        _combine(emitter, node)
        return
    source = node.inputs[0]
    operand = emitter.name_of(source)
    # 16-bit sums accumulate in fp32 and integer sums in int64, as PyTorch does
    accumulate = working_dtype(node.params["accumulate"])
    operand = emitter.cast(operand, source.dtype, accumulate)
    axis = node.params["axis"]
    if axis.needs_mask:
        operand = f"tl.where({emitter.axis_mask(axis, source.shape)}, {operand}, {reduction_identity(fn, source.dtype)})"
    text = reduction_text(emitter, fn, operand, accumulate, node.params["dim"], node.params["keepdim"], source.shape)
    if fn in ("argmax", "argmin"):
        _assign(emitter, node, f"{text}.to(tl.int64)")
    else:
        _assign(emitter, node, emitter.cast(text, accumulate, node.dtype))


# scans of the builtin functions: the Triton function and the value of lanes that must not count
SCAN_FUNCTIONS: dict[str, tuple[str, str]] = {"sum": ("tl.cumsum", "0"), "prod": ("tl.cumprod", "1")}


def _scan(emitter: Emitter, node: Node) -> None:
    fn = node.params["fn"]
    if fn == "combine":
        _combine(emitter, node)
        return
    source, axis, reverse = node.inputs[0], node.params["axis"], node.params["reverse"]
    accumulate = node.params["accumulate"]
    operand = emitter.cast(emitter.name_of(source), source.dtype, accumulate)
    function, identity = SCAN_FUNCTIONS[fn]
    if axis.needs_mask and reverse:  # a scan from the end starts in the padding past the extent
        operand = f"tl.where({emitter.axis_mask(axis, source.shape)}, {operand}, {identity})"
    text = f"{function}({operand}, axis={node.params['dim']}{', reverse=True' if reverse else ''})"
    _assign(emitter, node, emitter.cast(text, accumulate, node.dtype))


def _combine(emitter: Emitter, node: Node) -> None:
    """A scan or reduction with a user combine function: the function becomes a `@triton.jit`
    helper. Where lanes past the extent could reach valid ones (any reduction, a reverse scan),
    each operand travels with a validity flag and invalid lanes never enter the function."""
    helper = _combine_helper(emitter, node)
    source, axis, dim = node.inputs[0], node.params["axis"], node.params["dim"]
    operands = [emitter.name_of(value) for value in node.inputs]
    count = len(operands)
    results = [emitter.name_of(node)] if count == 1 else [f"{emitter.name_of(node)}_{i}" for i in range(count)]
    if axis.needs_mask and (node.op is Op.REDUCE or node.params["reverse"]):
        helper = _flagged_helper(emitter, helper, count)
        operands.append(f"tl.broadcast_to({emitter.axis_mask(axis, source.shape)}, {emitter.block_shape(source.shape)})")
        results.append(f"{emitter.name_of(node)}_valid")
    packed = operands[0] if len(operands) == 1 else f"({', '.join(operands)})"
    if node.op is Op.SCAN:
        call = f"tl.associative_scan({packed}, {dim}, {helper}, reverse={bool(node.params['reverse'])})"
    else:
        call = f"tl.reduce({packed}, {dim}, {helper}, keep_dims={bool(node.params['keepdim'])})"
    emitter.line(f"{', '.join(results)} = {call}")


def _combine_helper(emitter: Emitter, node: Node) -> str:
    """Write the traced combine function of `node` as a helper named after the user's function
    (`add_combine_fn_v4`); its name."""
    name = f"{node.params.get('combine_name', 'combine')}_{emitter.name_of(node)}"
    body = node.blocks[0]
    arguments = [inner for inner in body.nodes if inner.op is Op.ARGUMENT]
    nested = emitter.nested()
    emit_block(nested, Block(tuple(inner for inner in body.nodes if inner.op is not Op.ARGUMENT)))
    returned = ", ".join(nested.name_of(result) for result in node.params["results"])
    emitter.generated[name] = ["", "@triton.jit", f"def {name}({', '.join(a.name for a in arguments)}):",
                               *nested.lines, f"    return {returned}", ""]
    return name


def _flagged_helper(emitter: Emitter, helper: str, count: int) -> str:
    """`helper` over (values..., valid) pairs: an invalid side yields the other side unchanged,
    so invalid lanes act as an identity the user's function need not have."""
    left, right = [f"a{i}" for i in range(count)], [f"b{i}" for i in range(count)]
    combined = [f"c{i}" for i in range(count)]
    name = f"{helper}_flagged"
    emitter.generated[name] = [
        "", "@triton.jit", f"def {name}({', '.join(left)}, a_valid, {', '.join(right)}, b_valid):",
        f"    {', '.join(combined)} = {helper}({', '.join(left + right)})" if count > 1 else
        f"    c0 = {helper}(a0, b0)",
        *[f"    {c} = tl.where(a_valid & b_valid, {c}, tl.where(a_valid, {a}, {b}))"
          for c, a, b in zip(combined, left, right)],
        f"    return {', '.join(combined)}, a_valid | b_valid", ""]
    return name


def _argument(emitter: Emitter, node: Node) -> None:
    """A combine function's parameter: the helper's argument of the same name, nothing to write."""


def _item(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, f"{emitter.name_of(node.inputs[0])}_{node.params['index']}")


def _cast(emitter: Emitter, node: Node) -> None:
    if node.params.get("bitcast"):  # `v.view(dtype)`: the same bits
        _assign(emitter, node, f"{emitter.name_of(node.inputs[0])}.to({TRITON_DTYPES[node.dtype]}, bitcast=True)")
        return
    _assign(emitter, node, emitter.cast(emitter.name_of(node.inputs[0]), node.inputs[0].dtype, node.dtype))


def _view(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, emitter.reshape(emitter.name_of(node.inputs[0]), node.inputs[0].shape, node.shape))


def _reshape(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, emitter.reshape_blocks(emitter.name_of(node.inputs[0]), [a.block for a in node.inputs[0].shape],
                                                  [a.block for a in node.shape]))


def _permute(emitter: Emitter, node: Node) -> None:
    order = list(node.params["order"])
    name = emitter.name_of(node.inputs[0])
    _assign(emitter, node, f"tl.trans({name})" if order == [1, 0] else f"tl.permute({name}, {tuple(order)})")


def _broadcast(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, f"tl.broadcast_to({emitter.name_of(node.inputs[0])}, {emitter.block_shape(node.shape)})")


def _broadcast_operand(emitter: Emitter, value: Node, dtype: torch.dtype, blocks: list[int]) -> str:
    """`value` cast to `dtype` and broadcast to a block of `blocks` lanes per dimension."""
    text = emitter.operand(value, dtype)
    if [axis.block for axis in value.shape] != blocks:
        text = f"tl.broadcast_to({text}, {blocks})"
    return text


def _join(emitter: Emitter, node: Node) -> None:
    blocks = [axis.block for axis in node.shape[:-1]]
    a, b = (_broadcast_operand(emitter, value, node.dtype, blocks) for value in node.inputs)
    _assign(emitter, node, f"tl.join({a}, {b})")


def _split(emitter: Emitter, node: Node) -> None:
    emitter.line(f"{emitter.name_of(node)}_0, {emitter.name_of(node)}_1 = tl.split({emitter.name_of(node.inputs[0])})")


def _cat(emitter: Emitter, node: Node) -> None:
    """Join the two along a new last axis, move it before the concatenated one and merge the two:
    row-major order puts all of the first value before the second."""
    dim = node.params["dim"]
    blocks = [axis.block for axis in node.shape]
    blocks[dim] //= 2
    a, b = (_broadcast_operand(emitter, value, node.dtype, blocks) for value in node.inputs)
    rank = len(blocks)
    order = [*range(dim), rank, *range(dim, rank)]
    _assign(emitter, node, f"tl.reshape(tl.permute(tl.join({a}, {b}), {tuple(order)}), {emitter.block_shape(node.shape)})")


def _block_access(emitter: Emitter, node: Node) -> tuple[str, BlockAccess | None]:
    """The indexing strategy of this load/store, and its block form when not 'pointer'."""
    strategy = strategy_for(emitter.config, emitter.access_number(node))
    if (strategy == "pointer" or emitter.int64_indexing or node.params["tensor"].is_view or node.params.get("stacked") is not None
            or not BlockAccess.possible(node, descriptor=strategy == "tensor_descriptor")):
        return "pointer", None  # views: offsets and checks only the pointer path has
    access = BlockAccess(node)
    if strategy == "tensor_descriptor":
        fallback = ("pointer", None) if access.bounded else ("block_ptr", access)
        size = element_size(access.tensor.dtype)
        if not (access.tensor.aligned16 and access.descriptor_ok(size, emitter.parameters)):
            return fallback
        if node.op is Op.STORE and (access.descriptor_permutation() is not None or access.masked_axes()):
            return fallback  # a transposed store's rows are not contiguous; a tail tile would write past its end
        strides = access.symbolic_leading_strides()
        if any(emitter.evaluate(stride) * size % 16 for stride in strides):
            return fallback  # this call's layout cannot use TMA
        for stride in strides:
            emitter.guard(sympy.Eq(sympy.Mod(stride * size, 16), 0),
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
            box = access.descriptor_box()
            if len(box) != len(access.dims):  # scalar-indexed dims: boxes of 1
                text = f"tl.reshape({text}, {box})"
            permutation = access.descriptor_permutation()
            if permutation is not None:
                text = f"tl.permute({text}, {permutation})"
            masked = access.masked_axes()
            if masked:  # zeros past the tile's end, as a masked pointer load reads them
                kept = tuple(access.kept_shape)
                text = f"tl.where({' & '.join(emitter.axis_mask(axis, kept) for axis in masked)}, {text}, 0)"
        else:
            # padding without a boundary check makes Triton's tensor-pointer rewrite emit an
            # invalid masked load (static shapes prove every check away)
            padding = ", padding_option='zero'" if access.checked else ""
            text = f"tl.load({access.block_pointer()}, boundary_check={access.boundary_check()}{padding}" \
                   f"{_eviction_hint(emitter, node)})"
        if len(access.kept_shape) != len(node.shape):
            text = emitter.reshape_blocks(text, [a.block for a in access.kept_shape], [a.block for a in node.shape])
        emitter.line(f"{emitter.name_of(node)} = {text}")
        return
    squeezed = _squeezed_shape(node)
    pointer, masks, scalar_masks = _address(emitter, node, squeezed)
    emit_index_check(emitter, node, masks, node.inputs[0], scalar_masks)
    mask = join_masks(emitter, masks, node.inputs[0], scalar_masks)
    # Triton 3.6's interpreter cannot cast `other` to fp8; its masked lanes are zeros without it
    fp8_interpreted = emitter.interpret and node.dtype in FP8_DTYPES
    # Triton casts `other` to the element type, and no int casts to fp8: a float zero for fp8
    other = "" if fp8_interpreted else ", other=0.0" if node.dtype in FP8_DTYPES else ", other=0"
    extra = f", mask={mask}{other}" if mask else ""
    text = f"tl.load({pointer}{extra}{_eviction_hint(emitter, node)})"
    if squeezed is not None:
        text = f"tl.reshape({text}, {emitter.block_shape(node.shape)})"
    elif node.shape and all(access.kind is AccessKind.SCALAR for access in node.params["accesses"]):
        # one element with unit dims (`t[i, None]`, `:` of a size-1 dim): a scalar pointer loads a
        # 0-d value, which Triton's interpreter cannot reshape; broadcasting it to the unit block works
        text = f"tl.broadcast_to({text}, {emitter.block_shape(node.shape)})"
    emitter.line(f"{emitter.name_of(node)} = {text}")


def _squeezed_shape(node: Node) -> tuple[Axis, ...] | None:
    """The last two axes of a load of rank > 2 whose leading axes all have block 1 (bmm's and
    batched attention's operand tiles, `a[tile_b, tile_m, tile_k]` with one batch index per
    program), when it is addressed by tile axes and scalars only: loaded as a 2-D block and
    reshaped, so that the product's 2-D operand (`_dot`'s squeeze) is the load itself once Triton
    folds the two reshapes. Through a 3-D load, Triton 3.6 on the H100 copied bmm's first operand
    out of shared memory into registers and split its product into four K=16 wgmma steps."""
    shape = node.shape
    if len(shape) <= 2 or any(axis.block != 1 for axis in shape[:-2]) or node.params.get("stacked") is not None:
        return None
    accesses = node.params["accesses"]
    if any(a.kind is AccessKind.VALUE for a in accesses):
        return None
    kept = tuple(shape[-2:])
    addressed = [a.axis for a in accesses if a.kind is AccessKind.AXIS]
    if not all(any(axis is other for other in addressed) for axis in kept) or kept[0] is kept[1]:
        return None
    return kept


def _address(emitter: Emitter, node: Node, shape: tuple[Axis, ...] | None = None) -> tuple[str, list[str], list[str]]:
    """`emitter.address(node, shape)`; for an access through an hl.stacktensor_like, the base pointer is
    the pointers value (its dims lead the access's), cast to pointers to the template's dtype."""
    pointer, masks, scalar_masks = emitter.address(node, shape)
    count = node.params.get("stacked")
    if count is None:
        return pointer, masks, scalar_masks
    tensor = node.params["tensor"]
    pointers = node.inputs[1] if node.op is Op.LOAD else node.inputs[2]
    base = f"{emitter.name_of(pointers)}.to(tl.pointer_type({TRITON_DTYPES[tensor.dtype]}))"
    if len(node.shape) > count:
        base += f"[{', '.join([':'] * count + ['None'] * (len(node.shape) - count))}]"
    return base + pointer[len(tensor.name):], masks, scalar_masks


def _eviction_hint(emitter: Emitter, node: Node) -> str:
    """`eviction_policy=` of a load: its own (`hl.load(..., eviction_policy=)`), else the
    Config's `load_eviction_policies` entry for this load ('' = none)."""
    number = emitter.numbered("load", node)
    policy = node.params.get("eviction_policy")
    if not policy:
        chosen = list(emitter.config.get("load_eviction_policies") or [])
        policy = f"evict_{chosen[number]}" if number < len(chosen) and chosen[number] else None
    return f", eviction_policy='{policy}'" if policy else ""


def _store(emitter: Emitter, node: Node) -> None:
    strategy, access = _block_access(emitter, node)
    value, mask_node = node.inputs[:2]
    text = _stored_text(emitter, node, value)
    if access is not None:
        if strategy == "tensor_descriptor":
            if len(access.dims) != len(node.shape):
                text = f"tl.reshape({text}, [{', '.join(str(d.block) for d in access.dims)}])"
            emitter.line(f"{_descriptor_name(emitter, access)}.store({access.descriptor_offsets()}, {text})")
        else:
            if len(access.kept_shape) != len(node.shape):
                text = f"tl.reshape({text}, [{', '.join(str(a.block) for a in access.kept_shape)}])"
            emitter.line(f"tl.store({access.block_pointer()}, {text}, boundary_check={access.boundary_check()})")
        return
    pointer, masks, scalar_masks = _address(emitter, node)
    emit_index_check(emitter, node, masks, mask_node, scalar_masks)
    mask = join_masks(emitter, masks, mask_node, scalar_masks)
    atomic = node.params.get("atomic")
    if atomic and mask and not masks and mask_node is None:
        # only scalar checks (`(0) < out_size0`): Triton folds them to a Python bool when the size
        # is specialized (1), and tl.atomic_* wants a tensor mask ('bool' object has no attribute 'handle')
        mask = f"tl.where({mask}, True, False)"
    extra = f", mask={mask}" if mask else ""
    if atomic == "cas":
        # tl.atomic_cas has no mask: a masked lane swaps the argument's first element for itself
        # (compare with x, write x), which changes nothing
        expected = _stored_text(emitter, node, node.inputs[2])
        if mask:
            pointer, text = f"tl.where({mask}, {pointer}, {node.params['tensor'].name})", f"tl.where({mask}, {text}, {expected})"
        emitter.line(f"{emitter.name_of(node)} = tl.atomic_cas({pointer}, {expected}, {text}, "
                     f"sem='{node.params.get('sem') or 'relaxed'}')")
    elif atomic in ("max", "min", "xchg") and not emitter.interpret and node.params["tensor"].dtype == torch.bfloat16:
        raise exc.UnsupportedOperationError(
            f"hl.atomic_{atomic} on a bfloat16 tensor: Triton has no bf16 atomic_{atomic} for NVIDIA GPUs "
            "(atomic_add works)", location=node.location,
            hint="keep the target in float32 (and cast it after the kernel), or use hl.atomic_cas in a loop")
    elif atomic and emitter.interpret and (node.params["tensor"].dtype == torch.bfloat16
                                           or atomic == "add" and node.params["tensor"].dtype == torch.float16):
        emitter.helpers.update(("interpreted_16bit_atomic", "round_to_bf16", "widen_bf16"))
        # the helper's compare-and-swap has no mask: a masked lane works on the tensor's first element
        safe = f"tl.where({mask}, {pointer}, {node.params['tensor'].name})" if mask else pointer
        half = node.params["tensor"].dtype == torch.float16
        emitter.line(f"{emitter.name_of(node)} = interpreted_16bit_atomic({safe}, {text}, "
                     f"{mask or 'True'}, '{atomic}', {half})")
    elif atomic:
        # the previous values (tl.atomic_* returns them): `old = hl.atomic_add(...)`
        emitter.line(f"{emitter.name_of(node)} = tl.atomic_{atomic}({pointer}, {text}{extra}, "
                     f"sem='{node.params.get('sem') or 'relaxed'}')")
    else:
        emitter.line(f"tl.store({pointer}, {text}{extra})")


def _stored_text(emitter: Emitter, node: Node, value: Any) -> str:
    """A value a store writes, in the tensor's dtype and the store's block shape."""
    target = node.params["tensor"].dtype
    if not isinstance(value, Node):
        return f"tl.full({emitter.block_shape(node.shape)}, {print_expr(value)}, {TRITON_DTYPES[target]})"
    text = emitter.operand(value, target)
    if value.shape != node.shape:
        text = f"tl.broadcast_to({text}, {emitter.block_shape(node.shape)})"
    return text


def _full(emitter: Emitter, node: Node) -> None:
    constant = node.inputs[0]
    if isinstance(constant, float) and not node.dtype.is_floating_point and constant == constant \
            and abs(constant) != float("inf"):
        # torch.full_like(int_tensor, 2.5) holds 2 (the GPU's builder refuses a float for an int)
        constant = bool(constant) if node.dtype == torch.bool else int(constant)
    value = print_expr(constant)
    if emitter.interpret and node.dtype == torch.bfloat16:
        # Triton 3.6's interpreter has no bf16 constants: fill in fp32 and round
        filled = emitter.cast(f"tl.full({emitter.block_shape(node.shape)}, {value}, tl.float32)", torch.float32,
                              torch.bfloat16)
        emitter.line(f"{emitter.name_of(node)} = {filled}")
        return
    emitter.line(f"{emitter.name_of(node)} = tl.full({emitter.block_shape(node.shape)}, {value}, "
                 f"{TRITON_DTYPES[node.dtype]})")


def _symbolic(emitter: Emitter, node: Node) -> None:
    emitter.line(f"{emitter.name_of(node)} = {print_expr(node.params['expr'])}")


def _tile_index(emitter: Emitter, node: Node) -> None:
    emitter.line(f"{emitter.name_of(node)} = idx_{node.params['axis'].name}.to(tl.int32)")


def _arange(emitter: Emitter, node: Node) -> None:
    axis = node.shape[0]
    emitter.line(f"{emitter.name_of(node)} = ({node.params['begin']} + idx_{axis.name} * {node.params['step']})"
                 f".to({TRITON_DTYPES[node.dtype]})")


def _random(emitter: Emitter, node: Node) -> None:
    """Philox numbers (tl.rand / tl.randint) at each element's row-major number in the loops'
    full extents, or at the given offsets: the same numbers under any block sizes."""
    seed, offsets = node.inputs
    seed_text = emitter.operand(seed, torch.int64)
    if offsets is not None:
        numbers = emitter.operand(offsets, torch.int64)
    else:
        numbers = f"tl.zeros({emitter.block_shape(node.shape)}, tl.int64)"
        for axis in node.shape:
            if axis is not UNIT:
                extent = print_expr(axis.range_end - axis.range_begin)
                numbers = f"({numbers}) * ({extent}) + {emitter.axis_index(axis, node.shape)}.to(tl.int64)"
    if node.params["fn"] in ("rand", "randn"):
        _assign(emitter, node, f"tl.{node.params['fn']}({seed_text}, {numbers})")
        return
    if node.params["fn"] == "rand4x":  # four results, named as _item reads them
        names = ", ".join(f"{emitter.name_of(node)}_{i}" for i in range(4))
        emitter.line(f"{names} = tl.rand4x({seed_text}, {numbers})")
        return
    low, high = node.params["low"], node.params["high"]
    emitter.line(f"{emitter.name_of(node)} = tl.randint({seed_text}, {numbers}).to(tl.int32, bitcast=True).to(tl.int64)")
    _assign(emitter, node, f"({low} + tl.abs({emitter.name_of(node)}) % {high - low}).to(tl.int32)")


def _dequantize(emitter: Emitter, node: Node) -> None:
    """hl.dot_scaled's operand: its values (fp8 bits bitcast) times 2**(scale - 127), each scale
    repeated over its 32 elements of K (the trace checked the blocks line up)."""
    data, scale = node.inputs
    values = emitter.name_of(data)
    if data.dtype == torch.uint8:  # the bits of an fp8 format
        values = f"{values}.to({TRITON_DTYPES[FP8_FORMATS[node.params['format']]]}, bitcast=True)"
    outer = scale.shape[0].block
    groups = scale.shape[1].block
    factor = f"tl.exp2({emitter.name_of(scale)}.to(tl.float32) - 127.0)"
    spread = f"tl.reshape(tl.broadcast_to({factor}[:, :, None], [{outer}, {groups}, 32]), [{outer}, {groups * 32}])"
    if not node.params["rows"]:
        spread = f"tl.trans({spread})"
    emitter.line(f"{emitter.name_of(node)} = {values}.to(tl.float32) * {spread}")


FP8_FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


# Config list -> (tl.range keyword, how an entry becomes its value; None: leave it to Triton)
_RANGE_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "range_num_stages": ("num_stages", lambda n: n or None),
    "range_unroll_factors": ("loop_unroll_factor", lambda n: n or None),
    "range_flattens": ("flatten", lambda flag: flag),
    "range_warp_specializes": ("warp_specialize", lambda flag: flag),
    "range_multi_buffers": ("disallow_acc_multi_buffer", lambda flag: None if flag is None else not flag),
}


def _range_options(emitter: Emitter, node: Node) -> str:
    """The `tl.range` keywords the Config's range_* lists give this device loop.

    Helion numbers its tile loops in source order, top-level ones included; a device loop here is
    entry `launch_index + 1 + (its number among this kernel's device loops)`, exact when earlier
    top-level loops have no device loops of their own. Triton's interpreter ignores them."""
    position = emitter.ir.launch_index + 1 + emitter.numbered("loop", node)
    options = []
    for key, (keyword, convert) in _RANGE_KEYS.items():
        entries = emitter.config.get(key) or []
        value = convert(entries[position]) if position < len(entries) else None
        if value is None and keyword == "num_stages":  # a loop Triton would not pipeline by itself
            value = loop_stages(node.blocks[0].nodes, emitter.config)
        if value is not None:
            options.append(f", {keyword}={value!r}")
    return "".join(options)


def _flat_accumulators(emitter: Emitter, node: Node) -> list[tuple[Node, Node]]:
    """The (placeholder, product) pairs of this loop whose carried value is only the accumulator
    of one batched product of one matrix per program (bmm's K loop): the loop carries it in 2-D.
    Carried in 3-D and reshaped around the product, Triton 3.6's pipeliner failed on it for sm_90
    ("operand #0 does not dominate this use") once the operands loaded as 2-D blocks."""
    pairs = []
    body = list(walk_blocks(node.blocks))
    for placeholder, output in zip(node.params["carried"], node.params["outputs"]):
        if not (isinstance(output, Node) and output.op is Op.DOT and output.inputs[2] is placeholder
                and squeezed_product(output) and output.dtype == output.params["accumulate"]
                and placeholder.dtype == output.dtype and output not in emitter.chunked_dots
                and not output.params.get("small") and output in node.blocks[0].nodes):
            continue
        if [user for user in body if placeholder in user.inputs] != [output]:
            continue
        pairs.append((placeholder, output))
    return pairs


def _dot(emitter: Emitter, node: Node) -> None:
    emit_dot(emitter, node, emit_block)


def _carried(emitter: Emitter, node: Node) -> None:
    """A loop-carried value enters its loop as a variable holding the entry value."""
    emitter.line(f"{emitter.name_of(node)} = {emitter.name_of(node.inputs[0])}")


def _loop(emitter: Emitter, node: Node) -> None:
    if node is emitter.split_loop:  # no carried values (ir/loop_split.py)
        def body() -> None:
            for loop in node.params["loops"]:
                emitter.define_axis(loop.axis)
            emit_block(emitter, node.blocks[0])
        emit_split_loop(emitter, node, body)
        return
    placeholders = node.params["carried"]
    plan = emitter.split_reduction if emitter.split_reduction is not None and node is emitter.split_reduction.loop else None
    flat = [] if plan is not None or node.params.get("tail_of") is not None else _flat_accumulators(emitter, node)
    for placeholder, output in flat:
        emitter.flat[placeholder] = f"{emitter.name_of(placeholder)}_2d"
        emitter.flat[output] = f"{emitter.name_of(output)}_2d"
    for placeholder in placeholders:
        if placeholder in emitter.flat:
            entry = emitter.name_of(placeholder.inputs[0])
            emitter.line(f"{emitter.flat[placeholder]} = tl.reshape({entry}, {emitter.block_shape(placeholder.shape[-2:])})")
        else:
            _carried(emitter, placeholder)
    whole_tiles = node.params.get("tail_of")
    if whole_tiles is not None:  # a peeled last tile: its loads and loops keep the whole tiles' Config entries
        emitter.twins.update(zip(walk_blocks(node.blocks), walk_blocks(whole_tiles.blocks)))
        emitter.twins[node] = whole_tiles
    # at most one iteration: nothing to pipeline
    options = ", num_stages=1" if whole_tiles is not None else _range_options(emitter, node)
    for loop in node.params["loops"]:
        begin, end = (print_expr(loop.begin), print_expr(loop.end)) if plan is None else \
            split_k_code.slice_bounds(emitter, loop, emitter.splits)
        emitter.line(f"for {loop.variable} in tl.range({begin}, {end}, {loop.step}{options}):")
        emitter.indent += 1
    for loop in node.params["loops"]:
        if loop.axis is not None:
            emitter.define_axis(loop.axis)
    emit_block(emitter, node.blocks[0])
    for placeholder, output in zip(placeholders, node.params["outputs"]):
        if placeholder in emitter.flat:
            emitter.line(f"{emitter.flat[placeholder]} = {emitter.flat[output]}")
        else:
            emitter.line(f"{emitter.name_of(placeholder)} = {emitter.name_of(output)}")
    if not placeholders and not node.blocks[0].nodes:
        emitter.line("pass")
    emitter.indent -= len(node.params["loops"])
    for placeholder, _ in flat:  # after the loop, its users read the 3-D value
        emitter.line(f"{emitter.name_of(placeholder)} = tl.reshape({emitter.flat[placeholder]}, "
                     f"{emitter.block_shape(placeholder.shape)})")
    if plan is not None:  # the rest of the body runs in the tile's last program (split_reduction.py)
        split_k_code.emit_partial_sums(emitter, plan, emitter.splits)


LOWERINGS: dict[Op, Callable[[Emitter, Node], None]] = {
    Op.ELEMENTWISE: _elementwise, Op.CAST: _cast, Op.SYMBOLIC: _symbolic,
    Op.FULL: _full, Op.ARANGE: _arange, Op.TILE_INDEX: _tile_index, Op.RANDOM: _random,
    Op.INLINE_ASM: inline_asm, Op.INLINE_TRITON: inline_triton, Op.DEVICE_PRINT: device_print, Op.BREAKPOINT: device_breakpoint,
    Op.LOAD: _load, Op.STORE: _store, Op.DEQUANTIZE: _dequantize,
    Op.REDUCE: _reduce, Op.SCAN: _scan, Op.DOT: _dot, Op.ARGUMENT: _argument, Op.ITEM: _item,
    Op.VIEW: _view, Op.RESHAPE: _reshape, Op.PERMUTE: _permute, Op.BROADCAST: _broadcast, Op.JOIN: _join, Op.SPLIT: _split, Op.CAT: _cat, Op.SORT: emit_sort,
    Op.LOOP: _loop, Op.CARRIED: _carried,
}


def emit_block(emitter: Emitter, block: Block) -> None:
    """Each node's lines, under a `# file:line: source` comment per run of nodes from one line."""
    if emitter.skipped:  # read only by products emitted in chunks: never needed whole
        block = Block(tuple(node for node in block.nodes if node not in emitter.skipped))
    emit_lines(emitter, block, LOWERINGS, "Triton")
