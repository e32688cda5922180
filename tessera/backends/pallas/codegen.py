"""KernelIR + Config -> one readable Pallas kernel and the `pl.pallas_call` that runs it.

Why whole-array refs with explicit masked index math, not BlockSpecs: Tessera's IR addresses
memory the way PyTorch describes it (a view's offset and strides, scalar and gathered indices,
loop tiles whose bounds are loaded on the device, tails of any size). A BlockSpec can express a
tile of a launch axis over a dense array, but not a strided view with a runtime offset, a gather,
or a tile of an inner loop with a data-dependent bound; and on the CPU interpreter an
out-of-bounds block is clamped, not masked, so tails would need padding on the host. So every
tensor is one flat `(1, span)` ref over its storage, each program computes its indices and masks
as the Triton backend does, and loads/stores are masked gathers/scatters (`load`, `store` below).
This runs every kernel the IR can express; the price is that Mosaic (the TPU compiler) does not
lower the scatter a store becomes. So a kernel whose accesses allow it is generated in the
blocked form instead (blocks.py: BlockSpecs over each tensor's own dims, padded on the host to
whole blocks, `pl.ds` slices, int32 index math), which Mosaic lowers; Config `pallas_addressing`
picks ('auto', the default: blocked where possible; 'blocks'; 'flat'). See docs/backends.md for
what was verified for TPUs.

The grid is the IR's launch grid, one Pallas grid dimension per tile-loop dimension
(`pl.program_id(d)`). Every `# file:line` comment names the kernel line the code below it runs.
"""
from __future__ import annotations

import re
from typing import Any

import sympy

from tessera.backends.base import LoweredKernel, LoweringOptions
from tessera import exc
from tessera.backends.pallas.blocks import BlockPlan, Refusal, plan_blocks
from tessera.backends.pallas.emitter import Emitter, written_tensors
from tessera.backends.pallas.lowering import emit_block
from tessera.backends.pallas.printer import blocked_printing, print_expr
from tessera.config import Config
from tessera.ir.graph import KernelIR

_HELPERS = '''

def load(ref, offsets, mask, shape):
    """The elements of a flat `(1, span)` ref at `offsets` (a block of `shape`); 0 where `mask` is False."""
    flat = ref[0, :]
    offsets = jnp.broadcast_to(offsets, shape)
    mask = jnp.broadcast_to(mask, shape)
    values = jnp.take(flat, jnp.where(mask, offsets, 0))
    return jnp.where(mask, values, jnp.zeros((), flat.dtype))


def store(ref, offsets, mask, shape, values, how="set"):
    """Write `values` at `offsets` of a flat ref where `mask` holds (elsewhere the index is past the
    end, and the scatter drops it); `how` is an atomic's combine (add, max, min)."""
    flat = ref[0, :]
    offsets = jnp.where(jnp.broadcast_to(mask, shape), jnp.broadcast_to(offsets, shape), flat.shape[0])
    values = jnp.broadcast_to(jnp.asarray(values).astype(flat.dtype), shape)
    ref[0, :] = getattr(flat.at[offsets], how)(values, mode="drop")

'''


_BLOCK_HELPERS = '''

def read(ref, index, mask, permutation, shape, loaded):
    """`ref[index]` (a block of shape `loaded`, the ref's dims in order) as the node's block `shape`;
    0 where `mask` is False."""
    values = ref[index]
    if permutation is not None:
        values = jnp.transpose(values, permutation)
    values = jnp.reshape(values, shape)
    return values if mask is True else jnp.where(mask, values, jnp.zeros((), values.dtype))


def write(ref, index, mask, permutation, shape, loaded, values):
    """Store a block of `shape` at `ref[index]`; where `mask` is False the old values stay."""
    values = jnp.broadcast_to(jnp.asarray(values).astype(ref.dtype), shape)
    if mask is not True:
        values = jnp.where(mask, values, read(ref, index, True, permutation, shape, loaded))
    if permutation is not None:
        values = jnp.reshape(values, tuple(loaded[p] for p in permutation))
        values = jnp.transpose(values, tuple(permutation.index(d) for d in range(len(permutation))))
    ref[index] = jnp.reshape(values, loaded)


def pad_to_blocks(array, rank, multiples, extras):
    """`array` (rank 1 as (1, n)) padded with zeros at the end of each dim to whole blocks."""
    if rank == 1:
        array = jnp.reshape(array, (1, array.shape[0]))
    widths = [(0, -(-max(size, 1) // m) * m + extra - size) for size, m, extra in zip(array.shape, multiples, extras)]
    return jnp.pad(array, widths) if any(width for _, width in widths) else array


def block_spec(shape, grid_dims, blocks):
    """The BlockSpec of a padded tensor: block `pid_d` of a blocked dim, the whole dim otherwise
    (`None` blocks of squeezed dims drop out of the kernel's ref)."""
    block_shape = tuple(size if grid is None else block for size, grid, block in zip(shape, grid_dims, blocks))
    return pl.BlockSpec(block_shape, lambda *pids: tuple(0 if grid is None else pids[grid] for grid in grid_dims))

'''


# helpers emitted only where the body calls them (by name)
HELPERS = {
    "int_floordiv": '''
def int_floordiv(a, b):
    """Integer `a // b` rounded toward -inf, from the truncating division and its remainder."""
    dtype = jnp.result_type(a, b)
    a, b = jnp.asarray(a).astype(dtype), jnp.asarray(b).astype(dtype)
    quotient, remainder = lax.div(a, b), lax.rem(a, b)
    return quotient - ((remainder != 0) & ((remainder < 0) != (b < 0))).astype(quotient.dtype)

''',
    "float_floordiv": '''
def float_floordiv(a, b):
    """Float `a // b` as torch computes it (div_floor_floating): from fmod, so the result never
    exceeds the true quotient (1.0 // 0.1 is 9), and a zero result keeps the quotient's sign."""
    mod = jnp.fmod(a, b)
    quotient = (a - mod) / b
    quotient = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), quotient - 1.0, quotient)
    floored = jnp.floor(quotient)
    floored = jnp.where(quotient - floored > 0.5, floored + 1.0, floored)
    result = jnp.where(quotient != 0, floored, (a / b) * 0.0)
    return jnp.where(b == 0, a / b, result)

''',
}


def program_counts(ir: KernelIR) -> tuple[sympy.Expr, ...]:
    """Programs per launch dim: ceil((end - begin) / step), never negative (one program for no dims)."""
    if not ir.grid:
        return (sympy.Integer(1),)
    return tuple(sympy.Max(sympy.ceiling((dim.end - dim.begin) / dim.step), 0) for dim in ir.grid)


# why a launch ran the flat form that an 'auto' blocked kernel carries for it (backend.PallasKernel)
VIEW_FALLBACK = ("an argument's sizes or strides differ from the constant ones the kernel addresses (a view "
                 "made inside the kernel): this launch ran the flat form")


def lower_kernel(ir: KernelIR, config: Config, options: LoweringOptions,
                 flat_reason: str = "Config pallas_addressing='flat' asks for the flat form") -> LoweredKernel:
    """The module text of one Pallas kernel: imports, helpers, the kernel and its `launch`; the
    blocked form where the kernel allows it and `pallas_addressing` does not say 'flat'. An 'auto'
    blocked kernel whose tensors have constant sizes or strides also carries its flat form
    (`launch_options['flat']`), run for arguments that lack them (a view made inside the kernel)."""
    addressing = config.get("pallas_addressing", "auto")
    planned: BlockPlan | Refusal = (Refusal(flat_reason, ir.location) if addressing == "flat" else plan_blocks(ir))
    if isinstance(planned, Refusal) and addressing == "blocks":
        raise exc.UnsupportedOperationError(
            f"no blocked (TPU) form for this kernel: {planned.reason}", location=planned.location,
            hint="drop pallas_addressing='blocks' from the Config (the flat form runs it in interpret mode)")
    blocks = planned if isinstance(planned, BlockPlan) else None
    emitter = Emitter(ir, config, blocks)
    tensors = _tensor_parameters(ir)
    for dim, grid_dim in enumerate(ir.grid):
        emitter.line(f"pid_{dim} = pl.program_id({dim})")
        emitter.line(f"offset_{dim} = {print_expr(grid_dim.begin)} + pid_{dim} * {grid_dim.step}")
    _copy_in_outputs(emitter, ir, blocks)
    for axis in (*ir.launch_axes, *ir.whole_axes):
        emitter.define_axis(axis)
    with blocked_printing(blocks is not None):
        emit_block(emitter, ir.body)
    # the scalars the code reads (sizes and strides that guards alone use are not read)
    used = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", "\n".join(emitter.lines)))
    element = "[0]" if blocks else "[0, 0]"
    scalars = [f"    {name} = {name}_ref{element}" for name in ir.parameters if name not in tensors and name in used]
    emitter.lines[:0] = scalars
    emitter.locations = {index + len(scalars): where for index, where in emitter.locations.items()}
    written = written_tensors(ir)
    body = "\n".join(emitter.lines)
    name = f"{ir.name}_kernel"
    tpu_interpreter = config.get("pallas_interpreter", "jax") == "tpu"
    interpret = "pltpu.InterpretParams()" if tpu_interpreter and options.interpret else str(options.interpret)
    refs = [f"{p}_ref" for p in ir.parameters] + [f"{p}_out" for p in written]
    form = (["# Blocked form: BlockSpecs over each tensor's own dims (padded on the host to whole blocks),",
             "# pl.ds slices and int32 index math; scalars are (1,) SMEM refs."] if blocks else
            ["# Flat form: tensors are flat (1, span) refs over their storage; scalars are (1, 1) refs."])
    header = [
        "# Generated by Tessera for JAX Pallas. Each `# file:line` comment names the kernel source line below it.",
        *form,
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.experimental import pallas as pl",
        *(["from jax.experimental.pallas import tpu as pltpu"] if tpu_interpreter or blocks else []),
        *(_BLOCK_HELPERS if blocks else _HELPERS).split("\n"),
        *[line for helper in sorted(HELPERS) if f"{helper}(" in body for line in HELPERS[helper].split("\n")],
        f"def {name}({', '.join(refs)}):",
    ]
    positions = {p: i for i, p in enumerate(ir.parameters)}
    outputs = ", ".join(f"{positions[p]}: {i}" for i, p in enumerate(written))
    footer = [
        "",
        "",
        f"WRITTEN = {tuple(positions[p] for p in written)!r}  # parameters the kernel writes (its outputs)",
        f"TENSORS = {tuple(positions[p] for p in tensors)!r}",
        f"SCALAR_DTYPES = {_scalar_dtypes(ir, positions, blocks)!r}  # numpy dtypes of the scalar arguments",
        f"ADDRESSING = {'blocks' if blocks else 'flat'!r}",
        f"INTERPRET = {interpret}",
        "",
        "",
        *(_blocked_launch(name, blocks, positions, tensors, outputs) if blocks else [
            "def launch(grid, *arguments, interpret=INTERPRET):",
            "    out_shape = [jax.ShapeDtypeStruct(arguments[i].shape, arguments[i].dtype) for i in WRITTEN]",
            f"    return pl.pallas_call({name}, grid=grid, out_shape=out_shape, input_output_aliases={{{outputs}}},",
            "                          interpret=interpret)(*arguments)"]),
    ]
    locations = {index + len(header) + 1: where for index, where in emitter.locations.items()}
    source = "\n".join(header + emitter.lines + footer) + "\n"
    extra: dict[str, Any] = {"tpu_refusal": None if blocks else planned}
    if blocks and addressing == "auto" and any(v is not None for plan in blocks.tensors.values()
                                               for values in plan.layout for v in values):
        extra["flat"] = lower_kernel(ir, Config(**{**config.to_dict(), "pallas_addressing": "flat"}), options,
                                     VIEW_FALLBACK)
    return LoweredKernel(name, source, program_counts(ir), (), locations, extra, ir.location)


def _copy_in_outputs(emitter: Emitter, ir: KernelIR, blocks: BlockPlan | None) -> None:
    """On a TPU (and in the TPU-semantics interpreter) an output block starts uninitialized
    (aliasing its input does not copy the input in), so a masked store's old values, and loads of
    a written tensor, would be garbage: each written tensor's block is copied from its input at
    the first grid step of the run of steps that visit it (its index map uses grid dims 0..j: the
    steps where pids j+1.. are 0; the flat form's whole refs: the first step)."""
    for name in written_tensors(ir):
        used = [dim for dim in blocks.tensors[name].grid_dims if dim is not None] if blocks else []
        first_step = " & ".join(f"(pid_{dim} == 0)" for dim in range(max(used, default=-1) + 1, len(ir.grid)))
        if not first_step:
            emitter.line(f"{name}_out[...] = {name}_ref[...]")
            continue
        emitter.line(f"@pl.when({first_step})")
        emitter.line(f"def copy_in_{name}():  # the block's values before the kernel, at the first step of its run")
        emitter.line(f"    {name}_out[...] = {name}_ref[...]")


def _blocked_launch(name: str, blocks: BlockPlan, positions: dict[str, int], tensors: tuple[str, ...],
                    outputs: str) -> list[str]:
    """`launch` of the blocked form: pad, one BlockSpec per tensor, SMEM scalars, un-pad the results."""
    table = {positions[t]: (plan.rank, plan.grid_dims, plan.blocks, plan.multiples, plan.extras)
             for t, plan in blocks.tensors.items()}
    unused = tuple(positions[t] for t in tensors if t not in blocks.tensors)
    layouts = {positions[t]: plan.layout for t, plan in blocks.tensors.items()}
    return [
        "# tensor position -> (rank, grid dim per dim, block per dim, pad multiple per dim, extra padding per dim)",
        f"BLOCKS = {table!r}",
        "# tensor position -> (sizes, strides) where constant: the runner checks the arguments have them",
        f"LAYOUTS = {layouts!r}",
        "",
        "",
        "def launch(grid, *arguments, interpret=INTERPRET):",
        "    shapes = [getattr(argument, 'shape', None) for argument in arguments]",
        "    arguments = [pad_to_blocks(a, *BLOCKS[i][:1], *BLOCKS[i][3:]) if i in BLOCKS else a",
        "                 for i, a in enumerate(arguments)]",
        "    specs = [block_spec(a.shape, *BLOCKS[i][1:3]) if i in BLOCKS else",
        f"             pl.BlockSpec(memory_space=pl.ANY) if i in {unused!r} else pl.BlockSpec(memory_space=pltpu.SMEM)",
        "             for i, a in enumerate(arguments)]",
        "    out_shape = [jax.ShapeDtypeStruct(arguments[i].shape, arguments[i].dtype) for i in WRITTEN]",
        f"    results = pl.pallas_call({name}, grid=grid, in_specs=specs, out_specs=[specs[i] for i in WRITTEN],",
        f"                             out_shape=out_shape, input_output_aliases={{{outputs}}},",
        "                             interpret=interpret)(*arguments)",
        "    return [jnp.reshape(result[tuple(slice(0, size) for size in (1, *shapes[i])[-result.ndim:])], shapes[i])",
        "            for i, result in zip(WRITTEN, results)]",
    ]


def _tensor_parameters(ir: KernelIR) -> tuple[str, ...]:
    """Parameters that are tensors: those not among the IR's host symbols."""
    symbols = {str(symbol) for symbol in ir.symbols}
    return tuple(p for p in ir.parameters if p not in symbols)


def _scalar_dtypes(ir: KernelIR, positions: dict[str, int], blocks: BlockPlan | None) -> dict[int, str]:
    if blocks is not None:
        return {positions[symbol]: dtype for symbol, dtype in blocks.scalar_dtypes.items() if symbol in positions}
    return {positions[str(symbol)]: str(dtype).removeprefix("torch.") for symbol, dtype in ir.symbols.items()
            if str(symbol) in positions}
