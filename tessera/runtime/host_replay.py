"""Host replay: a repeated call allocates, launches and returns as recorded, without running the host code.

A cache hit of `examples/add.py` spent more time in its host code (`torch.broadcast_tensors`,
`torch.promote_types`, `torch.empty`, `hl.tile`) and in the steps around it (a runner, the
launch's own fact check) than in the launch (issue 17, item 7). When the kernel's host code has
only the forms of frontend/replayable_host.py, everything it does is a function of the
arguments' exact facts, which a repeated call's decision (repeated_calls.py) has just checked.
So the third call with the same facts is run as usual while recording, for each launch, the
remembered decision it took (variants.RememberedLaunch) and where each of its tensors came from:

- an argument, or a view of one (same storage: its offset, sizes and strides relative to it);
- a fresh allocation the source names (`out = torch.empty(...)`): its sizes, strides, dtype,
  device and contents ('empty' or 'zeros').

Later calls with those facts run a function generated from the record: allocate, pass the
tensors' data pointers to each launch's direct launch (backends/triton/launcher.py), bump the
written tensors' versions, return. Anything else the call returned must be a constant.

The record is refused (the call keeps its usual path) where the facts would not settle the
host code: two argument tensors sharing storage (views of either would be told apart by
storage), a one-element tensor argument (its value could be read as a size or a condition), a
tensor reaching a launch or the result that is neither an argument's view nor a named allocation
(a copy: its contents would be lost), a launch that took the keyed path or writes into an
argument. A replay declines before allocating anything, and the call takes its usual path, when
a global the source reads was rebound, the kernel's defaults changed, a torch function or
dispatch mode is active, or a module global a launch's body read changed; a direct launch that
declines (hooks, another device) launches through the remembered decision instead.

>>> add(x, y); add(x, y); add(x, y)       # the third call records        # doctest: +SKIP
>>> add(x, y)                             # replayed: one allocation, one direct launch
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from tessera import settings
from tessera.frontend.replayable_host import ReplayableHost
from tessera.ir import interpreter
from tessera.runtime.compiled import give_back_runner, run_compiled, take_runner
from tessera.runtime.written_tensors import increment_version

if TYPE_CHECKING:
    from tessera.runtime.repeated_calls import CallDecision
    from tessera.runtime.variants import RememberedLaunch


class Declined:
    """What a replay returns when it did nothing: the caller runs the call its usual way."""


DECLINED = Declined()
_CONSTANT_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.Size)
_DEFAULT_TYPES = (int, float, bool, str, type(None), torch.dtype)


# the depths of torch's function and dispatch mode stacks (a replay declines under a mode, which
# would see the host code's torch calls); a torch without these never replays
_MODE_STACKS = (getattr(torch._C, "_len_torch_function_stack", None), getattr(torch._C, "_len_torch_dispatch_stack", None))


def record_call(kernel: Any, decision: CallDecision, args: tuple, form: ReplayableHost) -> Any:
    """Run a repeated call as usual while recording its launches, then give `decision` its
    replay (or False: this call's facts cannot be replayed)."""
    if not settings.get_under(decision.stamp, "host_replay") or None in _MODE_STACKS:
        decision.replay = False
        return run_compiled(kernel, decision.mode, args, {}, decision.config, decision.device, None, decision.stamp)
    launches: list[Any] = []
    result = run_compiled(kernel, decision.mode, args, {}, decision.config, decision.device, None, decision.stamp,
                          recording=launches)
    try:
        replay = _Recorder(kernel, form, args).replay(launches, result, decision)
    except Exception:  # noqa: BLE001  (the call succeeded: a record that fails only costs its speed)
        if settings.get("debug") == "raw":
            raise
        replay = None
    decision.replay = replay if replay is not None else False
    return result


class _Recorder:
    """Finds where each tensor of a recorded call came from, and writes the replay's source."""

    def __init__(self, kernel: Any, form: ReplayableHost, args: tuple) -> None:
        self.kernel = kernel
        self.form = form
        self.args = args
        self.storages: dict[int, int] = {}  # an argument tensor's storage address -> its position
        self.fresh: dict[int, int] = {}  # id of an allocation -> its number
        self.fresh_tensors: list[torch.Tensor] = []
        self.allocation_kinds: list[str] = []
        self.lines: list[str] = []
        self.constants: list[Any] = []
        self.result_type: type = tuple

    def constant(self, value: Any) -> str:
        self.constants.append(value)
        return f"k{len(self.constants) - 1}"

    def replay(self, launches: list[Any], result: Any, decision: CallDecision) -> Callable[[tuple], Any] | None:
        if not launches or not self._arguments_replayable():
            return None
        plan = []
        for launch in launches:
            if launch is None:  # the keyed path: a decision not remembered
                return None
            remembered, values, names = launch
            slots = self._launch_slots(remembered, values, names)
            if slots is None:
                return None
            plan.append((remembered, slots))
        returned = self._result_slots(result)
        if returned is None:
            return None
        return self._generate(plan, returned, decision)

    def _arguments_replayable(self) -> bool:
        fn = self.kernel.fn  # the host code runs with its defaults (compiled._run_host_code)
        parameters = fn.__code__.co_argcount
        defaults = fn.__defaults__ or ()
        used_defaults = defaults[len(defaults) - (parameters - len(self.args)):] if parameters > len(self.args) else ()
        if not all(type(d) in _DEFAULT_TYPES or type(d) is types.FunctionType and not d.__closure__
                   for d in used_defaults):
            return False
        for position, value in enumerate(self.args):
            if type(value) is not torch.Tensor:
                if type(value) not in _DEFAULT_TYPES:
                    return False
                continue
            storage = value.untyped_storage().data_ptr()
            # a one-element tensor's value may be read as an int or bool by the host code
            if (value.numel() <= 1 or storage == 0 or storage in self.storages or value.layout is not torch.strided
                    or value.is_neg() or value.is_conj()):
                return False
            self.storages[storage] = position
        return True

    def _slot(self, tensor: torch.Tensor, name: str | None) -> tuple | None:
        """('arg', position), ('view', position, offset, sizes, strides) or ('new', number)."""
        if type(tensor) is not torch.Tensor:
            return None
        for position, argument in enumerate(self.args):
            if tensor is argument:
                return ("arg", position)
        known = self.fresh.get(id(tensor))
        if known is not None:
            return ("new", known)
        position = self.storages.get(tensor.untyped_storage().data_ptr())
        if position is not None:
            argument = self.args[position]
            if tensor.dtype != argument.dtype:
                return None
            offset = tensor.storage_offset() - argument.storage_offset()
            if offset == 0 and tensor.shape == argument.shape and tensor.stride() == argument.stride():
                return ("arg", position)  # the same layout (torch.broadcast_tensors of equal shapes)
            return ("view", position, offset, tuple(tensor.shape), tuple(tensor.stride()))
        kind = self.form.allocations.get(name) if name is not None else None
        if (kind is None or tensor.storage_offset() != 0 or tensor.requires_grad or tensor.layout is not torch.strided
                or tensor.data_ptr() == 0 or any(tensor.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
                                                 for t in self.fresh_tensors)):
            return None  # not a named allocation (a copy, a view of one), or an empty one
        self.fresh[id(tensor)] = len(self.fresh_tensors)
        self.fresh_tensors.append(tensor)
        self.allocation_kinds.append(kind)
        return ("new", len(self.fresh_tensors) - 1)

    def _launch_slots(self, remembered: RememberedLaunch, values: list[Any],
                      names: tuple[str, ...]) -> dict[int, tuple] | None:
        """Each tensor value's slot, by its index in the launch's values; None if one has none."""
        positions = remembered.positions
        if remembered.opens_closures or positions is None or remembered.byte_slots:
            return None
        slots: dict[int, tuple] = {}
        for index, value in enumerate(values):
            if isinstance(value, torch.Tensor):
                slot = self._slot(value, names[index] if index < len(names) else None)
                if slot is None:
                    return None
                slots[index] = slot
        if any(slots[index][0] != "new" for index in positions.written):
            return None  # an in-place write into an argument: its overlap checks run on every call
        return slots

    def _result_slots(self, result: Any) -> list[tuple] | None:
        """The result's parts: ('tensor', slot) or ('constant', value); None if one is neither."""
        form = self.form
        if form.single:
            parts, names = [result], form.returned
        elif type(result) in (tuple, list) and len(result) == len(form.returned):
            parts, names = list(result), form.returned
            self.result_type = type(result)
        else:
            return None
        found = []
        for part, name in zip(parts, names):
            if isinstance(part, torch.Tensor):
                slot = self._slot(part, name)
                if slot is None or slot[0] == "view":
                    return None  # a view returned: rebuilding it would not be the same autograd view
                found.append(("tensor", slot))
            elif type(part) in _CONSTANT_TYPES or type(part) is tuple and all(type(p) in _CONSTANT_TYPES for p in part):
                found.append(("constant", part))
            else:
                return None
        return found

    def _generate(self, plan: list[tuple[RememberedLaunch, dict[int, tuple]]], returned: list[tuple],
                  decision: CallDecision) -> Callable[[tuple], Any]:
        lines = self.lines
        count = len(self.args)
        lines.append(f"{''.join(f'a{i}, ' for i in range(count))}= args" if count else "pass")
        fn = self.kernel.fn
        for name, value in self.form.global_names:  # a rebound global: the host code would differ
            if name in fn.__globals__:
                lines.append(f"if g.get({name!r}) is not {self.constant(value)}: return DECLINED")
            else:
                lines.append(f"if {name!r} in g: return DECLINED")
        if fn.__code__.co_argcount > count:  # the defaults the host code ran with (compiled._run_host_code)
            lines.append(f"if fn.__defaults__ is not {self.constant(fn.__defaults__)}: return DECLINED")
        lines.append("if function_modes() or dispatch_modes(): return DECLINED")
        for remembered, _ in plan:
            reads = remembered.variant.global_reads
            if reads is not None:
                lines.append(f"if not {self.constant(reads)}.hold(): return DECLINED")
        for number, tensor in enumerate(self.fresh_tensors):
            lines.append(f"n{number} = empty_strided({self.constant(tuple(tensor.shape))}, "
                         f"{self.constant(tuple(tensor.stride()))}, dtype={self.constant(tensor.dtype)}, "
                         f"device={self.constant(tensor.device)})")
            if self.allocation_kinds[number] == "zeros":
                lines.append(f"n{number}.zero_()")
            lines.append(f"p{number} = n{number}.data_ptr()")
            # the launches' facts hold each tensor's 16-byte alignment
            lines.append(f"if p{number} & 15 != {tensor.data_ptr() & 15}: return DECLINED")
        pointer_of_argument: set[int] = set()
        written: list[str] = []
        for number, (remembered, slots) in enumerate(plan):
            for slot in slots.values():
                if slot[0] != "new" and slot[1] not in pointer_of_argument:
                    pointer_of_argument.add(slot[1])
                    lines.append(f"q{slot[1]} = a{slot[1]}.data_ptr()")
            pointers = [self._pointer(slots[index]) for index in sorted(slots)]
            launch = self.constant(remembered)
            values = ["None"] * remembered.value_count
            for index, slot in slots.items():
                values[index] = self._value(slot)
            lines.append(f"d = {launch}.pointer_direct")
            direct = f"d({_tuple(pointers)})" if not remembered.scratch else f"{launch}._directly(d, {_tuple(pointers)})"
            lines.append(f"if d is None or not {direct}:")
            lines.append(f"    slowly(kernel, decision, {launch}, [{', '.join(values)}])")
            written += [f"n{slots[index][1]}" for index in remembered.positions.written  # type: ignore[union-attr]
                        if f"n{slots[index][1]}" not in written]
        if written:  # as note_writes does (an allocation never requires grad)
            lines.append(f"increment_version([{', '.join(written)}])")
        lines.append(f"kernel.store.hits += {len(plan)}")
        lines.append(f"return {self._result(returned)}")
        parameters = ", ".join(["kernel", "decision", "fn", "g", "name",
                                *(f"k{i}" for i in range(len(self.constants)))])
        body = "\n".join("        " + line for line in lines)
        source = f"def make_replay({parameters}):\n    def replay(args):\n{body}\n    return replay\n"
        replay = _factory(source)(self.kernel, decision, fn, fn.__globals__, fn.__name__, *self.constants)
        replay.source = source  # type: ignore[attr-defined]  (what tests and TESSERA_LOG readers see)
        return replay

    def _pointer(self, slot: tuple) -> str:
        if slot[0] == "new":
            return f"p{slot[1]}"
        if slot[0] == "arg":
            return f"q{slot[1]}"
        offset = slot[2] * self.args[slot[1]].element_size()
        return f"q{slot[1]} + {offset}" if offset else f"q{slot[1]}"

    def _value(self, slot: tuple) -> str:
        if slot[0] == "new":
            return f"n{slot[1]}"
        if slot[0] == "arg":
            return f"a{slot[1]}"
        _, position, offset, sizes, strides = slot
        return (f"a{position}.as_strided({self.constant(sizes)}, {self.constant(strides)}, "
                f"a{position}.storage_offset() + {offset})")

    def _result(self, returned: list[tuple]) -> str:
        parts = [self._value(slot) if kind == "tensor" else self.constant(slot) for kind, slot in returned]
        if self.form.single:
            return parts[0]
        return f"[{', '.join(parts)}]" if self.result_type is list else _tuple(parts)


def _tuple(items: list[str]) -> str:
    return f"({''.join(item + ', ' for item in items)})"


_FACTORIES: dict[str, Callable[..., Callable[[tuple], Any]]] = {}


def _factory(source: str) -> Callable[..., Callable[[tuple], Any]]:
    """The compiled factory of one replay layout (constants are its parameters): compiled once."""
    factory = _FACTORIES.get(source)
    if factory is None:
        namespace: dict[str, Any] = {"DECLINED": DECLINED, "empty_strided": torch.empty_strided,
                                     "function_modes": _MODE_STACKS[0], "dispatch_modes": _MODE_STACKS[1],
                                     "increment_version": increment_version, "slowly": launch_slowly}
        exec(compile(source, "<tessera host replay>", "exec"), namespace)
        factory = _FACTORIES[source] = namespace["make_replay"]
    return factory


def launch_slowly(kernel: Any, decision: CallDecision, remembered: RememberedLaunch, values: list[Any]) -> None:
    """A replayed launch whose direct launch declined or does not exist (interpret mode): through
    the remembered decision, with a runner as the call's own would have."""
    runner = take_runner(kernel, decision.mode, decision.config, decision.device, decision.stamp)
    interpreter.push(runner.host)
    try:
        remembered.run(runner, values)
    finally:
        interpreter.pop()
        give_back_runner(kernel, runner)
