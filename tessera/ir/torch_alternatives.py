"""Common torch operations that have no primitive inside a compiled tile loop, and what to write
instead. The table feeds two readers: the error a traced kernel raises when it meets one of these
callables (`trace/proxy.py`), and the language reference (`scripts/gen_docs.py`).

An entry with an `instead` expression is checked by `tests/test_torch_alternatives.py`: the
expression, on a tile of rows `x` (`x[tile, :]`), must equal `call` on the whole tensor.

>>> ALTERNATIVES_BY_FUNCTION[torch.tan].instead
'torch.sin(x) / torch.cos(x)'
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from tessera import exc

T = torch.Tensor
F = torch.nn.functional


@dataclasses.dataclass(frozen=True)
class Alternative:
    """One unsupported torch operation: how users spell it, and what works instead."""

    spelling: str                              # as a user writes it, e.g. "torch.cumsum(x, dim)"
    functions: tuple[Callable[..., Any], ...]  # the callables (functions and Tensor methods) it covers
    advice: str                                # one sentence: what to write instead, or why not yet
    call: str = ""                             # torch on the whole tensor `x` (the test's reference) ...
    instead: str = ""                          # ... equals this expression on the tile of rows `x`
    # the error class raised (Helion's name for the mistake, where it has a specific one)
    error: type[exc.UnsupportedOperationError] = exc.UnsupportedOperationError


ALTERNATIVES: tuple[Alternative, ...] = (
    Alternative("torch.nonzero / torch.masked_select / x[bool_mask]",
                (torch.nonzero, T.nonzero, torch.masked_select, T.masked_select, torch.argwhere, T.argwhere),
                "the result's shape would depend on the data: keep the shape and select with "
                "torch.where(mask, x, 0) (or a masked sum)", error=exc.DataDependentOutputShapeNotSupported),
    Alternative(".item() / .tolist() / float(v)", (),
                "a tile value has no Python value while the kernel is compiled: keep it a tensor "
                "(`x * v`, `torch.where(v > 0, a, b)`)"),
)

ALTERNATIVES_BY_FUNCTION: dict[Callable[..., Any], Alternative] = {
    function: alternative for alternative in ALTERNATIVES for function in alternative.functions}


def torch_spelling(function: Callable[..., Any]) -> str:
    """How a user writes a torch callable: `torch.exp`, `F.gelu` or `Tensor.exp`.

    >>> torch_spelling(torch.Tensor.sum)
    'Tensor.sum'
    """
    name = getattr(function, "__name__", repr(function))
    for prefix, namespace in (("torch.", torch), ("F.", F), ("torch.linalg.", torch.linalg), ("Tensor.", T)):
        if getattr(namespace, name, None) is function:
            return prefix + name
    return name
