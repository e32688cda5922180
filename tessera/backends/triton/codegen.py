"""KernelIR + Config -> one readable Triton kernel (`LoweredKernel`).

Every node becomes lines like `v7 = ...` under a `# file:line` comment pointing at the kernel
source. Axis index vectors and masks are defined once where their axis begins (the kernel top
for launch and whole-dimension axes, the loop head for loop axes, the chunk loop for a row
processed in chunks).
"""
from __future__ import annotations

import torch

from tessera.backends.base import LoweredKernel, LoweringOptions
from tessera.backends.triton.emitter import INDEX_ERRORS, Emitter
from tessera.backends.triton.lowering import emit_block
from tessera.backends.triton.program_ids import (emit_program_ids, host_grid, mapping_for, program_count_exprs,
                                                 split_grid)
from tessera.backends.triton.numerics import HELPERS as NUMERIC_HELPERS
from tessera.backends.triton.row_loops import emit_row_schedule
from tessera.config import Config
from tessera.ir.graph import KernelIR
from tessera.backends.triton import split_reduction as split_k_code
from tessera.ir.loop_split import splittable_loop
from tessera.ir.split_reduction import split_reduction

_HELPERS: dict[str, list[str]] = {
    "widen_bf16": [
        "",
        "@triton.jit",
        "def widen_bf16(x):",
        "    # bf16 -> fp32 exactly, by moving the bits (Triton 3.6's interpreter turns bf16 subnormals",
        "    # into 0 or wrong normals; the GPU widens them exactly)",
        "    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)",
        "",
    ],
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
    **{f"round_to_{name}": [
        "",
        "@triton.jit",
        f"def round_to_{name}(x):",
        f"    # fp32 -> {name} rounding to nearest even ({mantissa} mantissa bits, subnormal below 2**{emin}),",
        "    # as PyTorch and the GPU do (Triton 3.6's interpreter truncates); the rounded value is exact in fp8",
        "    exponent = ((x.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32) - 127",
        f"    exponent = tl.maximum(exponent, {emin}) - {mantissa} + 127",
        "    quantum = (exponent << 23).to(tl.float32, bitcast=True)",
        "    scaled = x / quantum",
        "    rounded = (scaled + 12582912.0) - 12582912.0  # 1.5 * 2**23: fp32 addition rounds to an integer",
        f"    return (rounded * quantum).to(tl.{name})",
        "",
    ] for name, mantissa, emin in (("float8e4nv", 3, -6), ("float8e5", 2, -14))},
    # Triton 3.6's interpreter has no libdevice (its functions return None there): the
    # interpreter's versions of the libdevice ops Tessera uses, from tl operations
    "interpreted_tanh": [
        "",
        "@triton.jit",
        "def interpreted_tanh(x):",
        "    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)",
        "",
    ],
    "interpreted_log1p": [
        "",
        "@triton.jit",
        "def interpreted_log1p(x):",
        "    u = 1.0 + x  # log(u) * x / (u - 1) cancels the rounding of 1 + x",
        "    corrected = tl.log(u) * (x / (u - 1.0))",
        "    return tl.where(u == 1.0, x, tl.where(u == float('inf'), u, corrected))  # inf / inf is no factor",
        "",
    ],
    "interpreted_pow": [
        "",
        "@triton.jit",
        "def interpreted_pow(x, y):",
        "    # C's pow, special cases included (torch and libdevice follow it)",
        "    integral = tl.floor(y) == y",
        "    odd = integral & (tl.floor(y * 0.5) * 2.0 != y)",
        "    magnitude = tl.exp2(y * tl.log2(tl.abs(x)))",
        "    signed = (x < 0) | ((x == 0) & (1.0 / x < 0))  # the sign bit: -0.0 counts",
        "    # a negative base to a non-integral power is NaN, except -inf and -0.0",
        "    exact = integral | (x == 0) | (x == float('-inf'))",
        "    sign = tl.where(signed, tl.where(odd, -1.0, tl.where(exact, 1.0, float('nan'))), 1.0)",
        "    unit = (x == 1.0) | ((x == -1.0) & (tl.abs(y) == float('inf')))  # 1 ** nan, (-1) ** inf",
        "    return tl.where((y == 0) | unit, 1.0, magnitude * sign)",
        "",
    ],
    # Triton 3.6's interpreter has no bf16 read-modify-write atomics ("Unsupported data type"), but
    # runs 16-bit compare-and-swap lane by lane: each lane retries until its swap lands, so lanes
    # of one block on the same element (a scatter-add) each count, as on the GPU. Its fp16
    # atomic_add raises OverflowError where a sum overflows to inf (`half`: fp16 through here too)
    "interpreted_16bit_atomic": [
        "",
        "@triton.jit",
        "def interpreted_16bit_atomic(pointer, value, mask, op: tl.constexpr, half: tl.constexpr):",
        "    bits = pointer.to(tl.pointer_type(tl.int16), bitcast=True)",
        "    value = widen_bf16(value) if value.dtype == tl.bfloat16 else value.to(tl.float32)",
        "    previous = tl.load(bits)",
        "    pending = (previous == previous) & mask  # the pointer's shape",
        "    # (a scalar pointer, hl.atomic_add(out, [0], total): no dims to flatten)",
        "    while (tl.max(tl.reshape(pending, [pending.numel]).to(tl.int32)) if len(pending.shape) else"
        " pending.to(tl.int32)) > 0:",
        "        seen = tl.load(bits)",
        "        old = seen.to(tl.float16, bitcast=True).to(tl.float32) if half else"
        " widen_bf16(seen.to(tl.bfloat16, bitcast=True))",
        "        if op == 'add':",
        "            new = old + value",
        "        elif op == 'max':",
        "            new = tl.where((old != old) | (old > value), old, value)",
        "        elif op == 'min':",
        "            new = tl.where((old != old) | (old < value), old, value)",
        "        else:",
        "            new = value",
        "        new_bits = new.to(tl.float16).to(tl.int16, bitcast=True) if half else"
        " round_to_bf16(new).to(tl.int16, bitcast=True)",
        "        # a lane not pending swaps the element for itself: no change",
        "        landed = tl.atomic_cas(bits, seen, tl.where(pending, new_bits, seen)) == seen",
        "        previous = tl.where(pending & landed, seen, previous)",
        "        pending = pending & (landed == 0)",
        "    return previous.to(tl.float16 if half else tl.bfloat16, bitcast=True)",
        "",
    ],
    **NUMERIC_HELPERS,
}


def lower_kernel(ir: KernelIR, config: Config, options: LoweringOptions) -> LoweredKernel:
    """The full source of one Triton kernel (imports included), its grid, and for each 1-based
    line that starts a node's code, the kernel source location it comes from."""
    emitter = Emitter(ir, config, options)
    mapping = mapping_for(config, ir.launch_index, len(ir.grid))
    split_programs = int(config.get("split_programs", 0) or 0)
    if (split_programs > 1 and mapping.pid_type == "flat") or mapping.pid_type == "persistent_interleaved":
        emitter.split_loop = splittable_loop(ir)
        emitter.split_persistent = mapping.persistent
    splits = int(config.get("split_k", 1) or 1)
    if splits > 1 and mapping.pid_type == "flat" and emitter.split_loop is None:
        emitter.split_reduction = split_reduction(ir)
        emitter.splits = splits
    split = emitter.split_loop is not None or emitter.split_reduction is not None
    emitter.indent = emit_program_ids(emitter.lines, mapping, ir.grid, ir.int64_indexing, split=split)
    looped = ir.row_loop.axis if ir.row_loop is not None else None
    for axis in (*ir.launch_axes, *(a for a in ir.whole_axes if a is not looped)):
        emitter.define_axis(axis)
    if ir.row_schedule is not None:
        emit_row_schedule(emitter, ir.row_schedule, looped)
    else:
        emit_block(emitter, ir.body)
    emitter.lines[:0] = ["    " + line for line in emitter.prelude]
    shift = len(emitter.prelude)
    name = f"{ir.name}_kernel"
    parameters = ir.parameters
    scratch = ()
    if emitter.split_reduction is not None:
        parameters += split_k_code.PARAMETERS
        scratch = split_k_code.scratch_buffers(emitter.split_reduction)
    header = [
        "# Generated by Tessera. Each `# file:line` comment names the kernel source line below it.",
        "import triton",
        "import triton.language as tl",
        "from triton.language.extra import libdevice",
        "",
        *[line for helper in sorted(emitter.helpers) for line in _HELPERS[helper]],
        *[line for helper in sorted(emitter.generated) for line in emitter.generated[helper]],
        "",
        "@triton.jit",
        f"def {name}({', '.join(parameters + ((INDEX_ERRORS,) if emitter.index_checks else ()))}):",
    ]
    locations = {index + shift + len(header) + 1: where for index, where in emitter.locations.items()}
    cap = programs_cap(options.interpret)
    grid = host_grid(mapping, program_count_exprs(ir.grid), cap)
    if emitter.split_reduction is not None:
        grid = [grid[0] * splits]
    elif split:
        grid = split_grid(grid, split_programs, mapping, cap)
    launch = {"num_warps": int(config.get("num_warps", 4)), "num_stages": int(config.get("num_stages", 2))}
    return LoweredKernel(name, "\n".join(header + emitter.lines) + "\n", tuple(grid), tuple(emitter.guards),
                         locations, launch, ir.location, tuple(emitter.index_checks), scratch)



def programs_cap(interpret: bool) -> int:
    """Programs of a persistent kernel: one per SM (a few when interpreting)."""
    if interpret or not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
