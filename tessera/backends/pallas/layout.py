"""TPU layout rules, checked on the IR before lowering (Config key `pallas_tpu_layout_check`).

A TPU vector register holds 8 x 128 (sublanes x lanes) 32-bit values, and Pallas's TPU lowering
refuses a block whose last two dims are not multiples of 8 and 128 unless they are the whole
array dims. Tessera's tiles are those blocks, so each load and store is checked: its last dim's
block must be a multiple of 128 (or a whole dim of that size), the one before a multiple of 8.
TPUs have no 64-bit floats or ints in vector memory, so float64 and int64 tensors are refused.
The check is off by default: Pallas's CPU interpreter runs any shape, and small tiles are what
tests on CPU use. The error names the kernel line and the `block_sizes` entry to change.
"""
from __future__ import annotations

import sympy
import torch

from tessera import exc
from tessera.config import Config
from tessera.ir.graph import Axis, AxisKind, KernelIR, Op, walk

SUBLANES, LANES = 8, 128
_NO_TPU_DTYPES = (torch.float64, torch.int64)


def check_tpu_layout(ir: KernelIR, config: Config) -> None:
    """Raise a located `ConfigError` for the first load/store whose block a TPU cannot hold."""
    for node in walk(ir.body):
        if node.op not in (Op.LOAD, Op.STORE):
            continue
        dtype = node.params["tensor"].dtype
        if dtype in _NO_TPU_DTYPES:
            raise exc.UnsupportedOperationError(
                f"{node.params['tensor'].name} is {str(dtype).removeprefix('torch.')}: a TPU has no 64-bit vector types",
                location=node.location, hint="pass float32 / int32 tensors to run on a TPU")
        for axis, multiple in zip(reversed(node.shape), (LANES, SUBLANES)):
            if _fits(axis, multiple):
                continue
            raise exc.ConfigError(
                f"a TPU block's {'last' if multiple == LANES else 'second-to-last'} dim must be a multiple of "
                f"{multiple} or the whole dim: tile {axis.name} here is {axis.block}", location=node.location,
                hint=_hint(axis, multiple, config))


def _fits(axis: Axis, multiple: int) -> bool:
    if axis.block % multiple == 0 or axis.kind is AxisKind.UNIT:
        return True
    whole = sympy.sympify(axis.end) - sympy.sympify(axis.begin)
    return axis.kind is AxisKind.WHOLE and whole.is_Integer and int(whole) == axis.block


def _hint(axis: Axis, multiple: int, config: Config) -> str:
    wanted = max(multiple, axis.block - axis.block % multiple)
    entries = [i for i, block in enumerate(config.get("block_sizes", []) or []) if block == axis.block]
    if axis.kind is AxisKind.WHOLE:
        return f"make that dim a multiple of {multiple} (or specialize it), or run without pallas_tpu_layout_check"
    if entries:
        return f"set Config block_sizes[{entries[0]}] (now {axis.block}) to {wanted} or another multiple of {multiple}"
    return f"set this tile's Config block_sizes entry (now {axis.block}) to a multiple of {multiple}, e.g. {wanted}"


__all__ = ["check_tpu_layout"]
