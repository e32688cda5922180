"""Fast checks: "are these values' exact facts the remembered ones?" without building the facts.

An exact-facts memo (exact_facts.py) builds a tuple of every fact of a launch's values and hashes
it: about 0.7 us per tensor (six attribute reads into Python objects), paid on every call. A
program that calls a kernel with the same shapes again and again asks the same question each
time, so for a decision that repeated, `facts_check` generates a function that answers it by
comparing against constants instead:

- a tensor: its exact type, then dtype, sizes, strides, device and negative bit in one C++ call
  for all the tensors (`torch._C._dynamo.guards.TensorGuards`, the check torch.compile runs before
  each graph; it also compares dispatch keys and requires_grad, which only makes it stricter),
  then its data pointer's 16-byte alignment and its `mark_static` dims in Python. Where that
  class is missing or fails a self-test, the same facts are read one by one in Python;
- an int, float, bool, None, str or dtype: its exact type and value (and a zero's sign);
- plain data: its typed key (`constant_key`); a helper (builtin, class, module, enum member):
  itself; a Python function or closure: its code object, its defaults' key, then each filled
  cell's value, checked the same way;
- the iteration space: its site, kind, block sizes and int bounds.

A check returns True only when `exact_facts` of the values (and `launch_facts`, with the range)
would equal the facts it was built from, so a True answer may repeat the decision remembered for
those facts. False means "not known": the caller then builds the facts. Where a value has no
cheap comparison (a typed bound, an empty closure cell), no check is built (None).

>>> check = facts_check([x, 3])          # doctest: +SKIP
>>> check([x, 3], None), check([x.t(), 3], None)
(True, False)
"""
from __future__ import annotations

import math
import types
from typing import Any, Callable, Sequence

import torch

from tessera.runtime.call_keys import CONSTANT, FLOAT, INT, SPECIALIZED, TENSOR, kind_of
from tessera.runtime.constant_keys import constant_key, defaults_key
from tessera.runtime.exact_facts import CODE_TYPES
from tessera.marking import STATIC_DIMS_ATTRIBUTE

Check = Callable[[Sequence[Any], Any], Any]  # False, else True or the tensors' data pointers


def facts_check(values: Sequence[Any], tile_range: Any = None,
                disjoint: Sequence[tuple[int, tuple[int, int], int, tuple[int, int]]] = (),
                pointers_on: torch.device | None = None) -> Check | None:
    """`check(values, tile_range)`: True only when their exact facts equal these values' (and
    this range's) facts; None where no check can be built. Built once per remembered decision.

    `disjoint`: (a, extent of a, b, extent of b) per pair of tensors whose byte ranges must not
    meet, by index in the values with closures opened (`opened_closures`); each extent is the
    (lowest, past-highest) byte offset from the data pointer. The check then also says False
    when they meet, reusing the data pointers it reads for alignment.

    `pointers_on`: where every tensor lies on this device now and TensorGuards checks each
    one's device, a passing check returns the tensors' data pointers, in the order of the values
    with closures opened, instead of True: a launch may pass them to the kernel as they are (no
    second read, and no driver query of where the address lives: the tensors are on that device)."""
    builder = _Builder()
    names = [f"v{index}" for index in range(len(values))]
    builder.lines.append(f"if len(values) != {len(values)}: return False")
    if values:
        builder.lines.append(f"{', '.join(names)}, = values")
    for name, value in zip(names, values):
        if not builder.value(name, value):
            return None
    if tile_range is not None and not builder.tile_range(tile_range):
        return None
    for a, (a_low, a_high), b, (b_low, b_high) in disjoint:
        if not (a < len(builder.leaves) and b < len(builder.leaves)):
            return None
        pa, pb = f"p{builder.leaves[a]}", f"p{builder.leaves[b]}"
        if pa not in builder.pointers or pb not in builder.pointers:
            return None
        builder.require(f"{pa} + {a_low} >= {pb} + {b_high} or {pb} + {b_low} >= {pa} + {a_high}", builder.after)
    return builder.finish(pointers_on is not None and all(tensor.device == pointers_on for _, tensor in builder.tensors))


class _Builder:
    """Lines of the generated check and the constants they compare against."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.after: list[str] = []  # per-tensor checks, run once TensorGuards has checked the tensors
        self.constants: list[Any] = []
        self.tensors: list[tuple[str, torch.Tensor]] = []
        self.names = 0
        self.leaves: list[str] = []  # variables of the values with closures opened (opened_closures' order)
        self.pointers: list[str] = []  # variables holding a tensor's data pointer, in visiting order

    def constant(self, value: Any) -> str:
        self.constants.append(value)
        return f"k{len(self.constants) - 1}"

    def require(self, condition: str, lines: list[str] | None = None) -> None:
        (self.lines if lines is None else lines).append(f"if not ({condition}): return False")

    def value(self, name: str, value: Any) -> bool:
        """Lines checking the value held by variable `name`; False where none can be built."""
        if type(value) is not types.FunctionType or not value.__closure__:
            self.leaves.append(name)
        kind = kind_of(value)
        if kind == TENSOR:
            self._tensor(name, value)
            return True
        if kind == FLOAT and value != value:  # NaN: no facts
            return False
        if kind == FLOAT and value == 0.0:  # 0.0 == -0.0, yet a remembered launch bakes the value in
            self.require(f"type({name}) is {self.constant(type(value))} and {name} == 0.0 and "
                         f"copysign(1.0, {name}) == {math.copysign(1.0, value)}")
            return True
        if kind in (INT, FLOAT, CONSTANT, SPECIALIZED):
            if value is None:
                self.require(f"{name} is None")
            else:
                self.require(f"type({name}) is {self.constant(type(value))} and {name} == {self.constant(value)}")
            return True
        key = constant_key(value)
        if key is not None:
            self.require(f"constant_key({name}) == {self.constant(key)}")
            return True
        if type(value) is types.FunctionType:
            return self._function(name, value)
        if isinstance(value, CODE_TYPES) and not getattr(value, "__closure__", None):
            self.require(f"{name} is {self.constant(value)}")
            return True
        return False

    def _tensor(self, name: str, tensor: torch.Tensor) -> None:
        self.require(f"type({name}) is {self.constant(type(tensor))}")
        if _tensor_guards_work():
            self.tensors.append((name, tensor))  # dtype, sizes, strides, device, neg bit: one call at the end
        else:
            self.require(f"{name}.dtype is {self.constant(tensor.dtype)} and {name}.shape == "
                         f"{self.constant(tensor.shape)} and {name}.stride() == {self.constant(tensor.stride())} "
                         f"and {name}.is_neg() is {tensor.is_neg()}")
        self.after.append(f"p{name} = {name}.data_ptr()")
        self.pointers.append(f"p{name}")
        self.require(f"p{name} & 15 == {tensor.data_ptr() & 15}", self.after)
        marked = getattr(tensor, STATIC_DIMS_ATTRIBUTE, None)
        self.require(f"getattr({name}, {STATIC_DIMS_ATTRIBUTE!r}, None) == {self.constant(marked)}", self.after)

    def _function(self, name: str, function: types.FunctionType) -> bool:
        """A closure or plain function: exact_facts keys it by code, defaults and cells."""
        defaults = defaults_key(function)
        if defaults is None:
            return False
        self.require(f"type({name}) is FunctionType and {name}.__code__ is {self.constant(function.__code__)}")
        if function.__defaults__ is None and function.__kwdefaults__ is None:
            self.require(f"{name}.__defaults__ is None and {name}.__kwdefaults__ is None")
        else:
            self.require(f"defaults_key({name}) == {self.constant(defaults)}")
        for index, cell in enumerate(function.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell: which cells are filled is a fact; left to exact_facts
                return False
            self.names += 1
            inner = f"c{self.names}"
            self.lines.append(f"{inner} = {name}.__closure__[{index}].cell_contents")  # ValueError if emptied
            if not self.value(inner, contents):
                return False
        return True

    def tile_range(self, tile_range: Any) -> bool:
        begins, ends = list(tile_range.begins), list(tile_range.ends)
        if any(type(bound) is not int for bound in begins + ends):
            return False  # typed bounds (launch_facts' _with_typed_bounds): left to exact_facts
        self.require(f"r.site == {self.constant(tile_range.site)} and r.is_grid == {tile_range.is_grid!r} and "
                     f"r.multi_dim == {tile_range.multi_dim!r} and r.block_sizes == "
                     f"{self.constant(list(tile_range.block_sizes))}")
        for field, bounds in (("begins", begins), ("ends", ends)):
            names = [f"{field[0]}{index}" for index in range(len(bounds))]
            self.require(f"len(r.{field}) == {len(bounds)}")
            if names:
                self.lines.append(f"{', '.join(names)}, = r.{field}")
            for bound_name, bound in zip(names, bounds):
                self.require(f"type({bound_name}) is int and {bound_name} == {bound}")
        return True

    def finish(self, pointers: bool = False) -> Check | None:
        guards = None
        if self.tensors:
            guards = _tensor_guards([tensor for _, tensor in self.tensors])
            if guards is None:
                return None
            self.require(f"guards.check({', '.join(name for name, _ in self.tensors)})")
        self.lines += self.after
        if pointers and guards is not None:
            self.lines.append(f"return ({''.join(name + ', ' for name in self.pointers)})")
        else:
            self.lines.append("return True")
        parameters = ", ".join(["guards", *(f"k{index}" for index in range(len(self.constants)))])
        body = "\n".join("        " + line for line in self.lines)
        source = (f"def make_check({parameters}):\n"
                  "    def check(values, r):\n"
                  "      try:\n"
                  f"{body}\n"
                  "      except ValueError:\n"  # a closure cell emptied since (its facts changed)
                  "        return False\n"
                  "    return check\n")
        return _factory(source)(guards, *self.constants)


_FACTORIES: dict[str, Callable[..., Check]] = {}


def _factory(source: str) -> Callable[..., Check]:
    """The compiled factory of one check layout (constants are its parameters): compiled once."""
    factory = _FACTORIES.get(source)
    if factory is None:
        namespace: dict[str, Any] = {"FunctionType": types.FunctionType, "copysign": math.copysign, "constant_key": constant_key,
                                     "defaults_key": defaults_key}
        exec(compile(source, "<tessera fast check>", "exec"), namespace)
        factory = _FACTORIES[source] = namespace["make_check"]
    return factory


def _tensor_guards(tensors: list[torch.Tensor]) -> Any:
    """A TensorGuards of these tensors' exact sizes and strides, or None."""
    try:
        from torch._C._dynamo.guards import TensorGuards
        return TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                            dynamic_dims_strides=[list(t.stride()) for t in tensors])
    except Exception:  # noqa: BLE001  (a torch without it, or with another signature)
        return None


_GUARDS_WORK: list[bool] = []  # the self-test's answer, once it ran


def _tensor_guards_work() -> bool:
    """Whether torch's TensorGuards exists and tells apart what the facts tell apart (checked
    once: it is torch.compile's internal class, so another torch release may change it)."""
    if not _GUARDS_WORK:
        _GUARDS_WORK.append(_self_test())
    return _GUARDS_WORK[0]


def _self_test() -> bool:
    base = torch.zeros(2, 3)
    guards = _tensor_guards([base])
    if guards is None:
        return False
    different = [torch.zeros(3, 2), torch.zeros(2, 3).t().contiguous().t(), torch.zeros(2, 3, dtype=torch.float64),
                 torch._neg_view(torch.zeros(2, 3)), torch.zeros(2, 4)[:, :3], torch.zeros(2, 3, 1)]
    try:
        return guards.check(torch.ones(2, 3)) and not any(guards.check(tensor) for tensor in different)
    except Exception:  # noqa: BLE001
        return False
