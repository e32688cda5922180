"""The Pallas backend's lowering table: one rule per IR `Op`, each writing JAX lines through the emitter.

    LOWERINGS[Op.REDUCE](emitter, node)   # writes `v5 = jnp.sum(jnp.where(mask_r0[None, :], v4, 0), axis=1)`

Elementwise ops lower by name through `ELEMENTWISE_TEMPLATES` (a jnp expression over operands
`{0} {1} {2}`, each already cast to the dtype the node computes in). Ops or functions missing here
are refused by `PallasBackend.check` at the kernel line that uses them.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from tessera.backends.pallas.emitter import Emitter, join_masks
from tessera.backends.pallas.printer import print_expr
from tessera.backends.source_text import PYTHON_OPERATOR_TEMPLATES
from tessera.backends.source_text import emit_block as emit_lines
from tessera.backends.source_text import reduction_identity as shared_identity
from tessera.ir.graph import Block, Node, Op

ELEMENTWISE_TEMPLATES: dict[str, str] = {
    **PYTHON_OPERATOR_TEMPLATES,
    "floordiv": "jnp.floor_divide({0}, {1})",
    "mod": "jnp.remainder({0}, {1})",
    "fmod": "jnp.fmod({0}, {1})",
    "pow": "jnp.power({0}, {1})",
    "maximum": "jnp.maximum({0}, {1})",   # NaN propagates, as in torch
    "minimum": "jnp.minimum({0}, {1})",
    "lshift": "jnp.left_shift({0}, {1})",
    "rshift": "jnp.right_shift({0}, {1})",  # arithmetic on signed ints, as torch's >>
    "invert": "jnp.invert({0})",          # logical not on bool, bit flip on ints
    "abs": "jnp.abs({0})",
    "relu": "jnp.where({0} < 0, jnp.zeros_like({0}), {0})",  # NaN and -0.0 pass as in torch
    "exp": "jnp.exp({0})",
    "exp2": "jnp.exp2({0})",
    "log": "jnp.log({0})",
    "log2": "jnp.log2({0})",
    "log1p": "jnp.log1p({0})",
    "sqrt": "jnp.sqrt({0})",
    "rsqrt": "lax.rsqrt({0})",
    "reciprocal": "(1.0 / {0})",
    "sigmoid": "(1.0 / (1.0 + jnp.exp(-{0})))",
    "tanh": "jnp.tanh({0})",
    "sin": "jnp.sin({0})",
    "cos": "jnp.cos({0})",
    "erf": "lax.erf({0})",
    "gelu": "(0.5 * {0} * (1.0 + lax.erf({0} * 0.7071067811865476)))",
    "where": "jnp.where({0}, {1}, {2})",
    "silu": "({0} / (1.0 + jnp.exp(-{0})))",
    "floor": "jnp.floor({0})",
    "ceil": "jnp.ceil({0})",
    "trunc": "jnp.trunc({0})",
}
_COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})  # bool results: no cast back

REDUCTION_FUNCTIONS = {"sum": "jnp.sum", "amax": "jnp.max", "amin": "jnp.min", "argmax": "jnp.argmax",
                       "argmin": "jnp.argmin"}
ATOMICS = {"add": "add", "max": "max", "min": "min", "xchg": "set"}  # hl.atomic_<name> -> `.at[...]` method


def reduction_identity(fn: str, dtype: torch.dtype) -> str:
    """The value masked lanes take so they never win."""
    return shared_identity(fn, dtype, "jnp.inf")


def _assign(emitter: Emitter, node: Node, expression: str) -> None:
    emitter.line(f"{node.name} = {expression}")


def _elementwise(emitter: Emitter, node: Node) -> None:
    fn, compute = node.params["fn"], node.params["compute"]
    operands = [emitter.operand(value, compute if fn != "where" or position > 0 else None)
                for position, value in enumerate(node.inputs)]
    template = ELEMENTWISE_TEMPLATES[fn]
    if compute == torch.bool and fn == "add":
        template = "jnp.logical_or({0}, {1})"  # torch adds bools as a logical or
    if fn == "floordiv" and compute.is_floating_point:
        template = "float_floordiv({0}, {1})"  # torch's fmod-based formula (codegen.py's helper)
    elif fn == "floordiv" and compute != torch.bool and emitter.blocks is not None:
        template = "int_floordiv({0}, {1})"  # Mosaic lowers jnp.floor_divide's sign only on a TPU
    text = template.format(*operands)
    if fn in _COMPARISONS or (compute == node.dtype and all(isinstance(v, Node) for v in node.inputs)):
        _assign(emitter, node, text)  # operands of the compute dtype give it back
    else:  # a constant operand may be a Python scalar, and the result may be narrower than `compute`
        _assign(emitter, node, f"jnp.asarray({text}).astype({emitter.dtype(node.dtype)})")


def _reduce(emitter: Emitter, node: Node) -> None:
    fn = node.params["fn"]
    source = node.inputs[0]
    accumulate = node.params["accumulate"]
    if accumulate in (torch.float16, torch.bfloat16):
        accumulate = torch.float32  # 16-bit floats reduce in fp32, as torch's CPU kernels do
    operand = emitter.cast(source.name, source.dtype, accumulate)
    axis = node.params["axis"]
    if axis.needs_mask:
        operand = f"jnp.where({emitter.axis_mask(axis, source.shape)}, {operand}, {reduction_identity(fn, source.dtype)})"
    dim, keepdim = node.params["dim"], node.params["keepdim"]
    text = f"{REDUCTION_FUNCTIONS[fn]}({operand}, axis={dim}, keepdims={keepdim})"
    if fn in ("argmax", "argmin") and emitter.blocks is not None:  # Mosaic's index type is int32
        text = f"lax.{fn}({operand}, {dim}, jnp.int32)"
        text = f"jnp.expand_dims({text}, {dim})" if keepdim else text
    _assign(emitter, node, f"{text}.astype({emitter.dtype(node.dtype)})")


def _cast(emitter: Emitter, node: Node) -> None:
    if node.params.get("bitcast"):  # `v.view(dtype)`: the same bits
        _assign(emitter, node, f"lax.bitcast_convert_type({node.inputs[0].name}, {emitter.dtype(node.dtype)})")
        return
    _assign(emitter, node, emitter.cast(node.inputs[0].name, node.inputs[0].dtype, node.dtype))


def _view(emitter: Emitter, node: Node) -> None:
    source = node.inputs[0]
    if node.params.get("what") == "lanes":  # the pre-broadcast pass's lane views (prebroadcast.py)
        _assign(emitter, node, _lane_view(emitter, source, node))
        return
    _assign(emitter, node, f"jnp.reshape({source.name}, {emitter.block_shape(node.shape)})")


def _lane_view(emitter: Emitter, source: Node, node: Node) -> str:
    """A value whose last dim holds `lanes` identical lanes, to or from the shape its consumer needs:
    widen (broadcast a new lane dim), tile (128 -> 256, 512...), slice (128 -> 64), or collapse."""
    lanes = node.params["lanes"]
    width = node.shape[-1].block if node.shape else 1
    if node.params["how"] == "widen":
        return f"jnp.broadcast_to({source.name}[..., None], {emitter.block_shape(node.shape)})"
    if node.params["how"] == "relabel":
        return source.name
    if node.params["how"] == "unit":
        return f"{source.name}[..., None]"
    if node.params["how"] == "collapse":
        return f"jnp.reshape({source.name}[..., :1], {emitter.block_shape(node.shape)})"
    if width == lanes:
        return source.name
    if width < lanes:
        return f"{source.name}[..., :{width}]"
    copies = -(-width // lanes)
    tiled = f"jnp.tile({source.name}, ({', '.join(['1'] * (len(node.shape) - 1) + [str(copies)])}))"
    return tiled if copies * lanes == width else f"{tiled}[..., :{width}]"


def _permute(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, f"jnp.transpose({node.inputs[0].name}, {tuple(node.params['order'])})")


def _broadcast(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, f"jnp.broadcast_to({node.inputs[0].name}, {emitter.block_shape(node.shape)})")


def _load(emitter: Emitter, node: Node) -> None:
    if emitter.blocks is not None:
        index, masks, shapes = emitter.blocked_access(node)
        mask = join_masks(masks, node.inputs[0])
        emitter.line(f"{node.name} = read({emitter.ref_of(node)}, {index}, {mask}, {shapes})")
        return
    offsets, masks = emitter.address(node)
    mask = join_masks(masks, node.inputs[0])
    emitter.line(f"{node.name} = load({emitter.ref_of(node)}, {offsets}, {mask}, {emitter.block_shape(node.shape)})")


def _store(emitter: Emitter, node: Node) -> None:
    value, mask_node = node.inputs
    target = node.params["tensor"].dtype
    text = emitter.operand(value, target)
    if emitter.blocks is not None:  # atomics have no blocked form (blocks.py)
        index, masks, shapes = emitter.blocked_access(node)
        mask = join_masks(masks, mask_node)
        emitter.line(f"write({emitter.ref_of(node)}, {index}, {mask}, {shapes}, {text})")
        return
    offsets, masks = emitter.address(node)
    mask = join_masks(masks, mask_node)
    ref = emitter.ref_of(node)
    shape = emitter.block_shape(node.shape)
    atomic = node.params.get("atomic")
    if atomic:  # the previous values are the op's result (`old = hl.atomic_add(...)`)
        emitter.line(f"{node.name} = load({ref}, {offsets}, {mask}, {shape})")
        emitter.line(f"store({ref}, {offsets}, {mask}, {shape}, {text}, how={ATOMICS[atomic]!r})")
    else:
        emitter.line(f"store({ref}, {offsets}, {mask}, {shape}, {text})")


def _full(emitter: Emitter, node: Node) -> None:
    constant = node.inputs[0]
    if isinstance(constant, float) and not node.dtype.is_floating_point and constant == constant \
            and abs(constant) != float("inf"):
        constant = bool(constant) if node.dtype == torch.bool else int(constant)  # full_like(int, 2.5) holds 2
    _assign(emitter, node, f"jnp.full({emitter.block_shape(node.shape)}, {print_expr(constant)}, "
                           f"{emitter.dtype(node.dtype)})")


def _symbolic(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, f"jnp.asarray({print_expr(node.params['expr'])}).astype({emitter.dtype(node.dtype)})")


def _tile_index(emitter: Emitter, node: Node) -> None:
    _assign(emitter, node, f"idx_{node.params['axis'].name}.astype(jnp.int32)")


def _arange(emitter: Emitter, node: Node) -> None:
    axis = node.shape[0]
    _assign(emitter, node, f"({node.params['begin']} + idx_{axis.name} * {node.params['step']})"
                           f".astype({emitter.dtype(node.dtype)})")


def _dot(emitter: Emitter, node: Node) -> None:
    """`jnp.matmul` with the accumulator's dtype as the result type (fp32 for 16-bit inputs)."""
    a, b, acc = node.inputs
    common = torch.promote_types(a.dtype, b.dtype)
    accumulate = node.params["accumulate"]
    left, right = emitter.operand(a, common), emitter.operand(b, common)
    text = (f"jnp.matmul({left}, {right}, preferred_element_type={emitter.dtype(accumulate)}, "
            f"precision=lax.Precision.HIGHEST)")
    if acc is not None:
        text = f"{emitter.operand(acc, accumulate)} + {text}"
    _assign(emitter, node, emitter.cast(f"({text})", accumulate, node.dtype))


def _carried(emitter: Emitter, node: Node) -> None:
    """A loop-carried value enters its loop as a variable holding the entry value."""
    emitter.line(f"{node.name} = {node.inputs[0].name}")


def _loop(emitter: Emitter, node: Node) -> None:
    """Nested `lax.fori_loop`s, one per loop dim, carrying the loop-carried values as a tuple."""
    placeholders = node.params["carried"]
    for placeholder in placeholders:
        _carried(emitter, placeholder)
    names = "(" + "".join(f"{p.name}, " for p in placeholders).rstrip(" ") + ")"
    number = emitter.loops
    emitter.loops += 1
    loops = node.params["loops"]
    outer_indent = emitter.indent
    for depth, loop in enumerate(loops):
        body = f"loop{number}_{depth}"
        emitter.line(f"def {body}(step_{number}_{depth}, carry):")
        emitter.indent += 1
        emitter.line(f"{loop.variable} = {print_expr(loop.begin)} + step_{number}_{depth} * {loop.step}")
        if depth + 1 < len(loops):
            continue
        emitter.line(f"{names} = carry")
        for dim in loops:
            if dim.axis is not None:
                emitter.define_axis(dim.axis)
        emit_block(emitter, node.blocks[0])
        outputs = "(" + "".join(f"{o.name}, " for o in node.params["outputs"]).rstrip(" ") + ")"
        emitter.line(f"return {outputs}")
    # close the bodies from the innermost out: each outer body runs the next loop
    for depth in reversed(range(len(loops))):
        emitter.indent -= 1
        count = _trip_count(emitter, loops[depth])
        call = f"lax.fori_loop(0, {count}, loop{number}_{depth}, {'carry' if depth else names})"
        emitter.line(f"return {call}" if depth else f"{names} = {call}")
    emitter.indent = outer_indent


def _trip_count(emitter: Emitter, loop: Any) -> str:
    """ceil((end - begin) / step), at least 0; int32 truncating division in the blocked form (a
    non-negative numerator by then), as Mosaic lowers no scalar floor division without a TPU."""
    extent = f"{print_expr(loop.end)} - ({print_expr(loop.begin)})"
    if emitter.blocks is not None:
        return f"lax.div(jnp.maximum(jnp.int32({extent}), 0) + {loop.step - 1}, jnp.int32({loop.step}))"
    return f"jnp.maximum(-((-({extent})) // {loop.step}), 0)"


LOWERINGS: dict[Op, Callable[[Emitter, Node], None]] = {
    Op.ELEMENTWISE: _elementwise, Op.CAST: _cast, Op.SYMBOLIC: _symbolic,
    Op.FULL: _full, Op.ARANGE: _arange, Op.TILE_INDEX: _tile_index,
    Op.LOAD: _load, Op.STORE: _store,
    Op.REDUCE: _reduce, Op.DOT: _dot,
    Op.VIEW: _view, Op.PERMUTE: _permute, Op.BROADCAST: _broadcast,
    Op.LOOP: _loop, Op.CARRIED: _carried,
}


def emit_block(emitter: Emitter, block: Block) -> None:
    """Each node's lines, under a `# file:line: source` comment per run of nodes from one line."""
    emit_lines(emitter, block, LOWERINGS, "Pallas")
