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

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.symbolic import is_integral
from tessera.ir.primitive import Primitive
from tessera.language.operands import ask_torch, scalar_operand
from tessera.location import user_location
from tessera.language.tail_fill import OTHER_VALUE, past_end_fill
from tessera.trace.indexing import trace_load
from tessera.trace.proxy import AxisSize, TensorProxy, TileProxy, TileValue
from tessera.trace.tile_alignment import align_operands
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
    ElementwiseOp("sub", 2, "arith", (torch.sub, T.sub, torch.subtract, T.subtract)),
    ElementwiseOp("mul", 2, "arith", (torch.mul, T.mul, torch.multiply, T.multiply)),
    ElementwiseOp("truediv", 2, "divide", (torch.div, torch.true_divide, T.div, T.true_divide, torch.divide,
                                            T.divide)),
    ElementwiseOp("floordiv", 2, "arith", (torch.floor_divide, T.floor_divide)),
    ElementwiseOp("mod", 2, "arith", (torch.remainder, T.remainder)),
    ElementwiseOp("fmod", 2, "arith", (torch.fmod, T.fmod)),  # C's remainder: the dividend's sign
    ElementwiseOp("pow", 2, "float", (torch.pow, T.pow)),
    ElementwiseOp("maximum", 2, "arith", (torch.maximum, T.maximum)),
    ElementwiseOp("minimum", 2, "arith", (torch.minimum, T.minimum)),
    ElementwiseOp("lt", 2, "compare", (torch.lt, T.lt, torch.less, T.less)),
    ElementwiseOp("le", 2, "compare", (torch.le, T.le, torch.less_equal, T.less_equal)),
    ElementwiseOp("gt", 2, "compare", (torch.gt, T.gt, torch.greater, T.greater)),
    ElementwiseOp("ge", 2, "compare", (torch.ge, T.ge, torch.greater_equal, T.greater_equal)),
    ElementwiseOp("eq", 2, "compare", (torch.eq, T.eq)),
    ElementwiseOp("ne", 2, "compare", (torch.ne, T.ne, torch.not_equal, T.not_equal)),
    ElementwiseOp("bitwise_and", 2, "logical", (torch.bitwise_and, T.bitwise_and)),
    ElementwiseOp("bitwise_or", 2, "logical", (torch.bitwise_or, T.bitwise_or)),
    ElementwiseOp("bitwise_xor", 2, "logical", (torch.bitwise_xor, T.bitwise_xor)),
    ElementwiseOp("invert", 1, "logical", (torch.bitwise_not, T.bitwise_not)),
    # shifts by less than the bit width (wider shifts are undefined on the GPU; torch gives 0 or -1)
    ElementwiseOp("lshift", 2, "logical", (torch.bitwise_left_shift, T.bitwise_left_shift)),
    ElementwiseOp("rshift", 2, "logical", (torch.bitwise_right_shift, T.bitwise_right_shift)),
    ElementwiseOp("neg", 1, "arith", (torch.neg, T.neg, torch.negative, T.negative)),
    ElementwiseOp("abs", 1, "arith", (torch.abs, T.abs, torch.absolute, T.absolute)),
    ElementwiseOp("relu", 1, "arith", (torch.relu, T.relu, torch.nn.functional.relu)),
    ElementwiseOp("exp", 1, "float", (torch.exp, T.exp)),
    ElementwiseOp("exp2", 1, "float", (torch.exp2, T.exp2, torch.special.exp2)),
    ElementwiseOp("log", 1, "float", (torch.log, T.log)),
    ElementwiseOp("log2", 1, "float", (torch.log2, T.log2)),
    ElementwiseOp("log1p", 1, "float", (torch.log1p, T.log1p, torch.special.log1p)),
    ElementwiseOp("sqrt", 1, "float", (torch.sqrt, T.sqrt)),
    ElementwiseOp("rsqrt", 1, "float", (torch.rsqrt, T.rsqrt)),
    ElementwiseOp("reciprocal", 1, "float", (torch.reciprocal, T.reciprocal)),
    ElementwiseOp("sigmoid", 1, "float", (torch.sigmoid, T.sigmoid)),
    ElementwiseOp("tanh", 1, "float", (torch.tanh, T.tanh)),
    ElementwiseOp("sin", 1, "float", (torch.sin, T.sin)),
    ElementwiseOp("cos", 1, "float", (torch.cos, T.cos)),
    ElementwiseOp("erf", 1, "float", (torch.erf, T.erf, torch.special.erf)),
    ElementwiseOp("gelu", 1, "float", (torch.nn.functional.gelu,)),
    ElementwiseOp("silu", 1, "float", (torch.nn.functional.silu,)),
    ElementwiseOp("where", 3, "where", (torch.where,)),  # T.where (x.where(condition, y)): where_method_p
    # roundings to integral values; integer inputs return themselves (the trace rule)
    ElementwiseOp("floor", 1, "arith", (torch.floor, T.floor)),
    ElementwiseOp("ceil", 1, "arith", (torch.ceil, T.ceil)),
    ElementwiseOp("trunc", 1, "arith", (torch.trunc, T.trunc, torch.fix, T.fix)),
)
_ROUNDINGS = frozenset({"floor", "ceil", "trunc"})
_BY_NAME = {op.name: op for op in ELEMENTWISE_OPS}


def _example(value: Any) -> Any:
    """A stand-in PyTorch understands, for asking it the result dtype."""
    if isinstance(value, (TileValue,)):  # a rank-0 value (a full reduction) promotes like eager's 0-d tensor
        return torch.empty((1,) * min(value.dim(), 1), dtype=value.dtype)
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
    # scalars enter as torch's kernels take them: in the dtype the op computes in (where's
    # condition is no number)
    operands = tuple(o if isinstance(o, TileValue) or (name == "where" and position == 0)
                     else scalar_operand(o, compute) for position, o in enumerate(operands))
    operands = align_operands(tracer, operands)
    values = [o for o in operands if isinstance(o, TileValue)]
    shape = tracer.broadcast([v.axes for v in values], f"torch.{name}")
    operands = tuple(tracer.onto_block_axes(o, shape, _tail_fill(tracer, name, position, operands, shape))
                     if isinstance(o, TileValue) else o for position, o in enumerate(operands))
    inputs = [o.node if isinstance(o, TileValue) else tracer.symbols.canonical(o) for o in operands]
    return tracer.emit(Op.ELEMENTWISE, inputs, shape, result, fn=name, compute=compute)


def _tail_fill(tracer: Tracer, name: str, position: int, operands: tuple[Any, ...], shape: tuple) -> Any:
    """What operand `position`'s lanes past an inner loop's tail take as they join an allocation
    (language/tail_fill.py): the op's identity, or where's other value (when that one is the
    allocation's, not a tail tile's too)."""
    fill = past_end_fill(name, position, operands[position].dtype)
    if fill is OTHER_VALUE:
        other = operands[3 - position]
        return 0 if isinstance(other, TileValue) and tracer.block_renames(other, shape) else other
    return fill


def scalar_tensor_value(tracer: Tracer, value: Any) -> Any:
    """A 0-d tensor argument used as an operand (`x[tile] * scale`) is read once, as eager mode
    reads it: a 0-d value, which promotes like a scalar (`fp16 * fp32 0-d` stays fp16). A 0-d
    tensor made inside the loop is a constant 0-d value."""
    if isinstance(value, TensorProxy) and value.dim() == 0:
        return trace_load(tracer, value, ())
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type != "meta":
        # `torch.tensor(2.0)` made in the loop: a constant, kept 0-d so it promotes as eager's does
        # (an fp64 0-d tensor times an int tile is fp64, where the Python float would give fp32)
        return tracer.emit(Op.FULL, [tracer.symbols.canonical(value.item())], (), value.dtype)
    if isinstance(value, AxisSize):  # `v * v.size(1)`: a whole dim's size is a number (a tile's: an error)
        return value.number("an elementwise op")
    return value


# torch's names for the operands an op also takes by keyword (`torch.add(x, other=y)`), in order
_OPERAND_KEYWORDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "where": (("condition",), ("input", "self"), ("other",)),
    "pow": (("input", "self"), ("exponent",)),
}
_DEFAULT_OPERAND_KEYWORDS = (("input", "self"), ("other",))


def _positional_operands(op: ElementwiseOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """`args` with the operands given by keyword appended in torch's order (popped from `kwargs`)."""
    operands = list(args)
    for names in _OPERAND_KEYWORDS.get(op.name, _DEFAULT_OPERAND_KEYWORDS)[len(args):op.arity]:
        given = [name for name in names if name in kwargs]
        if not given:
            break
        operands.append(kwargs.pop(given[0]))
    return tuple(operands)


def _unsupported_form(what: str, hint: str) -> exc.UnsupportedOperationError:
    return exc.UnsupportedOperationError(f"{what} is not supported inside a compiled tile loop",
                                         location=user_location(), hint=hint)


def _rounded_division(tracer: Tracer, args: tuple[Any, ...], mode: str, dtype: torch.dtype) -> TileValue:
    """`torch.div(a, b, rounding_mode=mode)`: 'floor' is floor division; 'trunc' of floats the
    truncated quotient, of integers the floor quotient moved one toward zero where the remainder
    is nonzero and the signs differ."""
    if mode == "floor":
        return apply_elementwise(tracer, "floordiv", *args)
    if dtype.is_floating_point:  # torch's: the quotient rounded to the dtype, then truncated
        return apply_elementwise(tracer, "trunc", apply_elementwise(tracer, "truediv", *args))
    # a scalar divisor wraps into the dtype first (uint8 // -3 divides by 253), so its sign does too
    args = tuple(a if isinstance(a, TileValue) else scalar_operand(a, dtype) for a in args)
    quotient = apply_elementwise(tracer, "floordiv", *args)
    remainder = apply_elementwise(tracer, "mod", *args)
    signs_differ = apply_elementwise(tracer, "ne", apply_elementwise(tracer, "lt", args[0], 0),
                                     apply_elementwise(tracer, "lt", args[1], 0))
    inexact = apply_elementwise(tracer, "bitwise_and", apply_elementwise(tracer, "ne", remainder, 0), signs_differ)
    return apply_elementwise(tracer, "where", inexact, apply_elementwise(tracer, "add", quotient, 1), quotient)


def _trace_rule(name: str) -> Callable[..., Any]:
    op = _BY_NAME[name]

    def rule(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        args = _positional_operands(op, args, kwargs)
        if name == "where" and len(args) == 1:
            raise _unsupported_form("torch.where(condition) with one argument",
                                    "give both values: torch.where(condition, x, y)")
        kwargs.pop("out", None)
        if kwargs.get("inplace") is False:  # F.silu/F.relu pass it explicitly; torch.relu takes no such keyword
            kwargs.pop("inplace")
        args = tuple(scalar_tensor_value(tracer, a) for a in args)
        answer = ask_torch(f"torch.{op.torch_functions[0].__name__}", op.torch_functions[0], args, kwargs)
        if name in _ROUNDINGS and isinstance(args[0], TileValue) and not args[0].dtype.is_floating_point:
            return args[0]
        if name == "fmod" and any(isinstance(a, TileValue) and a.dtype == torch.bool for a in args[1:2]) \
                and not answer.dtype.is_floating_point:  # a False divisor raises in torch: refused whole
            raise exc.DtypeError("torch.fmod of bool values (torch raises ZeroDivisionError for a False divisor)",
                                 location=user_location(), hint="convert to an integer dtype first: v.to(torch.int32)")
        if name == "pow" and not answer.dtype.is_floating_point:
            return _integer_pow(tracer, args[0], args[1], answer.dtype)
        if name == "gelu" and kwargs.pop("approximate", "none") == "tanh":
            return _tanh_gelu(tracer, args[0], answer.dtype)
        if name == "truediv" and kwargs.get("rounding_mode") is not None:
            return _rounded_division(tracer, args, kwargs.pop("rounding_mode"), answer.dtype)
        if kwargs.get("alpha", 1) != 1 and name in ("add", "sub"):
            # torch converts alpha to the operands' common dtype first and scales `other` in it
            # (uint8 other scaled in uint8 wrapped where torch's int16 sum did not)
            promoted = result_dtype(op, tuple(args[:2]))[1]
            other = args[1].to(promoted) if isinstance(args[1], TileValue) and args[1].dtype != promoted else args[1]
            args = (args[0], apply_elementwise(tracer, "mul", other, scalar_operand(kwargs.pop("alpha"), promoted)))
        kwargs.pop("alpha", None)
        kwargs.pop("rounding_mode", None)
        if kwargs:  # a keyword torch accepts and this rule would drop: never a silent change of meaning
            raise _unsupported_form(f"torch.{name}(..., {', '.join(f'{k}=' for k in kwargs)})",
                                    "pass the operands by position, or run the kernel with mode='eager'")
        result = apply_elementwise(tracer, name, *args[:op.arity])
        if isinstance(answer, torch.Tensor) and answer.dtype != result.dtype:
            raise exc.TesseraError(f"internal error: torch.{name} gives {answer.dtype} where Tessera computed "
                                   f"{result.dtype}", location=user_location(),
                                   hint="this is a Tessera bug; run the kernel with mode='eager' meanwhile")
        return result
    rule.__name__ = f"_{name}_trace"
    return rule


def _tanh_gelu(tracer: Tracer, x: TileValue, dtype: torch.dtype) -> TileValue:
    """F.gelu(x, approximate='tanh') as torch's kernel evaluates it, in fp32 for 16-bit inputs."""
    def e(name: str, *operands: Any) -> TileValue:
        return apply_elementwise(tracer, name, *operands)
    wide = tracer.emit(Op.CAST, [x.node], x.axes, _compute_dtype(dtype)) if x.dtype != _compute_dtype(dtype) else x
    cube = e("mul", e("mul", e("mul", wide, wide), wide), 0.044715)
    inner = e("mul", e("add", wide, cube), 0.7978845608028654)  # sqrt(2 / pi)
    result = e("mul", e("mul", wide, 0.5), e("add", e("tanh", inner), 1))
    return result if result.dtype == dtype else tracer.emit(Op.CAST, [result.node], result.axes, dtype)


def _integer_pow(tracer: Tracer, base: Any, exponent: Any, dtype: torch.dtype) -> TileValue:
    """`base ** exponent` in an integer dtype, as torch computes it: products that wrap in `dtype`
    (a constant exponent must be >= 0: torch refuses negative ones)."""
    if isinstance(exponent, TileValue) and isinstance(base, (TileValue, int)) and not isinstance(base, bool):
        return _integer_pow_by_value(tracer, base, exponent, dtype)
    if not (isinstance(base, TileValue) and isinstance(exponent, int) and 0 <= exponent <= 1024):
        raise exc.DtypeError(
            f"torch.pow with an integer result ({str(dtype).replace('torch.', '')}) needs a tile base and a "
            "constant exponent in [0, 1024] inside a compiled tile loop", location=user_location(),
            hint="convert to float first (x.float() ** e), or use a constant integer exponent")
    result: Any = apply_elementwise(tracer, "add", apply_elementwise(tracer, "mul", base, 0), 1)
    power: Any = base
    while exponent:  # square and multiply: the wrapped products equal torch's
        if exponent & 1:
            result = apply_elementwise(tracer, "mul", result, power)
        exponent >>= 1
        if exponent:
            power = apply_elementwise(tracer, "mul", power, power)
    return result if result.dtype == dtype else tracer.emit(Op.CAST, [result.node], result.axes, dtype)


def _integer_pow_by_value(tracer: Tracer, base: Any, exponent: TileValue, dtype: torch.dtype) -> TileValue:
    """`base ** e` for an integer tile value `e`: square and multiply over every bit of e, the
    products wrapping in `dtype` as torch's do; a negative e gives torch's answers (1 for a base
    of 1, +-1 for -1 by e's parity, else 0)."""
    def e(name: str, *operands: Any) -> Any:
        return apply_elementwise(tracer, name, *operands)

    def as_result(value: TileValue) -> TileValue:
        return value if value.dtype == dtype else tracer.emit(Op.CAST, [value.node], value.axes, dtype)
    ones = as_result(e("add", e("mul", exponent, 0), 1))
    start = as_result(base) if isinstance(base, TileValue) else e("mul", ones, base)  # a number wraps into dtype
    result, power, remaining = ones, start, e("maximum", exponent, 0)
    bits = exponent.dtype.itemsize * 8 - (exponent.dtype != torch.uint8)  # of a non-negative exponent
    for step in range(bits):
        result = e("where", e("ne", e("bitwise_and", remaining, 1), 0), e("mul", result, power), result)
        if step < bits - 1:
            remaining, power = e("rshift", remaining, 1), e("mul", power, power)
    minus_one = e("where", e("ne", e("bitwise_and", exponent, 1), 0), e("neg", ones), ones)
    negative = e("where", e("eq", start, 1), ones, e("where", e("eq", start, -1), minus_one, e("mul", ones, 0)))
    return as_result(e("where", e("lt", exponent, 0), negative, result))


ELEMENTWISE_PRIMITIVES: dict[str, Primitive] = {}
for _op in ELEMENTWISE_OPS:
    ELEMENTWISE_PRIMITIVES[_op.name] = Primitive(_op.name, torch_functions=_op.torch_functions)
    ELEMENTWISE_PRIMITIVES[_op.name].def_trace(_trace_rule(_op.name))


def _where_method_trace(tracer: Tracer, x: Any, condition: Any, y: Any = None, **kwargs: Any) -> TileValue:
    """`x.where(condition, y)`: torch.where(condition, x, y) (the method takes the value first)."""
    if y is None:
        y = kwargs.pop("other", None)
    return ELEMENTWISE_PRIMITIVES["where"].trace_rule(tracer, condition, x, y, **kwargs)


where_method_p = Primitive("where_method", torch_functions=(T.where,))
where_method_p.def_trace(_where_method_trace)


def _clamp_trace(tracer: Tracer, x: Any, min: Any = None, max: Any = None) -> TileValue:  # noqa: A002
    x, min, max = (scalar_tensor_value(tracer, v) for v in (x, min, max))  # noqa: A001
    ask_torch("torch.clamp", torch.clamp, (x, min, max), {})
    result = x
    if min is not None:
        result = apply_elementwise(tracer, "maximum", result, min)
    if max is not None:
        result = apply_elementwise(tracer, "minimum", result, max)
    return result


clamp_p = Primitive("clamp", torch_functions=(torch.clamp, T.clamp, torch.clip, T.clip))
clamp_p.def_trace(_clamp_trace)


def _lerp_trace(tracer: Tracer, start: Any, end: Any, weight: Any) -> TileValue:
    """torch.lerp's formula: `start + w * (end - start)` for |w| < 0.5, else
    `end - (end - start) * (1 - w)` (exact at w = 1). As torch's kernels: `end - start` and
    `1 - w` round in the op's math dtype (fp32 for 16-bit floats), each multiply-add is fused
    (done here in fp64, whose product of two fp32 values is exact), then rounds once."""
    start, end, weight = (scalar_tensor_value(tracer, v) for v in (start, end, weight))
    answer = ask_torch("torch.lerp", torch.lerp, (start, end, weight), {})
    opmath = _compute_dtype(answer.dtype)

    def as_(value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, TileValue) and value.dtype != dtype:
            return tracer.emit(Op.CAST, [value.node], value.axes, dtype)
        return value

    start, end, weight = (as_(v, opmath) for v in (start, end, weight))
    difference = as_(apply_elementwise(tracer, "sub", end, start), torch.float64)
    rest = as_(apply_elementwise(tracer, "sub", 1, weight), torch.float64) if isinstance(weight, TileValue) \
        else 1 - weight
    wide_start, wide_end, wide_weight = (as_(v, torch.float64) for v in (start, end, weight))
    low = apply_elementwise(tracer, "add", wide_start, apply_elementwise(tracer, "mul", wide_weight, difference))
    high = apply_elementwise(tracer, "sub", wide_end, apply_elementwise(tracer, "mul", difference, rest))
    if not isinstance(weight, TileValue):
        small = sympy.Lt(sympy.Abs(sympy.sympify(weight)), sympy.Rational(1, 2))
        if not isinstance(small, sympy.logic.boolalg.BooleanAtom):  # a float argument: one branch per call
            small = sympy.true if tracer.symbols.evaluate(small) else sympy.false
            tracer.symbols.guard(sympy.Lt(sympy.Abs(weight), sympy.Rational(1, 2)) if small
                                 else sympy.Ge(sympy.Abs(weight), sympy.Rational(1, 2)), "lerp weight's branch")
        result = low if bool(small) else high
    else:
        small = apply_elementwise(tracer, "lt", apply_elementwise(tracer, "abs", weight), 0.5)
        result = apply_elementwise(tracer, "where", small, low, high)
    return as_(as_(result, opmath), answer.dtype)


lerp_p = Primitive("lerp", torch_functions=(torch.lerp, T.lerp))
lerp_p.def_trace(_lerp_trace)


# torch's logical ops: operands are true where nonzero (NaN included), the result is bool
def _truth(tracer: Tracer, value: Any) -> Any:
    if isinstance(value, TileValue) and value.dtype != torch.bool:
        return apply_elementwise(tracer, "ne", value, 0)
    return value if isinstance(value, TileValue) else bool(value)


def _logical_trace(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(tracer: Tracer, *args: Any, out: Any = None) -> TileValue:
        ask_torch(f"torch.{function.__name__}", function, args, {})
        return apply_elementwise(tracer, name, *(_truth(tracer, a) for a in args))
    rule.__name__ = f"_{function.__name__}_trace"
    return rule


for _bitwise, _logical in (("bitwise_and", torch.logical_and), ("bitwise_or", torch.logical_or),
                           ("bitwise_xor", torch.logical_xor), ("invert", torch.logical_not)):
    Primitive(_logical.__name__, torch_functions=(_logical, getattr(T, _logical.__name__))).def_trace(
        _logical_trace(_bitwise, _logical))
