"""NVFP4 helpers: unpacking `torch.float4_e2m1fn_x2` bytes into floats inside a tile loop.

A `float4_e2m1fn_x2` element is one byte holding two 4-bit e2m1 numbers: element 0 in the low
nibble, element 1 in the high one. A nibble is `s e e m` (sign, two exponent bits, one mantissa
bit, exponent bias 1): exponent 0 is subnormal (`m * 0.5`), else `2**(e - 1) * (1 + m / 2)`.
The 16 codes are therefore 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is -0.0).

Both helpers are written with ordinary tile ops (loads, shifts, `torch.where`, casts), so one
definition runs eagerly on tensors and traces into every backend, with no GPU-only assembly:
Triton's interpreter runs it too. Tensors of dtype `float4_e2m1fn_x2` are passed to compiled
code as their bytes (`uint8`); inside the loop their values keep the fp4 dtype, which only these
helpers (and loads/stores) take, as in PyTorch, where arithmetic on it is refused.

>>> lo, hi = hl.float4_e2m1fn_x2_to_float32(w_fp4x2[row, tile_k, byte])      # doctest: +SKIP
>>> lanes = hl.load_float4_e2m1fn_x16_to_float16(w_bytes, groups)            # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import torch

from tessera import exc
from tessera.language.memory import load
from tessera.location import user_location
from tessera.trace.proxy import TensorProxy, TileValue

FP4X2 = torch.float4_e2m1fn_x2
_PACKED_DTYPES = (FP4X2, torch.uint8)
GROUP_BYTES = 8  # `load_float4_e2m1fn_x16_to_float16` reads 8 bytes (16 numbers) per group


def e2m1_to_float(nibble: Any, dtype: torch.dtype) -> Any:
    """The e2m1 numbers of 4-bit codes `nibble` (an int32 tensor or tile value in 0..15), as `dtype`.

    >>> e2m1_to_float(torch.tensor([1, 7, 9], dtype=torch.int32), torch.float32)
    tensor([ 0.5000,  6.0000, -0.5000])
    """
    exponent = (nibble >> 1) & 3
    mantissa = (nibble & 1).to(torch.float32)
    # exponent e > 0: 2**(e-1) * (1 + m/2) == (2 + m) * 2**(e-2); powers picked, not computed, to stay exact
    power = torch.where(exponent == 3, 2.0, torch.where(exponent == 2, 1.0, 0.5))
    normal = (mantissa + 2.0) * power
    magnitude = torch.where(exponent == 0, mantissa * 0.5, normal)
    return torch.where((nibble & 8) != 0, -magnitude, magnitude).to(dtype)


def _packed_bytes(value: Any, what: str) -> Any:
    """`value` (fp4x2 or uint8) as int32 byte values 0..255, refusing any other dtype."""
    if not isinstance(value, (torch.Tensor, TileValue)) or value.dtype not in _PACKED_DTYPES:
        got = value.dtype if isinstance(value, (torch.Tensor, TileValue)) else type(value).__name__
        raise exc.DtypeError(f"{what} expects packed fp4 bytes (torch.float4_e2m1fn_x2 or torch.uint8), got {got}",
                             location=user_location(2),
                             hint="pass the fp4 tensor itself, or its bytes: x.view(torch.uint8)")
    return value.view(torch.uint8).to(torch.int32)


def float4_e2m1fn_x2_to_float32(value: Any) -> tuple[Any, Any]:
    """The two fp32 numbers packed in each byte of `value` (`torch.float4_e2m1fn_x2` or `uint8`):
    `(low nibble, high nibble)`, each of `value`'s shape.

    >>> lo, hi = hl.float4_e2m1fn_x2_to_float32(b_fp4x2[tile_k, byte, tile_n])   # doctest: +SKIP
    """
    packed = _packed_bytes(value, "hl.float4_e2m1fn_x2_to_float32")
    return e2m1_to_float(packed & 15, torch.float32), e2m1_to_float(packed >> 4, torch.float32)


def load_float4_e2m1fn_x16_to_float16(storage: Any, group_offsets: Any, extra_mask: Any = None) -> tuple[Any, ...]:
    """Load the 8-byte groups `group_offsets` of contiguous fp4 storage (`uint8` or
    `float4_e2m1fn_x2`, addressed from its start as one flat run of bytes) and unpack each into
    16 fp16 lanes: lane `2*b` is byte `b`'s low nibble, lane `2*b + 1` its high one. Lanes where
    `extra_mask` is False read 0.

    >>> w = hl.load_float4_e2m1fn_x16_to_float16(w_bytes, rows * groups + tile_g.index)  # doctest: +SKIP
    >>> contrib = w[0] * x0 + w[1] * x1                                                # doctest: +SKIP
    """
    what = "hl.load_float4_e2m1fn_x16_to_float16"
    if not isinstance(storage, (torch.Tensor, TensorProxy)) or storage.dtype not in _PACKED_DTYPES:
        got = storage.dtype if isinstance(storage, (torch.Tensor, TensorProxy)) else type(storage).__name__
        raise exc.DtypeError(f"{what} expects a uint8 or float4_e2m1fn_x2 tensor argument, got {got}",
                             location=user_location(), hint="pass the packed weight tensor (or its uint8 view)")
    if isinstance(storage, torch.Tensor):
        if not storage.is_contiguous():
            raise exc.UnsupportedOperationError(f"{what}: the storage tensor is not contiguous",
                                                location=user_location(), hint="pass storage.contiguous()")
        storage = storage.view(torch.uint8)
    flat = storage.reshape(-1)
    lanes: list[Any] = []
    for byte in range(GROUP_BYTES):
        packed = _packed_bytes(load(flat, [group_offsets * GROUP_BYTES + byte], extra_mask=extra_mask), what)
        lanes += [e2m1_to_float(packed & 15, torch.float16), e2m1_to_float(packed >> 4, torch.float16)]
    return tuple(lanes)


def load_bfloat16_x16_to_float16(storage: Any, group_offsets: Any, extra_mask: Any = None) -> tuple[Any, ...]:
    """Load the 16-value groups `group_offsets` of contiguous bfloat16 storage (addressed from its
    start as one flat run) and convert each value to fp16: lane `i` of the result is value
    `16 * group + i`. Lanes where `extra_mask` is False read 0.

    >>> w = hl.load_bfloat16_x16_to_float16(w_bf16, rows * groups + tile_g.index)   # doctest: +SKIP
    """
    what = "hl.load_bfloat16_x16_to_float16"
    if not isinstance(storage, (torch.Tensor, TensorProxy)) or storage.dtype is not torch.bfloat16:
        got = storage.dtype if isinstance(storage, (torch.Tensor, TensorProxy)) else type(storage).__name__
        raise exc.DtypeError(f"{what} expects bfloat16 storage, got {got}", location=user_location(),
                             hint="pass the bfloat16 tensor argument")
    if isinstance(storage, torch.Tensor) and not storage.is_contiguous():
        raise exc.UnsupportedOperationError(f"{what}: the storage tensor is not contiguous",
                                            location=user_location(), hint="pass storage.contiguous()")
    flat = storage.reshape(-1)
    return tuple(load(flat, [group_offsets * 16 + lane], extra_mask=extra_mask).to(torch.float16) for lane in range(16))
