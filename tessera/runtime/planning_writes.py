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


def _argument_storages(values: Any) -> set[int]:
    found: set[int] = set()
    for value in values:
        if type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type != "meta":
            # (plain tensors only: fake, functional and other subclasses have no data of their own)
            address = value.untyped_storage().data_ptr()
            if address:
                found.add(address)
        elif isinstance(value, (list, tuple)):
            found |= _argument_storages(value)
        elif isinstance(value, dict):
            found |= _argument_storages(value.values())
    return found


class _SkipArgumentWrites(TorchDispatchMode):
    """Skips every aten op that writes into one of `storages` (in place or through out=), returning
    what the op would have: the written tensors."""

    def __init__(self, storages: set[int]) -> None:
        super().__init__()
        self.storages = storages

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        schema = func._schema
        if schema.is_mutable:
            written = [value for argument, value in _schema_values(schema, args, kwargs)
                       if argument.alias_info is not None and argument.alias_info.is_write]
            tensors = [t for t in written if isinstance(t, torch.Tensor)]
            if tensors and any(type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta"
                               and t.untyped_storage().data_ptr() in self.storages for t in tensors):
                return tensors[0] if len(schema.returns) == 1 else tuple(tensors[:len(schema.returns)])
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
    storages = _argument_storages((*args, *kwargs.values()))
    if not storages:
        yield
        return
    with _SkipArgumentWrites(storages):
        yield
