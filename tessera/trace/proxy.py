"""Proxies: what a kernel body sees while it is traced.

`TensorProxy` stands for a tensor argument (indexing it loads, assigning to it stores),
`TileProxy` for a tile of a loop, `TileValue` for a value computed in registers. Torch calls
on them reach `__torch_function__`, which binds the primitive the callable stands for
(`ir.primitive.TORCH_FUNCTIONS`).
Scalars are sympy expressions over the kernel's symbols.
"""
from __future__ import annotations

import operator
import sys
from typing import Any, Callable

import sympy
import torch

from tessera import exc
from tessera.location import user_location
from tessera.ir import interpreter
from tessera.ir.graph import UNIT, Axis, Node, TensorRef
from tessera.ir.primitive import TORCH_FUNCTIONS
from tessera.ir.tile_range import TileOffsets
from tessera.ir.torch_alternatives import ALTERNATIVES_BY_FUNCTION, torch_spelling
from tessera.trace.torch_keywords import rule_arguments

def unsupported_operation(func: Callable[..., Any]) -> exc.UnsupportedOperationError:
    """The error for a torch callable with no primitive, met on a tile value (every mode raises it)."""
    alternative = ALTERNATIVES_BY_FUNCTION.get(func)
    advice = f"{alternative.advice}; " if alternative is not None else ""
    error = alternative.error if alternative is not None else exc.UnsupportedOperationError
    return error(
        f"{torch_spelling(func)} is not supported inside a compiled tile loop",
        location=user_location(),
        hint=f"{advice}see docs/language.md for every supported op")


def tile_value_assignment_error() -> exc.UnsupportedOperationError:
    """`v[i] = w` on a tile value (registers, not memory): every mode raises it (Helion's class,
    an UnsupportedOperationError)."""
    return exc.DeviceTensorSubscriptAssignmentNotAllowed(
        "item assignment into a tile value (`v[...] = w`): a tile value is a value in registers, not memory",
        location=user_location(),
        hint="select the new lanes with torch.where(mask, w, v), or store into a tensor and load it back")


def _dispatch(func: Callable[..., Any], args: tuple, kwargs: dict | None) -> Any:
    primitive = TORCH_FUNCTIONS.get(func)
    if primitive is None:
        raise unsupported_operation(func)
    if kwargs and kwargs.get("out") is not None:
        raise out_argument_error(func)
    if kwargs and primitive.trace_rule is not None:
        args, kwargs = rule_arguments(func, primitive.trace_rule, args, kwargs)
    return primitive.bind(*args, **(kwargs or {}))


def out_argument_error(func: Callable[..., Any]) -> exc.UnsupportedOperationError:
    """`torch.exp(v, out=w)` inside a tile loop: a tile value is no memory to write into (the
    result would be dropped silently)."""
    name = getattr(func, "__name__", "the op")
    return exc.UnsupportedOperationError(
        f"{name}(..., out=...) inside a tile loop: a tile value is not memory to write into",
        location=user_location(),
        hint=f"assign the result instead (`w = torch.{name}(v)`), or store it into a tensor: `out[tile] = torch.{name}(v)`")


def refuse_value_list(value: Any, what: str) -> None:
    """Refuse a Python list or tuple where one tile value belongs (`out[tile] = [a, b]`): a list
    of tiles exists only in Python while the kernel is traced, it is no value the kernel computes."""
    if isinstance(value, (list, tuple)):
        raise exc.UnsupportedOperationError(
            f"{what} got a Python {type(value).__name__} of {len(value)} items, but needs one tile value: "
            "a list of tiles is not a tile (it holds values only while the kernel is traced)",
            location=user_location(),
            hint="combine the values with torch ops first (a + b, torch.where(c, a, b), a.sum() + b.sum()), "
                 "or store each into its own slice of the output (out[tile, 0] = a; out[tile, 1] = b)")


class _TorchLike:
    """Shared `__torch_function__`: every proxy dispatches through the same table."""

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        return _dispatch(func, args, kwargs)


class TileValue(_TorchLike):
    """A value in registers: an IR node with a shape of axes and a dtype."""

    def __init__(self, node: Node) -> None:
        self.node = node

    @property
    def dtype(self) -> torch.dtype:
        assert self.node.dtype is not None
        return self.node.dtype

    @property
    def axes(self) -> tuple[Axis, ...]:
        return self.node.shape

    @property
    def shape(self) -> tuple[Any, ...]:
        return tuple(1 if axis is UNIT else AxisSize(axis) for axis in self.axes)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    @property
    def device(self) -> torch.device:
        """The kernel's device (a tile value lives in its registers): `torch.ones((), device=v.device)`."""
        return interpreter.device()

    def dim(self) -> int:
        return len(self.axes)

    ndim = property(dim)

    def numel(self) -> Any:
        """The element count of a value over whole dims (a tile dim's length varies per tile: an error)."""
        total: Any = 1
        for size in self.shape:
            total = total * (size if isinstance(size, int) else size.number("v.numel()"))
        return total

    nelement = numel

    # dtype facts a kernel branches on (`2 if v.is_floating_point() else 3`): known while tracing
    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __repr__(self) -> str:
        return f"TileValue({self.node.name}: {self.dtype}, {list(self.axes)})"

    def __str__(self) -> str:
        # print(v) / f"{v}" in a tile body runs while the kernel is traced, when v has no numbers
        raise exc.UnsupportedOperationError(
            "print() or str() of a tile value: Python in a tile body runs once, when the kernel is traced, "
            "before any value is computed, so there are no numbers to print",
            location=user_location(),
            hint="run the kernel with mode='eager' (or TESSERA_MODE=eager), where print shows the real values; "
                 "or store the value into an output tensor and print that after the call (docs/debugging.md)")

    def __format__(self, spec: str) -> str:
        return str(self)

    def __getattr__(self, name: str) -> Any:
        # Tensor methods (`v.sum(1)`, `v.to(dtype)`, `v.exp()`) route through the same table
        # as the torch functions.
        method = getattr(torch.Tensor, name, None)
        if method is not None and name.endswith("_") and not name.startswith("_"):
            return self._in_place_method(name)
        if method is None:
            if name.startswith("__"):
                # Python's own protocol probes (copy, pickle, numpy) expect a plain AttributeError
                raise AttributeError(f"tile values have no attribute {name!r}")
            raise exc.UnsupportedMethodError(
                f"tile values have no attribute {name!r}: a tile value is a torch.Tensor-like block of the "
                f"kernel's data and has torch.Tensor's methods and attributes only",
                location=user_location(),
                hint="check the spelling against torch.Tensor's API (e.g. `v.sum(1)`, `v.to(torch.float32)`, "
                     "`v.shape`)")
        if method not in TORCH_FUNCTIONS:
            error = unsupported_operation(method)
            raise exc.UnsupportedMethodError(error.detail, location=error.location, hint=error.hint)

        def bound(*args: Any, **kwargs: Any) -> Any:
            return _dispatch(method, (self, *args), kwargs)
        return bound

    def _in_place_method(self, name: str) -> Callable[..., Any]:
        """`v.mul_(2)`, `v.exp_()`, `v.zero_()`, `v.copy_(w)`: torch's out-of-place op, cast back into v's dtype
        and shape (as `v *= 2`). The kernel's frontend rebinds the name (`v = v.mul_(2)`): a tile
        value is a copy, so nothing is written through to a tensor."""
        fills = {"zero_": (torch.zeros_like, ()), "fill_": (torch.full_like, None)}
        if name in fills:
            function, fixed = fills[name]

            def filled(*args: Any) -> Any:
                return _in_place(self, _dispatch(function, (self, *(args if fixed is None else fixed)), None))
            return filled
        if name == "copy_":  # v.copy_(w): w converted to v's dtype (any dtype, as torch's copy_) and broadcast

            def copied(source: Any, non_blocking: bool = False) -> Any:
                converted = _dispatch(torch.Tensor.to, (source, self.dtype), None)
                return _in_place(self, _dispatch(torch.Tensor.expand_as, (converted, self), None))
            return copied
        method = getattr(torch.Tensor, name[:-1], None)
        if method not in TORCH_FUNCTIONS:
            error = unsupported_operation(getattr(torch.Tensor, name))
            raise exc.UnsupportedMethodError(error.detail, location=error.location, hint=error.hint)

        def bound(*args: Any, **kwargs: Any) -> Any:
            return _in_place(self, _dispatch(method, (self, *args), kwargs))
        return bound

    def __bool__(self) -> bool:
        raise exc.UnsupportedSyntaxError(
            "a device value cannot decide Python control flow (if/while/and/or) inside a tile loop",
            location=user_location(),
            hint="compute both branches and select with torch.where(condition, a, b)")

    def __iter__(self) -> Any:
        raise exc.UnsupportedSyntaxError("iterating over a tile value is not supported",
                                         location=user_location(), hint="index it with a tile or use hl.static_range")

    def __len__(self) -> int:
        raise exc.UnsupportedSyntaxError("len() of a tile value is not a compile-time int",
                                         location=user_location(), hint="use .size(dim)")

    def item(self) -> Any:
        raise exc.UnsupportedOperationError(
            "a tile value has no Python value while the kernel is compiled (.item() / float() / int())",
            location=user_location(),
            hint="use the value in tensor operations directly (x * v, torch.where(v > 0, ...)); a scalar from "
                 "memory: hl.load(t, [i]); a number the host knows: pass it as a kernel argument")

    tolist = item
    __float__ = item
    __int__ = item
    __complex__ = item

    def __index__(self) -> int:
        raise exc.IndexingError("a tile value cannot be used as a Python int", location=user_location(),
                                hint="index tensors with it directly (x[idx]) or use hl.load")

    def __getitem__(self, index: Any) -> Any:
        return _dispatch(torch.Tensor.__getitem__, (self, index), None)

    def __setitem__(self, index: Any, value: Any) -> None:
        raise tile_value_assignment_error()

    def _sympy_(self) -> Any:
        # `size_expr + tile_value`: sympy asks first; refusing makes Python call our __radd__
        raise sympy.SympifyError(self)

    @property
    def T(self) -> Any:  # noqa: N802  (torch's name)
        return _dispatch(torch.permute, (self, tuple(reversed(range(self.dim())))), None)

    @property
    def mT(self) -> Any:  # noqa: N802  (torch's name)
        return _dispatch(torch.transpose, (self, -2, -1), None)

    __hash__ = object.__hash__  # `==` builds a node; tile values hash by identity


# Python operators on tile values mean the torch function of the same name (one table for both
# directions, as torch.fx does): `a + b` is torch.add(a, b), `2 - a` is torch.sub(2, a).
BINARY_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div, "floordiv": torch.floor_divide,
    "mod": torch.remainder, "pow": torch.pow, "and": torch.bitwise_and, "or": torch.bitwise_or,
    "xor": torch.bitwise_xor, "matmul": torch.matmul, "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift,
}
COMPARISONS: dict[str, Callable[..., Any]] = {
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
}
UNARY_OPERATORS: dict[str, Callable[..., Any]] = {"neg": torch.neg, "abs": torch.abs, "invert": torch.bitwise_not}


def _binary_operator(function: Callable[..., Any], reflected: bool) -> Callable[..., Any]:
    def operator(self: TileValue, other: Any) -> Any:
        return _dispatch(function, (other, self) if reflected else (self, other), None)
    return operator


def _unary_operator(function: Callable[..., Any]) -> Callable[..., Any]:
    def operator(self: TileValue) -> Any:
        return _dispatch(function, (self,), None)
    return operator


def _in_place(target: TileValue, result: Any) -> TileValue:
    """`v += w` as torch runs it: the result keeps v's dtype and shape (torch refuses a result it
    cannot cast back, or one broadcast wider). The name is rebound to a new value (not v changed
    in place: a branch of a device `if` must leave the value the other branch sees alone), so
    another name bound to v keeps the old value (torch's would change: README limits)."""
    if not isinstance(result, TileValue):
        return result
    if result.dtype != target.dtype:
        if not torch.can_cast(result.dtype, target.dtype):
            raise exc.DtypeError(
                f"an in-place operation on a {target.dtype} tile value computes {result.dtype}, which torch does "
                f"not cast back into {target.dtype}", location=user_location(),
                hint=f"write `v = v <op> w` to keep the {result.dtype} result, or cast the operand first")
        result = _dispatch(torch.Tensor.to, (result, target.dtype), None)
    if len(result.axes) != len(target.axes) or any(  # (a tile of block 1 fits a size-1 dim, as in eager)
            mine is UNIT and theirs is not UNIT and theirs.block != 1 for mine, theirs in zip(target.axes, result.axes)):
        raise exc.ShapeMismatchError(
            f"an in-place operation on a tile value of shape {list(target.axes)} computes shape "
            f"{list(result.axes)}: torch does not broadcast the value written in place", location=user_location(),
            hint="write `v = v <op> w` to keep the broadcast result")
    return result


def _in_place_operator(function: Callable[..., Any]) -> Callable[..., Any]:
    def operator(self: TileValue, other: Any) -> Any:
        return _in_place(self, _dispatch(function, (self, other), None))
    return operator


for _name, _function in BINARY_OPERATORS.items():
    setattr(TileValue, f"__i{_name}__", _in_place_operator(_function))
    setattr(TileValue, f"__{_name}__", _binary_operator(_function, False))
    setattr(TileValue, f"__r{_name}__", _binary_operator(_function, True))
for _name, _function in COMPARISONS.items():
    setattr(TileValue, f"__{_name}__", _binary_operator(_function, False))
for _name, _function in UNARY_OPERATORS.items():
    setattr(TileValue, f"__{_name}__", _unary_operator(_function))


def _decided_in_user_code(original: Callable[[Any, Any], Any], spelling: str,
                          negated: bool = False) -> Callable[[Any, Any], Any]:
    """A comparison method of a size (or size expression): against a Python number in the user's
    code, `<spelling>` decided for the traced call and guarded (`negated`: its opposite, for `!=`);
    `original` (sympy's own answer) otherwise."""
    def compare(self: sympy.Expr, other: Any) -> Any:
        decided = _user_relation(self, other, spelling)
        return original(self, other) if decided is None else decided != negated
    return compare


class HostScalar(sympy.Symbol):
    """A scalar argument of the kernel while tracing (`lo: float`): a sympy symbol that torch's
    argument parser also accepts where a tensor may stand, so `torch.clamp(v, lo, hi)` and
    `torch.where(c, v, lo)` reach the primitives as `v.clamp(lo, hi)` does."""

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        return _dispatch(func, args, kwargs)

    # sympy's `==` compares structure: `x_size1 == 16` would be False for every call, and code the
    # rewrite does not see (a helper function, a lambda) would branch on that silently; its orderings
    # give a relation whose truth Python cannot take (a raw TypeError in a helper's `if x.size(1) > 16:`).
    # Against a Python number in the user's code each is decided for the call being traced and guarded,
    # as a rewritten `if x.size(1) == 16:` is; sympy's own comparisons (with sympy objects) are kept.
    __eq__ = _decided_in_user_code(sympy.Symbol.__eq__, "==")
    __ne__ = _decided_in_user_code(sympy.Symbol.__ne__, "==", negated=True)
    __lt__ = _decided_in_user_code(sympy.Symbol.__lt__, "<")
    __le__ = _decided_in_user_code(sympy.Symbol.__le__, "<=")
    __gt__ = _decided_in_user_code(sympy.Symbol.__gt__, ">")
    __ge__ = _decided_in_user_code(sympy.Symbol.__ge__, ">=")

    __hash__ = sympy.Symbol.__hash__


def _size_index(self: sympy.Expr) -> int:
    """Python needs a plain int (`[0.0] * x.size(1)`, `range(x.size(1))`, `torch.roll(v, n // 2)`
    in a helper the rewrite does not see): the user's code gets this call's value, and the variant
    is pinned to it by a guard."""
    value = symbol_value(self) if self.is_integer and written_by_user(1) else None
    if value is None:
        raise TypeError(f"{self} is a number known per call, not a Python int here")
    _decided_while_tracing(self, value, "==")  # the guard: calls with another value retrace
    return value


def _size_truth(self: sympy.Expr) -> bool:
    """`2.0 if n % 2 else 3.0` / `if n // 16:` in a helper the rewrite does not see: the truth of a size
    expression (nonzero) for the traced call, guarded; elsewhere (sympy's and Tessera's own code)
    Python's default for objects, True. Was always True, so another size silently took the branch."""
    decided = _user_relation(self, 0, "!=")
    return True if decided is None else decided


HostScalar.__index__ = _size_index  # type: ignore[method-assign]
HostScalar.__bool__ = _size_truth  # type: ignore[method-assign]


def symbol_value(symbol: sympy.Expr) -> int | None:
    """The traced call's value of an integer symbol, or None outside a trace or for one it has no
    value of."""
    symbols = getattr(interpreter.active(), "symbols", None)
    values = getattr(symbols, "values", None)
    if values is None or not symbol.free_symbols <= set(values):
        return None
    return int(symbols.evaluate(symbol))


RELATIONS: dict[str, tuple[Callable[[Any, Any], bool], Callable[..., sympy.Basic]]] = {
    "==": (operator.eq, sympy.Eq), "<": (operator.lt, sympy.Lt), "<=": (operator.le, sympy.Le),
    ">": (operator.gt, sympy.Gt), ">=": (operator.ge, sympy.Ge), "!=": (operator.ne, sympy.Ne),
}
"""Python's comparison and sympy's unevaluated relation, per spelling."""


def _user_relation(expression: sympy.Expr, other: Any, spelling: str, depth: int = 2) -> bool | None:
    """`expression <spelling> other` decided for the traced call when the user's code compares it
    with a Python number; None (sympy's own answer) otherwise. `depth`: how many frames up the
    comparison was written."""
    if not isinstance(other, (int, float)) or isinstance(other, bool) or not written_by_user(depth):
        return None
    return _decided_while_tracing(expression, other, spelling)


def written_by_user(depth: int) -> bool:
    """Whether the frame `depth` levels above the caller is the user's code. Only the user's code
    gets value-dependent answers: sympy caches what it simplifies by structure, so an answer given
    to sympy (or to Tessera's own shape code) would be reused for a later call with another value."""
    frame = sys._getframe(depth + 1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == _PASS_THROUGH:
        frame = frame.f_back  # trace/factories.py's torch-function mode only forwards the user's call
    caller = frame.f_globals.get("__name__", "")
    return not caller.startswith(("sympy", "tessera.", "torch"))


_PASS_THROUGH = "tessera.trace.factories"


def _decided_while_tracing(left: Any, right: Any, spelling: str = "==") -> bool | None:
    """`left <spelling> right` (sizes and numbers) for the call being traced, with the guard that keeps
    the variant to calls that decide it the same way; None outside a trace or for an expression of
    symbols the trace has no value of (loaded values, loop variables)."""
    symbols = getattr(interpreter.active(), "symbols", None)
    values = getattr(symbols, "values", None)
    free = set().union(*(side.free_symbols for side in (left, right) if isinstance(side, sympy.Basic)))
    if values is None or not free or not free <= set(values):
        return None
    compare, relation_of = RELATIONS[spelling]
    holds = bool(compare(symbols.evaluate(left), symbols.evaluate(right)))
    relation = relation_of(left, right, evaluate=False)
    symbols.guard(relation if holds else sympy.Not(relation), f"{left} {spelling} {right} is {holds}")
    return holds


_SYMPY_RELATION_TRUTH = sympy.core.relational.Relational.__bool__


def _relation_truth(relation: sympy.core.relational.Relational) -> bool:
    """`bool()` of a sympy relation: sympy raises a TypeError for one over symbols, which reached users
    raw from `if x.size(1) * 2 > 16:` in a helper the rewrite does not see. In the user's code, while
    a call is traced, it is decided for that call and guarded (as HostScalar's comparisons are)."""
    spelling = getattr(relation, "rel_op", None)
    decided = _decided_while_tracing(relation.lhs, relation.rhs, spelling) \
        if spelling in RELATIONS and written_by_user(1) else None
    return _SYMPY_RELATION_TRUTH(relation) if decided is None else decided


sympy.core.relational.Relational.__bool__ = _relation_truth  # type: ignore[method-assign]


# `==`/`!=` of size expressions (`x.size(1) * 2 == 32`) likewise, on the classes a size computation
# makes; Basic.__eq__ itself (every sympy object) is left alone.
for _expression_class in (sympy.Add, sympy.Mul, sympy.Pow, sympy.Mod, sympy.floor, sympy.ceiling, sympy.Min, sympy.Max):
    _expression_class.__eq__ = _decided_in_user_code(_expression_class.__eq__, "==")  # type: ignore[method-assign]
    _expression_class.__ne__ = _decided_in_user_code(_expression_class.__ne__, "==", negated=True)  # type: ignore[method-assign]
    _expression_class.__index__ = _size_index  # type: ignore[attr-defined]
    _expression_class.__bool__ = _size_truth  # type: ignore[attr-defined]


class AxisSize(_TorchLike):
    """`value.size(d)` of a tiled dimension: usable as a size in hl.zeros and views."""

    def __init__(self, axis: Axis) -> None:
        self.axis = axis

    def __repr__(self) -> str:
        return f"size({self.axis.name})"

    def number(self, operation: str) -> Any:
        """The size as Python code may compare or compute with it: a whole dimension's size (an int,
        or a host size's symbol, which an `if` decides per call); a tile dimension's varies per tile
        (the last is shorter), so no Python operation can be decided with it while tracing."""
        if self.axis.is_tile:
            raise exc.UnsupportedOperationError(
                f"`{operation}` on the size of a tile dimension of a tile value: the tile's length varies per "
                "tile (the last tile is shorter), so it has no one value while the kernel is traced",
                location=user_location(),
                hint="use the tile's block size (tile.block_size), or mask with tile.index < n")
        return self.axis.range_end - self.axis.range_begin

    # comparisons and arithmetic act on the size itself; `==`/`!=` in a tile loop's own code arrive
    # through the rewrite's compare helper, which calls number() too (a tile dim's length: an error)
    def __eq__(self, other: Any) -> Any:
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            # code the rewrite does not see (a helper, a lambda): a whole dim compares as its size;
            # a tile dim equals no number (Tessera's own shape code asks `size == 1` of it)
            if self.axis.is_tile:
                return False
            size = self.number("==")
            decided = _decided_while_tracing(size, other) if isinstance(size, sympy.Expr) else None
            return bool(size == other) if decided is None else decided
        return self is other

    def __ne__(self, other: Any) -> Any:
        equal = self.__eq__(other)
        return sympy.Not(equal) if isinstance(equal, sympy.Basic) else not equal

    __hash__ = object.__hash__

    def __lt__(self, other: Any) -> Any:
        return self._ordered(other, "<")

    def __le__(self, other: Any) -> Any:
        return self._ordered(other, "<=")

    def __gt__(self, other: Any) -> Any:
        return self._ordered(other, ">")

    def __ge__(self, other: Any) -> Any:
        return self._ordered(other, ">=")

    def _ordered(self, other: Any, spelling: str) -> Any:
        size, theirs = self.number(spelling), _size_number(other, spelling)
        # `v.size(1) > 16` of a whole dim in user code: decided for this call and guarded, as
        # HostScalar's orderings are (the comparison was written two frames above this one)
        decided = _user_relation(size, theirs, spelling, depth=3) if isinstance(size, sympy.Expr) else None
        return RELATIONS[spelling][0](size, theirs) if decided is None else decided

    def __add__(self, other: Any) -> Any:
        return self.number("+") + _size_number(other, "+")

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        return self.number("-") - _size_number(other, "-")

    def __rsub__(self, other: Any) -> Any:
        return _size_number(other, "-") - self.number("-")

    def __mul__(self, other: Any) -> Any:
        return self.number("*") * _size_number(other, "*")

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Any:
        return self.number("//") // _size_number(other, "//")

    def __rfloordiv__(self, other: Any) -> Any:
        return _size_number(other, "//") // self.number("//")

    def __mod__(self, other: Any) -> Any:
        return self.number("%") % _size_number(other, "%")

    def __rmod__(self, other: Any) -> Any:
        return _size_number(other, "%") % self.number("%")


def _size_number(value: Any, operation: str) -> Any:
    return value.number(operation) if isinstance(value, AxisSize) else value


class TileProxy(TileOffsets, _TorchLike):
    """A tile of a loop while tracing: indexes tensors along its axis."""

    def __init__(self, axis: Axis, tile_id: sympy.Expr, count: sympy.Expr) -> None:
        self.axis = axis
        self.id = tile_id
        self.count = count

    @property
    def begin(self) -> sympy.Expr:
        return self.axis.begin

    @property
    def end(self) -> sympy.Expr:
        return sympy.Min(self.axis.begin + self.axis.block, self.axis.end)

    @property
    def block_size(self) -> int:
        return self.axis.block

    @property
    def index(self) -> TileValue:
        return interpreter.current("index").tile_index(self.axis)

    def __repr__(self) -> str:
        return f"TileProxy({self.axis.name})"


class TensorProxy(_TorchLike):
    """A tensor argument of the kernel: pointer, dtype, and symbolic sizes and strides."""

    def __init__(self, name: str, dtype: torch.dtype, sizes: list[Any], strides: list[Any],
                 device: torch.device, offset: Any = 0, limits: tuple[Any, ...] = (),
                 conditions: tuple[tuple[Any, Any], ...] = (), aligned16: bool = False) -> None:
        self.name = name
        self.dtype = dtype
        self.sizes = sizes
        self.strides = strides
        self.device = device
        # A view (`flat[off : off + m * k].reshape(m, k)`) shares the argument's pointer: it adds
        # `offset` elements, and every access also checks `element offset < limit` for each of
        # `limits` and `0 <= index < size` for each scalar (index, size) of `conditions`, so no
        # access leaves the viewed part of the argument.
        self.offset = sympy.sympify(offset)
        self.limits = limits
        self.conditions = conditions
        self.aligned16 = aligned16  # the pointer is 16-byte aligned (TMA needs it; in the cache key)

    @property
    def is_view(self) -> bool:
        """Whether this is a view with an offset or access checks (not a plain argument)."""
        return self.offset != 0 or bool(self.limits) or bool(self.conditions)

    def ref(self) -> TensorRef:
        """The IR's frozen description of this tensor (or view)."""
        return TensorRef(self.name, self.dtype, tuple(self.sizes), tuple(self.strides), self.offset,
                         tuple(self.limits), tuple(self.conditions), self.aligned16)

    # allocations shaped by the caller, with this tensor's dtype: registers, like hl.zeros
    def new_zeros(self, *size: Any, **kwargs: Any) -> Any:
        return _dispatch(torch.Tensor.new_zeros, (self, *size), kwargs)

    def new_ones(self, *size: Any, **kwargs: Any) -> Any:
        return _dispatch(torch.Tensor.new_ones, (self, *size), kwargs)

    def new_empty(self, *size: Any, **kwargs: Any) -> Any:
        return _dispatch(torch.Tensor.new_empty, (self, *size), kwargs)

    def new_full(self, *size_and_fill: Any, **kwargs: Any) -> Any:
        return _dispatch(torch.Tensor.new_full, (self, *size_and_fill), kwargs)

    def reshape(self, *shape: Any) -> Any:
        """A view with new sizes (the tensor must be contiguous, as for torch's view)."""
        return _dispatch(torch.Tensor.reshape, (self, *shape), None)

    def view(self, *shape: Any) -> Any:
        return _dispatch(torch.Tensor.view, (self, *shape), None)

    def __getitem__(self, index: Any) -> Any:
        return _dispatch(torch.Tensor.__getitem__, (self, index), None)

    def __setitem__(self, index: Any, value: Any) -> None:
        _dispatch(torch.Tensor.__setitem__, (self, index, value), None)

    @property
    def shape(self) -> tuple[Any, ...]:
        return tuple(self.sizes)

    def size(self, dim: int | None = None) -> Any:
        return tuple(self.sizes) if dim is None else self.sizes[dim]

    def stride(self, dim: int | None = None) -> Any:
        return tuple(self.strides) if dim is None else self.strides[dim]

    def dim(self) -> int:
        return len(self.sizes)

    ndim = property(dim)

    def numel(self) -> Any:
        total: Any = sympy.Integer(1)
        for size in self.sizes:
            total = total * size
        return total

    def __getattr__(self, name: str) -> Any:
        """A torch.Tensor method this proxy lacks, of a 0-d tensor argument (`scale.float()`): the
        method of its value, read when called, once, as eager mode reads the tensor."""
        sizes = self.__dict__.get("sizes")
        if name.startswith("_") or sizes is None or sizes or not callable(getattr(torch.Tensor, name, None)):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            return getattr(self[()], name)(*args, **kwargs)
        return method

    def __repr__(self) -> str:
        return f"TensorProxy({self.name}: {self.dtype}, {self.sizes})"


def _zero_dim_argument_operator(name: str) -> Callable[..., Any]:
    """`scale * 2`, `s > 0`, `-s` of a 0-d tensor argument: the operator of its value, read once
    as eager mode reads the tensor; of a bigger tensor argument, Python's TypeError (which the
    tile loop reports, located)."""
    def operator(self: TensorProxy, *other: Any) -> Any:
        if self.sizes:
            if other:
                return NotImplemented
            raise TypeError(f"bad operand type for {name}: a whole tensor argument")
        return getattr(self[()], name)(*other)
    return operator


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**", "and": "&",
            "or": "|", "xor": "^", "matmul": "@", "lshift": "<<", "rshift": ">>"}


def _argument_in_place_operator(name: str) -> Callable[..., Any]:
    """`s += 1` of a tensor argument would rebind the name to a new value, where eager mode writes
    the tensor: a located error, never a silent difference."""
    def operator(self: TensorProxy, other: Any) -> Any:
        raise exc.UnsupportedOperationError(
            f"`{self.name} {_SYMBOLS.get(name, name)}= ...` updates the tensor argument {self.name} in place inside a tile loop",
            location=user_location(), hint=f"store into it instead: {self.name}[...] = ...")
    return operator


for _name in BINARY_OPERATORS:
    setattr(TensorProxy, f"__{_name}__", _zero_dim_argument_operator(f"__{_name}__"))
    setattr(TensorProxy, f"__r{_name}__", _zero_dim_argument_operator(f"__r{_name}__"))
    setattr(TensorProxy, f"__i{_name}__", _argument_in_place_operator(_name))
for _name in COMPARISONS.keys() - {"eq", "ne"}:  # (== keeps its identity meaning: proxies are dict keys)
    setattr(TensorProxy, f"__{_name}__", _zero_dim_argument_operator(f"__{_name}__"))
for _name in UNARY_OPERATORS:
    setattr(TensorProxy, f"__{_name}__", _zero_dim_argument_operator(f"__{_name}__"))
