"""What an op's operands may be inside a compiled tile loop, and how scalars enter its dtype.

Three rules, shared by every elementwise op and reduction, so one check closes each class:

- `check_dtype`: the dtypes generated code can hold (`SUPPORTED_DTYPES`); complex, AMD's fp8 and
  the wide unsigned types end as a located `DtypeError` instead of a backend failure.
- `ask_torch`: the op is run once on stand-in tensors of the operands' dtypes and ranks (and the
  real Python scalars); whatever PyTorch refuses (`-bool`, `bool // bool`, `x_int8.clamp(max=1000)`,
  `x ** -1` for integer `x`, `argmax` of bools, a `None` or str operand) is refused at trace time
  with torch's reason, and its answer's dtype is checked like any other.
- `scalar_operand`: a Python scalar enters the computation as PyTorch's kernels take it: converted
  to the dtype the op computes in, so an int wraps into an integer dtype (`int8 + 1000` adds -24)
  and a float rounds into fp32 (`1e300` is inf).

>>> scalar_operand(1000, torch.int8)
-24
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import sympy
import torch

from tessera import exc
from tessera.ir.symbolic import is_integral
from tessera.location import user_location
from tessera.trace.proxy import TensorProxy, TileProxy, TileValue, refuse_value_list

SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset({
    torch.float32, torch.float16, torch.bfloat16, torch.float64,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
    torch.float8_e4m3fn, torch.float8_e5m2,  # NVIDIA's fp8: loads, stores and casts (torch computes little in them)
    torch.float4_e2m1fn_x2,  # packed fp4 bytes: loads, stores, v.view(torch.uint8), hl.float4_* (language/quantized.py)
})
"""Dtypes a compiled kernel can load, compute in and store (Triton's types for torch's)."""
_AMD_FP8 = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)

_INT64_RANGE = (-2 ** 63, 2 ** 64 - 1)  # torch accepts Python ints up to uint64 (and wraps them)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_dtype(dtype: torch.dtype, what: str) -> None:
    """Refuse a dtype compiled code cannot hold, naming `what` holds it.

    >>> check_dtype(torch.complex64, "argument z")   # doctest: +SKIP
    DtypeError: argument z has dtype complex64, which compiled tile loops do not support
    """
    if dtype not in SUPPORTED_DTYPES:
        amd = " (Triton supports it only on AMD GPUs)" if dtype in _AMD_FP8 else ""
        raise exc.DtypeError(
            f"{what} has dtype {dtype_name(dtype)}, which compiled tile loops do not support{amd}",
            location=user_location(),
            hint="supported: " + ", ".join(sorted(dtype_name(d) for d in SUPPORTED_DTYPES))
                 + "; convert on the host (complex: torch.view_as_real(z); fp8: x.to(torch.float16)) "
                   "or run the kernel with mode='eager'")


def _describe(value: Any) -> str:
    if isinstance(value, TileValue):
        return f"a {dtype_name(value.dtype)} tile value"
    if isinstance(value, TileProxy):
        return "a tile"
    if isinstance(value, TensorProxy):
        return f"a {dtype_name(value.dtype)} tensor argument"
    if isinstance(value, sympy.Basic):
        return "a runtime scalar"
    return f"{type(value).__name__} {value!r}"


def _stand_in(value: Any) -> Any:
    """What PyTorch is shown for one operand: a tensor of its dtype and rank (0-d for a rank-0
    value, as eager mode sees a full reduction), an int/float for a runtime scalar."""
    if isinstance(value, TileValue):
        return torch.ones((1,) * value.dim(), dtype=value.dtype)
    if isinstance(value, TileProxy):
        return torch.ones(1, dtype=torch.int32)
    if isinstance(value, sympy.Basic):
        if value in (sympy.true, sympy.false):
            return bool(value)
        return 1 if is_integral(value) else 1.0
    if isinstance(value, (list, tuple)):
        return type(value)(_stand_in(v) for v in value)
    return value


def check_operand(value: Any, op: str) -> None:
    """Refuse operands no compiled op can take, before asking torch (which would accept some)."""
    if isinstance(value, TensorProxy):
        raise exc.UnsupportedOperationError(
            f"{op} got the whole tensor argument {value.name} as an operand", location=user_location(),
            hint=f"index it with the loop's tiles ({value.name}[tile]); only 0-d tensor arguments are "
                 "read whole")
    if isinstance(value, torch.Tensor):
        raise exc.UnsupportedOperationError(
            f"{op} got a torch.Tensor created or captured inside the tile loop "
            f"({dtype_name(value.dtype)}, shape {list(value.shape)})", location=user_location(),
            hint="pass it to the kernel as an argument and index it with tiles, or pass a Python number")
    if isinstance(value, bool) or not isinstance(value, int):
        return
    if not _INT64_RANGE[0] <= value <= _INT64_RANGE[1]:
        raise exc.DtypeError(f"{op}: the Python int {value} does not fit in 64 bits (torch refuses it too)",
                             location=user_location(), hint="use a float, or a value in [-2**63, 2**64)")


def ask_torch(op: str, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`function` run on stand-ins of `args`; a located DtypeError with torch's reason if it refuses,
    or if its answer has a dtype compiled code cannot hold. Returns torch's answer."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and any(isinstance(item, TileValue) for item in value):
            refuse_value_list(value, op)
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            check_operand(item, op)
    stand_ins = tuple(_stand_in(a) for a in args)
    stand_in_kwargs = {k: _stand_in(v) for k, v in kwargs.items()}
    operands = ", ".join(_describe(a) for a in args)
    try:
        with warnings.catch_warnings():  # a probe on stand-ins: torch's notes on them are not the user's
            warnings.simplefilter("ignore")
            answer = function(*stand_ins, **stand_in_kwargs)
    except Exception as error:  # torch's refusal, whatever its class: the user's op is unsupported
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise exc.DtypeError(f"{op} on {operands} is not supported: PyTorch refuses it ({reason})",
                             location=user_location(),
                             hint="eager PyTorch raises the same error; convert the operands "
                                  "(x.to(torch.float32), x.to(torch.int32)) or change the scalar") from None
    for result in (answer if isinstance(answer, tuple) else (answer,)):
        if isinstance(result, torch.Tensor):
            check_dtype(result.dtype, f"the result of {op} on {operands}")
    return answer


def scalar_operand(value: Any, compute: torch.dtype) -> Any:
    """A Python scalar as the op's kernel takes it (PyTorch converts it to the op's math dtype)."""
    if isinstance(value, sympy.Basic) and not value.free_symbols:  # a specialized size: a constant
        value = int(value) if value.is_Integer else float(value) if value.is_Float else value
    if isinstance(value, bool):
        return value if compute == torch.bool else int(value)
    if isinstance(value, int):
        if compute.is_floating_point:
            return float(value)
        if compute == torch.bool:
            return value != 0
        bits = torch.iinfo(compute).bits
        wrapped = value % (1 << bits)
        signed = torch.iinfo(compute).min < 0
        return wrapped - (1 << bits) if signed and wrapped >= 1 << (bits - 1) else wrapped
    if isinstance(value, float) and compute in (torch.float32, torch.float16, torch.bfloat16):
        return float(torch.tensor(value, dtype=torch.float64).to(torch.float32))  # rounds; 1e300 -> inf
    return value


def pinned_int(tracer: Any, value: Any, what: str) -> Any:
    """An int an op's register shape depends on (F.pad's amounts, topk's k, one_hot's classes),
    given as an expression of scalar arguments or sizes: this call's value, guarded (a call with
    another value traces another variant). Anything else comes back as it is (the op refuses it)."""
    if not isinstance(value, sympy.Expr):
        return value
    if not value.free_symbols:
        return int(value) if value.is_Integer else value
    known = tracer.symbols.evaluate_or_none(value) if is_integral(value) else None
    if known is None:
        return value
    tracer.symbols.guard(sympy.Eq(value, int(known)), f"{what} = {int(known)}")
    return int(known)
