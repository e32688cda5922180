"""What control flow inside a tile loop means while tracing: inner loops and `if`.

The frontend rewrites an inner `for ... in hl.tile(...)` into a call of `device_loop_helper` and an
`if` into a call of `device_if_helper` (see frontend/rewrite.py). A host condition runs one branch
in Python (guarded when it depends on runtime sizes); a device condition traces both branches
as a predicated branch.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import sympy
import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import UNIT, Node, Op
from tessera.ir.primitive import TORCH_FUNCTIONS
from tessera.ir.torch_alternatives import torch_spelling
from tessera.language.creation import full_p
from tessera.language.elementwise import apply_elementwise
from tessera.language.tile import grid
from tessera.language.scans import HL_FORMS_OF_TORCH
from tessera.location import user_location
from tessera.trace.factories import TILE_FACTORIES
from tessera.trace.proxy import AxisSize, HostScalar, TileValue
from tessera.trace.tracer import Tracer, current_tracer


class _Undefined:
    """The value of a name an `if` may bind that was not bound before it."""

    def __repr__(self) -> str:
        return "<undefined>"

    def __reduce__(self) -> str:
        return "UNDEFINED"


UNDEFINED = _Undefined()


def device_loop_helper(tile_range: Any, body: Callable[..., Any], carried: tuple) -> tuple:
    """What a rewritten inner tile loop calls (only ever while tracing). A carried name unbound
    before the loop (UNDEFINED: bound only under a host `if` that was false) is not carried: it
    enters each iteration as UNDEFINED and leaves as UNDEFINED, as a name the body alone binds."""
    defined = [position for position, value in enumerate(carried) if value is not UNDEFINED]
    if len(defined) == len(carried):
        return current_tracer().device_loop(tile_range, body, carried)

    def body_of_defined(target: Any, *values: Any) -> tuple:
        full = list(carried)
        for position, value in zip(defined, values):
            full[position] = value
        results = body(target, *full)
        return tuple(results[position] for position in defined)

    results = current_tracer().device_loop(tile_range, body_of_defined, tuple(carried[p] for p in defined))
    merged = [UNDEFINED] * len(carried)
    for position, value in zip(defined, results):
        merged[position] = value
    return tuple(merged)


def _symbolic(value: Any) -> bool:
    return isinstance(value, sympy.Expr) and bool(value.free_symbols)


def _number_like(value: Any) -> bool:
    return isinstance(value, (int, float, sympy.Expr))


def compare_helper(left: Any, operator: str, right: Any) -> Any:
    """What a rewritten `a == b` / `a != b` inside a tile loop calls.

    Grid indices, tile bounds and sizes are sympy expressions while tracing, and sympy's `==`
    compares structure (`pid_0 == 1` is False), which silently dropped `if row == 1:`. Here a
    comparison with a symbolic side is a relation (`Eq(pid_0, 1)`), which `if` decides per
    call (host sizes, guarded) or on the device (program ids, loaded values).

    >>> compare_helper(sympy.Symbol("pid_0"), "eq", 1)     # doctest: +SKIP
    Eq(pid_0, 1)
    """
    spelling = "==" if operator == "eq" else "!="
    left = left.number(spelling) if isinstance(left, AxisSize) else left
    right = right.number(spelling) if isinstance(right, AxisSize) else right
    if (_symbolic(left) or _symbolic(right)) and _number_like(left) and _number_like(right):
        return sympy.Eq(left, right) if operator == "eq" else sympy.Ne(left, right)
    return left == right if operator == "eq" else left != right


def _condition(value: Any) -> bool:
    """Whether `value` is a condition Python cannot decide now: a device value, or a relation or
    expression over symbols (runtime scalars, sizes, program ids, loaded values)."""
    return isinstance(value, TileValue) or (
        isinstance(value, sympy.Basic) and not isinstance(value, (sympy.logic.boolalg.BooleanAtom, sympy.Number))
        and bool(value.free_symbols))


def _sympy_boolean(value: Any) -> bool:
    # a sympy Symbol is both an Expr and a Boolean: an int argument `v` is a number here
    return isinstance(value, sympy.logic.boolalg.Boolean) and not isinstance(value, sympy.Expr)


def _truth(condition: sympy.Basic) -> sympy.Basic:
    """A symbolic condition as a boolean (`v` alone means `v != 0`, as Python's `if v:`); a Python
    bool (a size comparison decided for the traced call, proxy.py) is sympy's constant."""
    if isinstance(condition, bool):
        return sympy.true if condition else sympy.false
    return condition if _sympy_boolean(condition) else sympy.Ne(condition, 0)


def _boolean(value: Any) -> bool:
    return isinstance(value, bool) or _sympy_boolean(value) or (
        isinstance(value, TileValue) and value.dtype == torch.bool)


def _device_truth(tracer: Tracer, condition: Any) -> TileValue:
    if isinstance(condition, TileValue):
        return condition if condition.dtype == torch.bool else apply_elementwise(tracer, "ne", condition, 0)
    return tracer.symbolic_value(_truth(condition))


def _joined(kind: str, conditions: list[Any], result: Any) -> Any:
    """Python's `c1 and c2 ... and result` (or `or`) where each `c` is a condition it cannot decide now.

    Booleans join into one condition: a sympy one while every part is symbolic or a bool (an `if`
    on it is decided as any symbolic condition is), else a device bool. Other values (`scale or
    1.0` on a float argument) select as Python would return them, on the device."""
    if all(_boolean(value) for value in (*conditions, result)):
        if all(isinstance(value, (bool, sympy.Basic)) for value in (*conditions, result)):
            return (sympy.And if kind == "and" else sympy.Or)(*map(_truth, conditions), result)
        tracer = current_tracer()
        joined = _device_truth(tracer, result) if isinstance(result, (sympy.Basic, bool)) else result
        for condition in reversed(conditions):
            joined = (torch.logical_and if kind == "and" else torch.logical_or)(_device_truth(tracer, condition), joined)
        return joined
    if not isinstance(result, (int, float, sympy.Basic, TileValue)):
        raise exc.UnsupportedOperationError(
            f"`{kind}` of a value known only when the kernel runs and {result!r}: the result would be one or "
            "the other, decided on the device", location=user_location(),
            hint="write the choice with numbers or tiles on both sides, e.g. torch.where(v != 0, v, 1.0)")
    tracer = current_tracer()
    for condition in reversed(conditions):  # `c or r` is `c if c else r`; `c and r` is `r if c else c`
        taken, other = (condition, result) if kind == "or" else (result, condition)
        result = apply_elementwise(tracer, "where", _device_truth(tracer, condition), taken, other)
    return result


def logical_helper(kind: str, *operands: Callable[[], Any]) -> Any:
    """What a rewritten `a and b ...` / `a or b ...` inside a tile loop calls, each operand a thunk.

    Host values keep Python's meaning (the value returned, the short circuit). A condition Python
    cannot decide now (`v > 3` on a runtime scalar, a device comparison) does not stop the
    chain: the result is Python's, as a condition (`And(v > 3, v < 7)`) or a device value.

    >>> logical_helper("and", lambda: sympy.Symbol("v") > 3, lambda: True)   # doctest: +SKIP
    v > 3
    """
    conditions: list[Any] = []
    value: Any = None
    for operand in operands:
        value = operand()
        if _condition(value):
            conditions.append(value)
        elif (not value) if kind == "and" else value:  # Python's short circuit: this value decides
            break
    else:
        if conditions and conditions[-1] is value:  # the last operand, when reached, is the result
            conditions.pop()
    return _joined(kind, conditions, value) if conditions else value


def not_helper(value: Any) -> Any:
    """What a rewritten `not value` inside a tile loop calls: the negated condition for a
    symbolic or device one (Python would ask it for a bool), else Python's `not`."""
    if isinstance(value, TileValue):
        return torch.logical_not(value)
    if _condition(value):
        return sympy.Not(_truth(value))
    return not value


_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": lambda left, right: compare_helper(left, "eq", right), "ne": lambda left, right: compare_helper(left, "ne", right),
    "is": operator.is_, "is not": operator.is_not,
    "in": lambda left, right: left in right, "not in": lambda left, right: left not in right}


def chain_helper(*parts: Any) -> Any:
    """What a rewritten chained comparison `a < b < c` calls: (thunk, operator name, thunk, ...).
    As Python: `a < b and b < c`, b evaluated once, c not at all when `a < b` is False."""
    operands, operators = parts[0::2], parts[1::2]
    values: dict[int, Any] = {}

    def operand(position: int) -> Any:
        if position not in values:
            values[position] = operands[position]()
        return values[position]

    def comparison(position: int) -> Callable[[], Any]:
        return lambda: _COMPARISONS[operators[position]](operand(position), operand(position + 1))

    return logical_helper("and", *(comparison(position) for position in range(len(operators))))


def range_helper(function: Any, *bounds: Any) -> Any:
    """What a rewritten `for i in range(...)` inside a tile loop calls: Python loops are unrolled
    while tracing, so their bounds must be ints now (`function` is `range` as the kernel sees it)."""
    if function is not range:
        return function(*bounds)
    for bound in bounds:
        if _runtime_bound(bound):
            raise exc.UnsupportedOperationError(
                f"range() over {bound}, a value known only when the kernel runs: Python loops in a tile "
                "loop are unrolled while compiling", location=user_location(),
                hint="loop on the device with `for i in hl.grid(k):`, or make the bound a compile-time "
                     "int with hl.specialize(k)")
    return range(*(int(bound) if isinstance(bound, sympy.Basic) else bound for bound in bounds))


def _runtime_bound(bound: Any) -> bool:
    return isinstance(bound, TileValue) or (isinstance(bound, sympy.Basic) and not bound.is_Integer)


def static_range_helper(function: Any, *bounds: Any) -> bool:
    """Whether a rewritten `for i in range(...)` inside a tile loop stays a Python loop (unrolled
    while tracing): its bounds are ints now. A bound known only when the kernel runs makes it a
    device loop instead (`device_range_helper`)."""
    return function is not range or not any(_runtime_bound(bound) for bound in bounds)


def device_range_helper(function: Any, *bounds: Any) -> Any:
    """The device loop of `for i in range(...)` whose bounds are known only when the kernel runs:
    `hl.grid` over the same indices (`range(n)`, `range(begin, end)`, `range(begin, end, step)`)."""
    if len(bounds) == 3:
        return grid(bounds[0], bounds[1], bounds[2])
    return grid(*bounds)


def minmax_helper(function: Any, *values: Any) -> Any:
    """What a rewritten `min(a, b, ...)` / `max(...)` inside a tile loop calls: on symbolic sizes
    and tile bounds (`min(tile.end, n)`), sympy's Min/Max, which slices, masks and loop bounds
    take; anything else is Python's own (`function` is the name as the kernel sees it)."""
    if function in (min, max):  # `min(k, v.size(1))`: a whole dim's size as the number it is
        values = tuple(value.number(function.__name__) if isinstance(value, AxisSize) else value for value in values)
    if function in (min, max) and any(_symbolic(value) for value in values) \
            and all(_number_like(value) and not isinstance(value, bool) for value in values):
        return (sympy.Min if function is min else sympy.Max)(*values)
    if function in (min, max) and len(values) > 1 and any(isinstance(value, TileValue) for value in values) \
            and all(isinstance(value, TileValue) or _number_like(value) for value in values):
        # `min(max(v, 3), 7)` on device values: Python would compare them (a device value cannot
        # decide that while compiling); elementwise minimum / maximum is what it means
        pick = TORCH_FUNCTIONS[torch.minimum if function is min else torch.maximum]
        bound = "max" if function is min else "min"  # min(v, 7) is v clamped to at most 7
        devices = [value for value in values if isinstance(value, TileValue)]
        result = devices[0]
        for value in devices[1:]:
            result = pick.bind(result, value)
        numbers = [value for value in values if not isinstance(value, TileValue)]
        if numbers:
            symbolic = any(_symbolic(value) for value in numbers)
            limit = (sympy.Min if function is min else sympy.Max)(*numbers) if symbolic else function(numbers)
            result = TORCH_FUNCTIONS[torch.clamp].bind(result, **{bound: limit})
        return result
    return function(*values)


def torch_call_helper(function: Any, *args: Any, **kwargs: Any) -> Any:
    """What a rewritten `torch.fn(...)` inside a tile loop calls: with a scalar argument that is a
    runtime expression (`1 - eps` of a float argument), fn's primitive directly, as torch's argument
    parser refuses sympy expressions; a torch callable with an hl form (`torch._higher_order_ops.
    associative_scan`) on tile values is that form; `torch.arange` is a tile value even from plain
    ints; anything else is the plain call."""
    if function in HL_FORMS_OF_TORCH and _holds_tile_values((*args, *kwargs.values())):
        return HL_FORMS_OF_TORCH[function](*args, **kwargs)
    if function is torch.tensor and args and _is_number(args[0]):
        return _scalar_tensor(args[0], kwargs.get("dtype"))
    if function is torch.tensor and "device" not in kwargs:
        # a constant index made in the loop (`torch.tensor([0, 2])`) lives where the kernel runs: eager
        # mode on a GPU otherwise mixed it (on the CPU) with the tile values (a raw device error)
        kwargs = {**kwargs, "device": interpreter.device()}
    if (function in TILE_FACTORIES or any(isinstance(value, sympy.Expr) and not isinstance(value, HostScalar)
                                           and value.free_symbols for value in (*args, *kwargs.values()))) \
            and function in TORCH_FUNCTIONS:
        return TORCH_FUNCTIONS[function].bind(*args, **kwargs)
    try:
        return function(*args, **kwargs)
    except TypeError as error:
        # torch's argument parser refusing the call itself (no Python frame below this one): the
        # user's arguments, said at their line; an error from deeper down is raised as it is
        if error.__traceback__ is None or error.__traceback__.tb_next is not None \
                or not _holds_tile_values((*args, *kwargs.values())):
            raise
        message = str(error).replace("TileValue", "tile value").strip()
        raise exc.UnsupportedOperationError(
            f"{torch_spelling(function)} does not take these arguments: {message}", location=user_location(),
            hint="check the call against torch's signature (the names of its keyword arguments)") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) or isinstance(value, sympy.Expr) and bool(value.free_symbols)


def _scalar_tensor(value: Any, dtype: torch.dtype | None) -> Any:
    """`torch.tensor(3.0)` in a tile loop: a 0-d constant (a runtime scalar's value too), as torch
    types it by default (bool, int64, or the default float dtype)."""
    if dtype is None:
        integral = isinstance(value, (bool, int)) or isinstance(value, sympy.Expr) and value.is_integer
        dtype = torch.bool if isinstance(value, bool) else torch.int64 if integral else torch.get_default_dtype()
    return full_p.bind((), value, dtype=dtype)


_BITWISE = {"rshift": operator.rshift, "lshift": operator.lshift, "and": operator.and_, "or": operator.or_,
            "xor": operator.xor}


def bitwise_helper(kind: str, left: Any, right: Any) -> Any:
    """What a rewritten `a >> b` (`<<`, `&`, `|`, `^`) inside a tile loop calls: Python's operator,
    unless a side is a symbolic int (`tile.begin >> 7`, `x.size(0) & 3`), which sympy has no
    bitwise operators for: a shift by a constant stays symbolic (floor division or product by a
    power of two, Python's meaning for negative ints too); any other is computed on the device
    from the expression's value (a 0-d int32 value, as `tile.begin` holds in the program)."""
    symbolic = [isinstance(v, sympy.Expr) and not isinstance(v, HostScalar) and bool(v.free_symbols)
                for v in (left, right)]
    if not any(symbolic):
        return _BITWISE[kind](left, right)
    if kind in ("rshift", "lshift") and not symbolic[1] and isinstance(right, int) and 0 <= right < 63:
        return sympy.floor(left / 2 ** right) if kind == "rshift" else left * 2 ** right
    tracer = current_tracer()
    left, right = (tracer.symbolic_value(v) if is_symbolic else v for v, is_symbolic in zip((left, right), symbolic))
    return _BITWISE[kind](left, right)


def _holds_tile_values(values: Any) -> bool:
    if isinstance(values, TileValue):
        return True
    return isinstance(values, (tuple, list)) and any(_holds_tile_values(value) for value in values)




def device_if_helper(condition: Any, then_body: Callable[..., tuple], else_body: Callable[..., tuple],
                     values: tuple) -> tuple:
    """What a rewritten `if` inside a tile loop calls: a host condition picks a branch in
    Python; a device (tile) condition becomes a predicated device branch."""
    if isinstance(condition, TileValue):
        return device_if(current_tracer(), condition, then_body, else_body, values)
    if isinstance(condition, sympy.Basic) and not isinstance(condition, (sympy.logic.boolalg.BooleanAtom, sympy.Number)):
        # a condition on runtime sizes (`if x.size(1) > 64:`): decided for this call, and the
        # variant is reused only for calls that decide it the same way
        tracer = current_tracer()
        symbols = tracer.symbols
        truth = _truth(condition)
        if truth.free_symbols - set(symbols.values):  # loaded values, loop variables: known only on the device
            return device_if(tracer, tracer.symbolic_value(truth), then_body, else_body, values)
        taken = bool(symbols.evaluate(truth))
        symbols.guard(truth if taken else sympy.Not(truth), f"host condition {condition} is {taken}")
        return then_body(*values) if taken else else_body(*values)
    return then_body(*values) if condition else else_body(*values)


def device_if(tracer: Tracer, condition: TileValue, then_body: Callable[..., tuple], else_body: Callable[..., tuple],
              values: tuple) -> tuple:
    """An `if` on a device scalar: both branches are traced (if-conversion); loads and stores
    inside a branch are masked by its condition, and each name assigned in a branch becomes
    `where(condition, then_value, else_value)`."""
    if any(axis is not UNIT for axis in condition.axes):
        raise exc.ShapeMismatchError(
            f"`if` needs a single boolean, but the condition is a tile of shape {list(condition.axes)}",
            location=user_location(),
            hint="use torch.where(condition, a, b) for per-element choices, or reduce the condition "
                 "(e.g. condition.to(torch.int32).amax() > 0 for 'any')")
    reduction = _reduction_over_a_tile(condition.node)
    if reduction is not None:
        exc.warn("this `if` depends on a reduction across a tile's block (all rows or columns a program "
                 "holds), so it decides once per block, not per row: its outcome changes with the block size",
                 location=user_location(),
                 hint="reduce over the row only and choose per row: "
                      "torch.where(row.sum(1, keepdim=True) > 0, a, b); or loop over single rows with hl.grid")
    taken = condition if condition.dtype == torch.bool else apply_elementwise(tracer, "ne", condition, 0)
    outer = tracer.predicate
    results = []
    for branch, body in ((taken, then_body), (apply_elementwise(tracer, "invert", taken), else_body)):
        tracer.predicate = branch.node if outer is None else tracer.and_predicate(outer, branch.node)
        try:
            results.append(body(*values))
        finally:
            tracer.predicate = outer
    merged = []
    for name, then_value, else_value in zip(_branch_names(then_body, len(results[0])), *results):
        if isinstance(then_value, TileValue) and isinstance(else_value, TileValue) \
                and len(then_value.axes) != len(else_value.axes):
            # where() would broadcast one branch's value to the other's rank: a shape neither branch has
            raise exc.ControlFlowTensorMismatch(
                f"the branches of this `if` give {name} values of different ranks: "
                f"{list(then_value.axes)} and {list(else_value.axes)}", location=user_location(),
                hint="give the variable the same shape in both branches (e.g. add a dim with v[:, None], "
                     "or reduce one of them)")
        if then_value is else_value:
            merged.append(then_value)
        elif then_value is UNDEFINED or else_value is UNDEFINED:
            merged.append(UNDEFINED)  # like Python: unbound after the if, reading it fails
        else:
            merged.append(apply_elementwise(tracer, "where", taken, then_value, else_value))
    return tuple(merged)


def _branch_names(body: Callable[..., tuple], count: int) -> list[str]:
    """The names a rewritten branch function takes and returns (its parameters), for messages."""
    code = getattr(body, "__code__", None)
    names = code.co_varnames[:code.co_argcount] if code is not None else ()
    return [repr(name) for name in names] if len(names) == count else ["a variable"] * count


def _reduction_over_a_tile(node: Node) -> Node | None:
    """A REDUCE node among `node`'s inputs (transitively) that folds a tile axis (a block of rows
    of a tile loop), whose result therefore depends on the block size; None if there is none."""
    seen: set[int] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        if not isinstance(current, Node) or id(current) in seen:
            continue
        seen.add(id(current))
        if current.op is Op.REDUCE and current.inputs and isinstance(current.inputs[0], Node) and any(
                axis.is_tile and axis.block > 1 and axis not in current.shape for axis in current.inputs[0].shape):
            return current
        pending.extend(current.inputs)
    return None
