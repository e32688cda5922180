"""Elementwise operations on tile values: one table row per op, each row one primitive.

Each row gives the op's name, the torch callables that reach it (the first is its eager rule),
and how its result dtype is found; the shared trace rule broadcasts the operands and records one
`Op.ELEMENTWISE` node. Backends lower each row by name (the Triton templates live in
backends/triton/elementwise.py). Promotion always asks PyTorch (`torch.result_type`), so mixed dtypes
behave exactly as eager mode. Transcendental functions compute in fp32 for 16-bit inputs (as
PyTorch does internally) and round once at the end.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import sympy
import torch

from tessera.ir.graph import Op
from tessera.ir.symbolic import is_integral
from tessera.ir.primitive import Primitive
from tessera.trace.proxy import TileProxy, TileValue
from tessera.trace.tracer import Tracer


@dataclasses.dataclass(frozen=True)
class ElementwiseOp:
    """One elementwise op: `kind` picks its dtype rule (see `result_dtype`)."""

    name: str
    arity: int
    kind: str                # "arith" | "float" | "compare" | "logical" | "divide" | "where"
    torch_functions: tuple[Callable[..., Any], ...]


T = torch.Tensor

ELEMENTWISE_OPS: tuple[ElementwiseOp, ...] = (
    ElementwiseOp("add", 2, "arith", (torch.add, T.add)),
    ElementwiseOp("sub", 2, "arith", (torch.sub, T.sub)),
    ElementwiseOp("mul", 2, "arith", (torch.mul, T.mul)),
    ElementwiseOp("truediv", 2, "divide", (torch.div, torch.true_divide, T.div)),
    ElementwiseOp("floordiv", 2, "arith", (torch.floor_divide,)),
    ElementwiseOp("mod", 2, "arith", (torch.remainder,)),
    ElementwiseOp("pow", 2, "float", (torch.pow, T.pow)),
    ElementwiseOp("maximum", 2, "arith", (torch.maximum, T.maximum)),
    ElementwiseOp("minimum", 2, "arith", (torch.minimum, T.minimum)),
    ElementwiseOp("lt", 2, "compare", (torch.lt, T.lt)),
    ElementwiseOp("le", 2, "compare", (torch.le, T.le)),
    ElementwiseOp("gt", 2, "compare", (torch.gt, T.gt)),
    ElementwiseOp("ge", 2, "compare", (torch.ge, T.ge)),
    ElementwiseOp("eq", 2, "compare", (torch.eq, T.eq)),
    ElementwiseOp("ne", 2, "compare", (torch.ne, T.ne)),
    ElementwiseOp("bitwise_and", 2, "logical", (torch.bitwise_and, torch.logical_and)),
    ElementwiseOp("bitwise_or", 2, "logical", (torch.bitwise_or, torch.logical_or)),
    ElementwiseOp("bitwise_xor", 2, "logical", (torch.bitwise_xor,)),
    ElementwiseOp("invert", 1, "logical", (torch.bitwise_not, torch.logical_not)),
    ElementwiseOp("neg", 1, "arith", (torch.neg, T.neg)),
    ElementwiseOp("abs", 1, "arith", (torch.abs, T.abs)),
    ElementwiseOp("relu", 1, "arith", (torch.relu, T.relu, torch.nn.functional.relu)),
    ElementwiseOp("exp", 1, "float", (torch.exp, T.exp)),
    ElementwiseOp("exp2", 1, "float", (torch.exp2, T.exp2)),
    ElementwiseOp("log", 1, "float", (torch.log, T.log)),
    ElementwiseOp("log2", 1, "float", (torch.log2, T.log2)),
    ElementwiseOp("log1p", 1, "float", (torch.log1p, T.log1p)),
    ElementwiseOp("sqrt", 1, "float", (torch.sqrt, T.sqrt)),
    ElementwiseOp("rsqrt", 1, "float", (torch.rsqrt, T.rsqrt)),
    ElementwiseOp("sigmoid", 1, "float", (torch.sigmoid, T.sigmoid)),
    ElementwiseOp("tanh", 1, "float", (torch.tanh, T.tanh)),
    ElementwiseOp("sin", 1, "float", (torch.sin, T.sin)),
    ElementwiseOp("cos", 1, "float", (torch.cos, T.cos)),
    ElementwiseOp("erf", 1, "float", (torch.erf, T.erf)),
    ElementwiseOp("gelu", 1, "float", (torch.nn.functional.gelu,)),
    ElementwiseOp("silu", 1, "float", (torch.nn.functional.silu,)),
    ElementwiseOp("where", 3, "where", (torch.where, T.where)),
)
_BY_NAME = {op.name: op for op in ELEMENTWISE_OPS}


def _example(value: Any) -> Any:
    """A stand-in PyTorch understands, for asking it the result dtype."""
    if isinstance(value, (TileValue,)):
        return torch.empty(1, dtype=value.dtype)
    if isinstance(value, TileProxy):
        return torch.empty(1, dtype=torch.int32)
    if isinstance(value, sympy.Basic):
        return 1 if is_integral(value) else 1.0
    return value


def result_dtype(op: ElementwiseOp, operands: tuple[Any, ...]) -> tuple[torch.dtype, torch.dtype]:
    """(dtype the op computes in, dtype of its result), as PyTorch would."""
    examples = [_example(v) for v in operands]
    if op.kind == "where":
        promoted = torch.result_type(examples[1], examples[2]) if len(examples) == 3 else torch.float32
        return promoted, promoted
    promoted = examples[0].dtype if len(examples) == 1 and isinstance(examples[0], torch.Tensor) else (
        torch.result_type(*examples) if len(examples) == 2 else torch.get_default_dtype())
    if op.kind == "compare":
        return _compute_dtype(promoted), torch.bool
    if op.kind == "divide" and not promoted.is_floating_point:
        return torch.float32, torch.float32
    if op.kind == "float":
        if not promoted.is_floating_point:
            return torch.float32, torch.float32
        return _compute_dtype(promoted), promoted
    if op.kind in ("arith", "divide"):
        # PyTorch computes 16-bit float ops in fp32 and rounds once per op; so do we (Triton's
        # interpreter otherwise gets bf16 arithmetic wrong, and the GPU rounds the same either way)
        return _compute_dtype(promoted), promoted
    return promoted, promoted


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def apply_elementwise(tracer: Tracer, name: str, *operands: Any) -> TileValue:
    """Record elementwise op `name` on tile values, tiles (their indices) and scalars."""
    op = _BY_NAME[name]
    operands = tuple(o.index if isinstance(o, TileProxy) else o for o in operands)
    compute, result = result_dtype(op, operands)
    values = [o for o in operands if isinstance(o, TileValue)]
    shape = tracer.broadcast([v.axes for v in values], f"torch.{name}")
    inputs = [o.node if isinstance(o, TileValue) else tracer.symbols.canonical(o) for o in operands]
    return tracer.emit(Op.ELEMENTWISE, inputs, shape, result, fn=name, compute=compute)


def _trace_rule(name: str) -> Callable[..., Any]:
    op = _BY_NAME[name]

    def rule(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        if name == "where" and len(args) == 1:
            raise NotImplementedError("torch.where(condition) with one argument")
        kwargs.pop("out", None)
        if name == "gelu" and kwargs.pop("approximate", "none") != "none":
            raise NotImplementedError("gelu(approximate='tanh')")
        if kwargs.get("alpha", 1) != 1 and name in ("add", "sub"):
            args = (args[0], apply_elementwise(tracer, "mul", args[1], kwargs.pop("alpha")))
        kwargs.pop("alpha", None)
        return apply_elementwise(tracer, name, *args[:op.arity])
    rule.__name__ = f"_{name}_trace"
    return rule


ELEMENTWISE_PRIMITIVES: dict[str, Primitive] = {}
for _op in ELEMENTWISE_OPS:
    ELEMENTWISE_PRIMITIVES[_op.name] = Primitive(_op.name, torch_functions=_op.torch_functions)
    ELEMENTWISE_PRIMITIVES[_op.name].def_trace(_trace_rule(_op.name))


def _clamp_trace(tracer: Tracer, x: Any, min: Any = None, max: Any = None) -> TileValue:  # noqa: A002
    result = x
    if min is not None:
        result = apply_elementwise(tracer, "maximum", result, min)
    if max is not None:
        result = apply_elementwise(tracer, "minimum", result, max)
    return result


clamp_p = Primitive("clamp", torch_functions=(torch.clamp, T.clamp, torch.clip, T.clip))
clamp_p.def_trace(_clamp_trace)
