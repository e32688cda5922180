"""A kernel call taken apart into its tensors, ints and floats and put back together.

Both torch.compile's custom ops (torch_library.py) and autograd (autograd.py) see a call as flat
lists of tensors plus a hashable structure that holds everything else (bools, None, strings,
dtypes are constants in it; ints and floats are values, so a new value needs no new op).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tessera import exc
from tessera.location import user_location


@dataclasses.dataclass(frozen=True)
class Leaf:
    kind: str  # "tensor", "int", "float", or "constant" (kept in the op, part of its identity)
    constant: Any = None


def flatten(value: Any, tensors: list, ints: list, floats: list) -> Any:
    """The structure of `value` (hashable), appending its tensors, ints and floats to the lists."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return Leaf("tensor")
    if isinstance(value, bool) or value is None:
        return Leaf("constant", value)
    if isinstance(value, (int, torch.SymInt)):
        ints.append(value)
        return Leaf("int")
    if isinstance(value, (float, torch.SymFloat)):
        floats.append(value)
        return Leaf("float")
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(flatten(item, tensors, ints, floats) for item in value))
    if isinstance(value, dict):
        return (dict, tuple((key, flatten(item, tensors, ints, floats)) for key, item in value.items()))
    try:
        hash(value)
    except TypeError:
        raise exc.KernelArgumentError(
            f"a {type(value).__name__} argument cannot be passed to a kernel inside torch.compile",
            location=user_location(),
            hint="pass tensors, ints, floats, bools, None, strings, dtypes, or lists/tuples/dicts of them") from None
    return Leaf("constant", value)


def unflatten(structure: Any, tensors: Any, ints: Any, floats: Any) -> Any:
    """Rebuild what `flatten` took apart; `tensors`, `ints`, `floats` are iterators."""
    if isinstance(structure, Leaf):
        if structure.kind == "tensor":
            return next(tensors)
        if structure.kind == "int":
            return next(ints)
        if structure.kind == "float":
            return next(floats)
        return structure.constant
    kind, items = structure
    if kind is dict:
        return {key: unflatten(item, tensors, ints, floats) for key, item in items}
    return kind(unflatten(item, tensors, ints, floats) for item in items)


@dataclasses.dataclass(frozen=True)
class CallResult:
    """How a kernel's return value is rebuilt from the op's fresh output tensors: each tensor leaf
    is either fresh (the next op output) or an input returned as is (by position)."""

    structure: Any
    sources: tuple[int | None, ...]  # per tensor leaf: the input position, or None for a fresh output


def split_result(result: Any, inputs: list[torch.Tensor]) -> tuple[CallResult, list[torch.Tensor]]:
    """A result's rebuilding recipe, and its fresh tensors (the op's outputs)."""
    tensors: list[torch.Tensor] = []
    ints: list[Any] = []
    floats: list[Any] = []
    structure = flatten(result, tensors, ints, floats)
    if ints or floats:
        raise exc.KernelArgumentError(
            "a kernel called inside torch.compile returns a Python number", location=user_location(),
            hint="return tensors (and None); compute numbers from the returned tensors' shapes outside the kernel")
    positions = {id(tensor): position for position, tensor in enumerate(inputs)}
    sources = tuple(positions.get(id(tensor)) for tensor in tensors)
    return CallResult(structure, sources), [t for t, source in zip(tensors, sources) if source is None]


def rebuild(recipe: CallResult, fresh: list[torch.Tensor], inputs: list[torch.Tensor]) -> Any:
    outputs = iter(fresh)
    tensors = [inputs[source] if source is not None else next(outputs) for source in recipe.sources]
    return unflatten(recipe.structure, iter(tensors), iter(()), iter(()))
