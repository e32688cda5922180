"""A plan (`BoundKernel.plan`: the host code run once to record its launches, e.g. to choose the
heuristic Config before a call's first run) must leave the call's tensors as they were: the call
then runs the host code again for real, and a host-side `x.add_(1)` or `hl.store` applied in
both runs would be applied twice (a silent wrong answer on the first call). While a plan runs,
writes into the storage of a tensor argument are skipped; the plan only needs shapes."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def argument_storages(values: Any) -> set[int]:
    found: set[int] = set()
    for value in values:
        if type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type != "meta":
            # (plain tensors only: fake, functional and other subclasses have no data of their own)
            address = value.untyped_storage().data_ptr()
            if address:
                found.add(address)
        elif isinstance(value, (list, tuple)):
            found |= argument_storages(value)
        elif isinstance(value, dict):
            found |= argument_storages(value.values())
    return found


def written_into(func: Any, args: tuple, kwargs: dict, storages: set[int]) -> list[torch.Tensor] | None:
    """The tensors an aten op writes (in place or through out=) when one of them lies in one of
    `storages` (data pointers of plain tensors), else None."""
    schema = func._schema
    if not schema.is_mutable:
        return None
    written = [value for argument, value in _schema_values(schema, args, kwargs)
               if argument.alias_info is not None and argument.alias_info.is_write]
    tensors = [t for t in written if isinstance(t, torch.Tensor)]
    if tensors and any(type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta"
                       and t.untyped_storage().data_ptr() in storages for t in tensors):
        return tensors
    return None


class SkipArgumentWrites(TorchDispatchMode):
    """Skips every aten op that writes into one of `storages` (in place or through out=), returning
    what the op would have: the written tensors. Emptying `storages` lets every write through."""

    def __init__(self, storages: set[int]) -> None:
        super().__init__()
        self.storages = storages

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = written_into(func, args, kwargs, self.storages)
        if tensors is not None:
            return tensors[0] if len(func._schema.returns) == 1 else tuple(tensors[:len(func._schema.returns)])
        return func(*args, **kwargs)


def _schema_values(schema: Any, args: tuple, kwargs: dict) -> Iterator[tuple[Any, Any]]:
    for position, argument in enumerate(schema.arguments):
        if argument.kwarg_only or position >= len(args):
            if argument.name in kwargs:
                yield argument, kwargs[argument.name]
        else:
            yield argument, args[position]


@contextlib.contextmanager
def arguments_kept(args: tuple, kwargs: dict) -> Iterator[None]:
    """While the block runs, no aten op writes into the storage of a tensor in `args`/`kwargs`."""
    storages = argument_storages((*args, *kwargs.values()))
    if not storages:
        yield
        return
    with SkipArgumentWrites(storages):
        yield
