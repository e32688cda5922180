"""Exact-facts memos: the hit path's shortcut past cache keys and guards.

A cache key (call_keys.py) abstracts the arguments (unit strides, size buckets, int64 need) so
that one variant serves many shapes, and a variant's guards then check what the key left out.
Building the key and checking the guards costs microseconds a call. Programs call a kernel with
the same shapes again and again, so in front of each keyed lookup sits a memo keyed by the
*exact* facts the keyed path reads:

- a tensor: dtype, shape, strides, 16-byte alignment of its data pointer, `mark_static` dims,
  its negative bit;
- an int, float, bool, None, str, dtype or `hl.specialize`d int: its type and value (a
  negative zero with its own marker: `0.0 == -0.0`, but a remembered launch bakes the value in);
- plain data (a tuple or list of numbers...): its typed key (constant_keys.py), so `(2,)` and
  `(2.0,)` differ;
- a builtin, class, module or enum member (a helper the loop calls): itself;
- a Python function, closures included (an epilogue made on every call, `lambda acc, tile: acc +
  bias[tile]`): its code, defaults and cell names, then the exact facts of each captured value,
  as above (a closure's tensors are launch arguments: `opened_closures` lists them where the
  keyed path passes them).

Every decision the keyed path makes for a launch (the key, which variant's guards hold, the
grid, the int arguments) and for a call (its Config) is a function of these facts, so a memo hit
repeats the keyed path's decision without redoing it. Anything else (a list of tensors, an
unhashable object, a NaN, a tensor-valued loop bound) has no exact facts, and the call takes the
keyed path. No fact is a user's tensor or an object that may hold one: memos outlive calls.

>>> exact_facts([torch.empty(4, 8), 3])                             # doctest: +SKIP
[None, torch.float32, torch.Size([4, 8]), (8, 1), 0, None, False, <class 'int'>, 3]
"""
from __future__ import annotations

import enum
import math
import types
from typing import Any, Callable, Sequence

from tessera.compiler import captured_cells
from tessera.language.control import UNDEFINED
from tessera.runtime.call_keys import FLOAT, INT, KINDS_BY_TYPE, OTHER, SPECIALIZED, TENSOR, kind_of
from tessera.runtime.constant_keys import constant_key, defaults_key
from tessera.marking import STATIC_DIMS_ATTRIBUTE

# Values that are code, not data: a memo may hold them (they hold no user tensors, in practice).
# `UNDEFINED` is the rewrite's marker of a name not bound yet, which every loop body captures: a
# singleton (without it no kernel with a carried name ever took the memo: 84 us a GEMM call on the H100).
CODE_TYPES = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType, enum.Enum, type(UNDEFINED))


class _NegativeZero:
    """Stands where `float` would in the facts of a -0.0 (equal to 0.0, yet another value)."""


class _PlainData:
    """Stands before the typed key of a tuple, list or other plain-data value."""


class _Closure:
    """Stands before a closure's code, defaults, cell names and the facts of its cells."""


def exact_facts(values: Sequence[Any], head: Any = None) -> list[Any] | None:
    """The exact facts of `values` as a flat list starting with `head`; None if one has none.

    Flat, so that hashing the key is one pass: a tensor contributes five entries starting with
    a dtype, any other value two starting with its type, so two different value lists never
    give the same facts.
    """
    facts: list[Any] = [head]
    append = facts.append
    for value in values:
        kind = KINDS_BY_TYPE.get(type(value))  # kind_of, inlined: this runs for every value of every call
        if kind is None:
            kind = kind_of(value)
        if kind == TENSOR:
            # is_neg: a negative-bit view has a normal view's layout, but compiled code refuses it
            facts += (value.dtype, value.shape, value.stride(), value.data_ptr() & 15,
                      getattr(value, STATIC_DIMS_ATTRIBUTE, None), value.is_neg())
            continue
        if kind == FLOAT:
            if value != value:  # NaN: never equal to itself
                return None
            if value == 0.0 and math.copysign(1.0, value) < 0.0:
                append(_NegativeZero)
                append(value)
                continue
        elif kind == OTHER:
            key = constant_key(value)
            if key is not None:
                append(_PlainData)
                append(key)
                continue
            cells = captured_cells(value)
            if cells is not None or type(value) is types.FunctionType:  # a plain function: no cells
                if not _closure_facts(value, cells or [], facts):
                    return None
                continue
            if not isinstance(value, CODE_TYPES) or getattr(value, "__closure__", None):
                return None  # an object (it may hold tensors): keyed path
        append(type(value))
        append(value)
    return facts


def _closure_facts(function: Any, cells: list[tuple[str, Any]], facts: list[Any]) -> bool:
    """Append a closure's facts (see the module docstring); False if a captured value has none.
    The cell names are part of them: a cell filled on one call and empty on another changes
    which values the keyed path captures."""
    defaults = defaults_key(function)
    inner = exact_facts([value for _, value in cells])
    if defaults is None or inner is None:
        return False
    facts += (_Closure, function.__code__, defaults, tuple(name for name, _ in cells))
    facts += inner[1:]
    return True


def opened_closures(values: Sequence[Any]) -> list[Any]:
    """`values` with every closure replaced by its captured values, depth first: the order in
    which the keyed path (`call_keys.launch_inputs`) passes the tensors that closures capture."""
    opened: list[Any] = []
    for value in values:
        cells = captured_cells(value)
        if cells is None:
            opened.append(value)
        else:
            opened += opened_closures([cell for _, cell in cells])
    return opened


def launch_facts(code: Any, values: Sequence[Any], tile_range: Any) -> tuple | None:
    """The exact facts of one launch: its loop body, captured values and iteration space."""
    facts = exact_facts(values, code)
    if facts is None:
        return None
    begins, ends = tile_range.begins, tile_range.ends
    facts += (tile_range.site, tile_range.is_grid, tile_range.multi_dim, len(ends))
    facts += tile_range.block_sizes
    for bounds in (begins, ends):
        for bound in bounds:
            if type(bound) is not int:
                return _with_typed_bounds(facts, begins, ends)
    facts += begins
    facts += ends
    return tuple(facts)


def _with_typed_bounds(facts: list[Any], begins: Sequence[Any], ends: Sequence[Any]) -> tuple | None:
    """Finish `launch_facts` when some bound is not a plain int: every bound with its type."""
    for bound in (*begins, *ends):
        kind = kind_of(bound)
        if kind != INT and kind != SPECIALIZED:
            return None  # a tensor (read back on every call) or a symbolic bound
        facts += (type(bound), bound)
    return tuple(facts)


class Memo(dict):
    """A dict that empties itself when full, and stands aside while it does not pay.

    Exact shapes may change on every call (a sequence length per batch): then every lookup
    misses, and reading the facts and remembering each decision is pure overhead. After
    `MISSES_BEFORE_BYPASS` misses in a row the memo is bypassed for the next `BYPASS_CALLS`
    calls (`wanted()` is False: the caller takes the keyed path without reading facts), then
    tried again.

    In front of it, per site (a loop body's code, a call's mode), sit up to `RECENT` fast checks
    (fast_checks.py) of decisions that repeated, most recently used first: `quick` answers from
    them without building facts. A check is built once per facts key (`check_wanted`).
    """

    MISSES_BEFORE_BYPASS = 16
    BYPASS_CALLS = 256
    RECENT = 4

    def __init__(self, capacity: int = 1024) -> None:
        super().__init__()
        self.capacity = capacity
        self.misses_in_a_row = 0
        self.bypass_left = 0
        # per site: (fast check, remembered value, facts key), most recently used first
        self.recent: dict[Any, list[tuple[Callable[[Sequence[Any], Any], Any], Any, Any]]] = {}
        self.checked: set[Any] = set()  # facts keys whose check sits in `recent`

    def quick(self, site: Any, values: Sequence[Any], tile_range: Any) -> tuple[Any, Any] | None:
        """(the value remembered for these values' facts, the check's answer: True or data
        pointers) if a fast check of `site` says they are the facts of one; else None (the
        caller builds the facts)."""
        entries = self.recent.get(site)
        if entries:
            for position, (check, value, _) in enumerate(entries):
                answer = check(values, tile_range)
                if answer is not False:
                    if position:  # most recently used first (another thread may have changed the list)
                        try:
                            entries.insert(0, entries.pop(position))
                        except IndexError:
                            pass
                    return value, answer
        return None

    def check_wanted(self, key: Any) -> bool:
        """Whether a fast check for facts `key` (just looked up and found) should be built now: not
        while one for it sits in `recent` (a key whose check was dropped gets one again)."""
        if key in self.checked or len(self.checked) >= self.capacity:
            return False
        self.checked.add(key)
        return True

    def add_check(self, site: Any, check: Callable[[Sequence[Any], Any], Any], value: Any, key: Any) -> None:
        entries = self.recent.setdefault(site, [])
        entries.insert(0, (check, value, key))
        for _, _, dropped in entries[self.RECENT:]:
            self.checked.discard(dropped)
        del entries[self.RECENT:]

    def forget_site(self, site: Any) -> None:
        """Drop the fast checks of `site` (their keys may get checks again)."""
        for _, _, key in self.recent.pop(site, ()):
            self.checked.discard(key)

    def wanted(self) -> bool:
        """Whether this call should read its facts and look them up."""
        if self.bypass_left:
            self.bypass_left -= 1
            return False
        return True

    def lookup(self, key: Any) -> Any:
        """The remembered value, or None (a miss, counted towards a bypass)."""
        value = self.get(key)
        if value is not None:
            self.misses_in_a_row = 0
            return value
        self.misses_in_a_row += 1
        if self.misses_in_a_row >= self.MISSES_BEFORE_BYPASS:
            self.misses_in_a_row = 0
            self.bypass_left = self.BYPASS_CALLS
            self.recent.clear()  # their checks fail too: each would cost a call a check
            self.checked.clear()  # (a repeat after the bypass builds its check again)
        return None

    def remember(self, key: Any, value: Any) -> None:
        if len(self) >= self.capacity:
            self.clear()
        self[key] = value
        self.checked.discard(key)  # a check built for the decision this replaces may be built anew

    def clear(self) -> None:
        super().clear()
        self.recent.clear()
        self.checked.clear()
