"""`hl.inline_asm_elementwise`: a few lines of PTX applied element by element (compiled mode).

The assembly runs on the GPU only: Triton's CPU interpreter cannot execute it and eager mode has
no meaning for it, so both refuse it, located, instead of computing something else.

>>> y = hl.inline_asm_elementwise("mul.f32 $0, $1, $2;", "=r,r,r", [a, b], torch.float32,
...                               is_pure=True, pack=1)               # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.language.operands import check_dtype
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer


def inline_asm_elementwise(asm: str, constraints: str, args: Sequence[Any], dtype: Any, is_pure: bool,
                           pack: int) -> Any:
    """Run `asm` (PTX, with Triton's constraint string) on the elements of `args` (broadcast
    together); `dtype` is the result's dtype, or a sequence of dtypes for several results;
    `pack` elements go to one call. Compiled mode on the GPU only.
    """
    if not isinstance(asm, str) or not isinstance(constraints, str):
        raise exc.InvalidAPIUsage("hl.inline_asm_elementwise: asm and constraints must be strings",
                                  location=user_location())
    dtypes = tuple(dtype) if isinstance(dtype, (list, tuple)) else (dtype,)
    wrong = [d for d in dtypes if not isinstance(d, torch.dtype)]
    if wrong or not dtypes:  # checked in every mode, before anything runs (Helion's InvalidAPIUsage)
        raise exc.InvalidAPIUsage(f"hl.inline_asm_elementwise: dtype={dtype!r} is not a torch dtype (or a sequence of them)",
                                  location=user_location(), hint="e.g. dtype=torch.int32")
    return inline_asm_p.bind(tuple(args), asm=asm, constraints=constraints, dtypes=dtypes, is_pure=bool(is_pure),
                             pack=int(pack))


def _inline_asm_eager(args: tuple, **params: Any) -> Any:
    raise exc.UnsupportedOperationError(
        "hl.inline_asm_elementwise runs only when compiled for the GPU: eager mode cannot execute PTX",
        location=user_location(), hint="run this kernel on CUDA tensors in compiled mode, or write the "
                                       "operation with torch ops for eager and interpret modes")


def _inline_asm_trace(tracer: Tracer, args: tuple, *, asm: str, constraints: str, dtypes: tuple,
                      is_pure: bool, pack: int) -> Any:
    for arg in args:
        if not isinstance(arg, TileValue):
            raise exc.UnsupportedOperationError(
                f"hl.inline_asm_elementwise argument {arg!r} is not a tile value", location=user_location(),
                hint="pass tile values (hl.full([tile], value) for a constant)")
    for dtype in dtypes:
        check_dtype(dtype, "hl.inline_asm_elementwise's result")
    shape = tracer.broadcast([arg.axes for arg in args], "hl.inline_asm_elementwise")
    params = {"asm": asm, "constraints": constraints, "is_pure": is_pure, "pack": pack}
    if len(dtypes) == 1:
        return tracer.emit(Op.INLINE_ASM, [arg.node for arg in args], shape, dtypes[0], **params)
    node = tracer.emit(Op.INLINE_ASM, [arg.node for arg in args], shape, None, dtypes=dtypes, **params).node
    return tuple(tracer.emit(Op.ITEM, [node], shape, dtype, index=i) for i, dtype in enumerate(dtypes))


inline_asm_p = defined_primitive("inline_asm_elementwise", _inline_asm_eager, _inline_asm_trace)
