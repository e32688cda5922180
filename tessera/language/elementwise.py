"""Elementwise operations on tile values: one table row per op.

Each row gives the op's name, the torch callables that reach it, its Triton template, and how
its result dtype is found. Promotion always asks PyTorch (`torch.result_type`), so mixed dtypes
behave exactly as eager mode. Transcendental functions compute in fp32 for 16-bit inputs (as
PyTorch does internally) and round once at the end.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable

import sympy
import torch

from tessera.backends.triton.rules import register_triton
from tessera.trace.proxy import TileProxy, TileValue, register_torch
from tessera.trace.tracer import Tracer, current_tracer


@dataclasses.dataclass(frozen=True)
class ElementwiseOp:
    name: str
    arity: int
    template: str            # Triton expression over {0}, {1}, {2}
    kind: str                # "arith" | "float" | "compare" | "logical" | "divide"
    torch_functions: tuple[Callable[..., Any], ...]
    dunders: tuple[str, ...] = ()


T = torch.Tensor
_INT_FLOORDIV = "({0} // {1} - (({0} % {1} != 0) & (({0} < 0) != ({1} < 0))).to({0}.dtype))"
_INT_MOD = "({0} % {1} + tl.where(({0} % {1} != 0) & (({0} % {1} < 0) != ({1} < 0)), {1}, 0))"

ELEMENTWISE_OPS: tuple[ElementwiseOp, ...] = (
    ElementwiseOp("add", 2, "({0} + {1})", "arith", (torch.add, T.add), ("__add__", "__radd__")),
    ElementwiseOp("sub", 2, "({0} - {1})", "arith", (torch.sub, T.sub), ("__sub__", "__rsub__")),
    ElementwiseOp("mul", 2, "({0} * {1})", "arith", (torch.mul, T.mul), ("__mul__", "__rmul__")),
    ElementwiseOp("truediv", 2, "({0} / {1})", "divide", (torch.div, torch.true_divide, T.div),
                  ("__truediv__", "__rtruediv__")),
    ElementwiseOp("floordiv", 2, "floordiv", "arith", (torch.floor_divide,), ("__floordiv__", "__rfloordiv__")),
    ElementwiseOp("mod", 2, "mod", "arith", (torch.remainder,), ("__mod__", "__rmod__")),
    ElementwiseOp("pow", 2, "libdevice.pow({0}, {1})", "float", (torch.pow, T.pow), ("__pow__", "__rpow__")),
    ElementwiseOp("maximum", 2, "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)", "arith",
                  (torch.maximum, T.maximum)),
    ElementwiseOp("minimum", 2, "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)", "arith",
                  (torch.minimum, T.minimum)),
    ElementwiseOp("lt", 2, "({0} < {1})", "compare", (torch.lt, T.lt), ("__lt__",)),
    ElementwiseOp("le", 2, "({0} <= {1})", "compare", (torch.le, T.le), ("__le__",)),
    ElementwiseOp("gt", 2, "({0} > {1})", "compare", (torch.gt, T.gt), ("__gt__",)),
    ElementwiseOp("ge", 2, "({0} >= {1})", "compare", (torch.ge, T.ge), ("__ge__",)),
    ElementwiseOp("eq", 2, "({0} == {1})", "compare", (torch.eq, T.eq), ("__eq__",)),
    ElementwiseOp("ne", 2, "({0} != {1})", "compare", (torch.ne, T.ne), ("__ne__",)),
    ElementwiseOp("bitwise_and", 2, "({0} & {1})", "logical", (torch.bitwise_and, torch.logical_and), ("__and__", "__rand__")),
    ElementwiseOp("bitwise_or", 2, "({0} | {1})", "logical", (torch.bitwise_or, torch.logical_or), ("__or__", "__ror__")),
    ElementwiseOp("bitwise_xor", 2, "({0} ^ {1})", "logical", (torch.bitwise_xor,), ("__xor__", "__rxor__")),
    ElementwiseOp("invert", 1, "invert", "logical", (torch.bitwise_not, torch.logical_not), ("__invert__",)),
    ElementwiseOp("neg", 1, "(-{0})", "arith", (torch.neg, T.neg), ("__neg__",)),
    ElementwiseOp("abs", 1, "tl.abs({0})", "arith", (torch.abs, T.abs), ("__abs__",)),
    ElementwiseOp("relu", 1, "tl.maximum({0}, 0)", "arith", (torch.relu, T.relu, torch.nn.functional.relu)),
    ElementwiseOp("exp", 1, "tl.exp({0})", "float", (torch.exp, T.exp)),
    ElementwiseOp("exp2", 1, "tl.exp2({0})", "float", (torch.exp2, T.exp2)),
    ElementwiseOp("log", 1, "tl.log({0})", "float", (torch.log, T.log)),
    ElementwiseOp("log2", 1, "tl.log2({0})", "float", (torch.log2, T.log2)),
    ElementwiseOp("log1p", 1, "libdevice.log1p({0})", "float", (torch.log1p, T.log1p)),
    ElementwiseOp("sqrt", 1, "tl.sqrt_rn({0})", "float", (torch.sqrt, T.sqrt)),
    ElementwiseOp("rsqrt", 1, "(1.0 / tl.sqrt_rn({0}))", "float", (torch.rsqrt, T.rsqrt)),
    ElementwiseOp("sigmoid", 1, "(1.0 / (1.0 + tl.exp(-{0})))", "float", (torch.sigmoid, T.sigmoid)),
    ElementwiseOp("tanh", 1, "libdevice.tanh({0})", "float", (torch.tanh, T.tanh)),
    ElementwiseOp("sin", 1, "tl.sin({0})", "float", (torch.sin, T.sin)),
    ElementwiseOp("cos", 1, "tl.cos({0})", "float", (torch.cos, T.cos)),
    ElementwiseOp("erf", 1, "tl.erf({0})", "float", (torch.erf, T.erf)),
    ElementwiseOp("gelu", 1, "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))", "float",
                  (torch.nn.functional.gelu,)),
    ElementwiseOp("silu", 1, "({0} / (1.0 + tl.exp(-{0})))", "float", (torch.nn.functional.silu,)),
    ElementwiseOp("where", 3, "tl.where({0}, {1}, {2})", "where", (torch.where, T.where)),
)
_BY_NAME = {op.name: op for op in ELEMENTWISE_OPS}


def _example(value: Any) -> Any:
    """A stand-in PyTorch understands, for asking it the result dtype."""
    if isinstance(value, (TileValue,)):
        return torch.empty(1, dtype=value.dtype)
    if isinstance(value, TileProxy):
        return torch.empty(1, dtype=torch.int32)
    if isinstance(value, sympy.Basic):
        return 1 if value.is_integer else 1.0
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
    op = _BY_NAME[name]
    operands = tuple(o.index if isinstance(o, TileProxy) else o for o in operands)
    compute, result = result_dtype(op, operands)
    values = [o for o in operands if isinstance(o, TileValue)]
    shape = tracer.broadcast([v.axes for v in values], f"torch.{name}")
    inputs = [o.node if isinstance(o, TileValue) else tracer.symbols.canonical(o) for o in operands]
    return tracer.emit("elementwise", inputs, shape, result, fn=name, compute=compute)


def _make_handler(name: str) -> Callable[..., Any]:
    op = _BY_NAME[name]

    def handler(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        if name == "where" and len(args) == 1:
            raise NotImplementedError("torch.where(condition) with one argument")
        kwargs.pop("out", None)
        if name == "gelu" and kwargs.pop("approximate", "none") != "none":
            raise NotImplementedError("gelu(approximate='tanh')")
        if kwargs.get("alpha", 1) != 1 and name in ("add", "sub"):
            args = (args[0], apply_elementwise(tracer, "mul", args[1], kwargs.pop("alpha")))
        kwargs.pop("alpha", None)
        return apply_elementwise(tracer, name, *args[:op.arity])
    handler.__name__ = f"_{name}_trace"
    return handler


def _make_dunder(name: str, reflected: bool) -> Callable[..., Any]:
    def dunder(self: Any, *others: Any) -> TileValue:
        operands = (others[0], self) if reflected else (self, *others)
        return apply_elementwise(current_tracer(), name, *operands)
    return dunder


for _op in ELEMENTWISE_OPS:
    register_torch(*_op.torch_functions)(_make_handler(_op.name))
    for _dunder in _op.dunders:
        setattr(TileValue, _dunder, _make_dunder(_op.name, _dunder.startswith("__r") and _dunder not in ("__rshift__",)))
    for _function in _op.torch_functions:
        if getattr(T, getattr(_function, "__name__", ""), None) is _function:
            setattr(TileValue, _function.__name__, _make_dunder(_op.name, False))
TileValue.__hash__ = object.__hash__  # type: ignore[assignment]  (== builds a node; identity hashing)


@register_triton("elementwise")
def _elementwise_triton(emitter: Any, node: Any) -> str:
    op = _BY_NAME[node.params["fn"]]
    compute = node.params["compute"]
    operands = [emitter.operand(i, compute if op.kind != "where" or position > 0 else None)
                for position, i in enumerate(node.inputs)]
    if op.template == "floordiv":
        text = _INT_FLOORDIV.format(*operands) if not compute.is_floating_point else "tl.floor({0} / {1})".format(*operands)
    elif op.template == "mod":
        text = _INT_MOD.format(*operands) if not compute.is_floating_point else "({0} - tl.floor({0} / {1}) * {1})".format(*operands)
    elif op.template == "invert":
        text = f"({operands[0]} == 0)" if node.dtype == torch.bool else f"(~{operands[0]})"
    else:
        text = op.template.format(*operands)
    return emitter.cast(text, compute, node.dtype) if op.kind not in ("compare",) else text


def _clamp_trace(tracer: Tracer, x: Any, min: Any = None, max: Any = None) -> TileValue:  # noqa: A002
    result = x
    if min is not None:
        result = apply_elementwise(tracer, "maximum", result, min)
    if max is not None:
        result = apply_elementwise(tracer, "minimum", result, max)
    return result


register_torch(torch.clamp, T.clamp, torch.clip, T.clip)(_clamp_trace)
