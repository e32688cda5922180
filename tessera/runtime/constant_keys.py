"""Exact, typed keys for values a generated kernel compiles in as constants.

Python's equality is blind to what codegen sees: `2 == 2.0 == True`, `0.0 == -0.0`, and so
`(2,) == (2.0,)` and `[1] == [True]`. A cache keyed by such values reuses a variant compiled for
a float where an int was given (different promotion), or a memo repeats a launch whose baked-in
argument was `0.0` for a `-0.0`. `constant_key` spells out each value's type, and a float's sign
and NaN-ness, so two values get one key only when codegen would treat them alike:

>>> constant_key((2.0,)) == constant_key((2,))
False
>>> constant_key(-0.0) == constant_key(0.0)
False

Only plain data gets a key (None, bool, int, float, complex, str, bytes, torch dtypes and
devices, and lists, tuples, dicts, sets and frozensets of them). Anything else (a tensor, an
arbitrary object) gets None: callers key it by identity (`IdentityKey`) or not at all, so no key
ever holds a user's tensor.
"""
from __future__ import annotations

import math
import weakref
from typing import Any, Hashable

import torch

_SCALARS = (type(None), bool, int, str, bytes, torch.dtype, torch.device)
_MAX_DEPTH = 16  # deeper nesting is not plain configuration data; keyed by identity instead


def float_key(value: float) -> Hashable:
    """A float's key part: its value with the sign of zero and NaN made explicit."""
    if value != value:
        return ("nan",)
    if value == 0.0:
        return ("-0.0",) if math.copysign(1.0, value) < 0 else ("0.0",)
    return value


def constant_key(value: Any, depth: int = 0) -> Hashable | None:
    """A hashable key equal for two values exactly when both are the same plain data (types,
    signed zeros and NaNs included); None for a value that is not plain data."""
    cls = type(value)
    if cls in _SCALARS:
        return (cls, value)
    if cls is float:
        return (float, float_key(value))
    if cls is complex:
        return (complex, float_key(value.real), float_key(value.imag))
    if depth >= _MAX_DEPTH:
        return None
    if cls is tuple or cls is list:
        parts = _element_keys(value, depth)
        return None if parts is None else (cls, tuple(parts))
    if cls is dict:
        items = []
        for name, element in value.items():
            name_part, part = constant_key(name, depth + 1), constant_key(element, depth + 1)
            if name_part is None or part is None:
                return None
            items.append((name_part, part))
        return (dict, tuple(items))  # insertion order: iterating the dict in the body sees it
    if cls is set or cls is frozenset:
        parts = _element_keys(value, depth)
        return None if parts is None else (cls, frozenset(parts))
    return None


def defaults_key(function: Any) -> Hashable | None:
    """The typed key of a Python function's default values, positional and keyword-only (both
    are compiled into a trace that calls it), or None when one of them is not plain data."""
    keys = tuple(constant_key(values) if values is not None else () for values in
                 (function.__defaults__, function.__kwdefaults__))
    return None if None in keys else keys


def _element_keys(elements: Any, depth: int) -> list[Hashable] | None:
    """The keys of a container's elements, or None if one is not plain data."""
    parts = []
    for element in elements:
        part = constant_key(element, depth + 1)
        if part is None:
            return None
        parts.append(part)
    return parts


class IdentityKey:
    """A key for "this very object", for values that are not plain data (a helper function, a
    user object). Holds the object weakly where it can, so a cache keyed by it keeps no user
    tensor alive; once the object is gone the key equals nothing, so a new object that reuses
    its `id` never matches a stale entry.
    """

    __slots__ = ("_id", "_reference", "__weakref__")

    def __init__(self, value: Any) -> None:
        self._id = id(value)
        try:
            self._reference: Any = weakref.ref(value)
        except TypeError:  # not weak-referenceable (a builtin function, an int subclass...): hold it
            self._reference = lambda value=value: value

    def target(self) -> Any:
        """The object, or None once it was collected."""
        return self._reference()

    def __hash__(self) -> int:
        return self._id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IdentityKey) or other._id != self._id:
            return False
        mine = self._reference()
        return mine is not None and mine is other._reference()

    def __repr__(self) -> str:
        return f"IdentityKey({self._reference()!r})"
