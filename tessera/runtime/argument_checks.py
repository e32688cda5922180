"""Tensor arguments a kernel cannot run on, named in a located error.

A kernel reads its tensors through a data pointer, sizes and strides: sparse, mkldnn and nested
tensors have no such layout, and meta tensors have no data. Checking every argument on every
call would cost the hit path (a layout read is ~50 ns per tensor), and each of these fails
anyway the moment dispatch reads its pointer or strides; so the check runs only after a call
failed, and turns torch's raw error ("Cannot access data pointer of Tensor that doesn't have
storage") into one that says which argument and what to do.

>>> unsupported_argument("add", (torch.eye(3).to_sparse(),), {})            # doctest: +SKIP
KernelArgumentError('add(): argument 0 is a sparse tensor (layout torch.sparse_coo) ...')
"""
from __future__ import annotations

from typing import Any, Iterator

import torch

from tessera import exc
from tessera.location import user_location


def _named(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    return [(f"argument {position}", value) for position, value in enumerate(args)] + \
        [(f"argument {name!r}", value) for name, value in kwargs.items()]


def _tensors(args: tuple, kwargs: dict) -> Iterator[tuple[str, torch.Tensor]]:
    for label, value in _named(args, kwargs):
        if isinstance(value, torch.Tensor):
            yield label, value
        elif isinstance(value, (list, tuple)):
            for index, element in enumerate(value):
                if isinstance(element, torch.Tensor):
                    yield f"{label}[{index}]", element


def _why_unsupported(tensor: torch.Tensor) -> tuple[str, str] | None:
    """(what the tensor is, what to do instead), or None for a tensor kernels can read."""
    if tensor.is_nested:
        return "a nested tensor", "pass its components, or a padded tensor (x.to_padded_tensor(0))"
    layout = tensor.layout
    if layout is not torch.strided:
        if layout is torch._mkldnn:  # type: ignore[attr-defined]
            return "an mkldnn tensor", "convert it with x.to_dense()"
        return f"a sparse tensor (layout {layout})", "convert it with x.to_dense()"
    if tensor.device.type == "meta":
        return "a meta tensor (it has no data)", "pass a tensor on the CPU or a GPU"
    return None


def _huge_integers(args: tuple, kwargs: dict) -> Iterator[str]:
    """Labels of the Python int arguments no int64 holds (torch and Triton overflow on them)."""
    for label, value in _named(args, kwargs):
        if isinstance(value, int) and not -2**63 <= value < 2**63:
            yield label


def stateful_graph_module(kernel_name: str, args: tuple, kwargs: dict) -> exc.GraphModuleUnsupportedOps | None:
    """A located error naming a torch.fx.GraphModule argument whose graph reads module state
    (`call_module` / `get_attr` nodes), else None: a kernel calls a graph module's code on tile
    values, and its submodules and parameters are neither arguments nor tile values."""
    for label, value in _named(args, kwargs):
        if isinstance(value, torch.fx.GraphModule):
            kinds = sorted({node.op for node in value.graph.nodes if node.op in ("call_module", "get_attr")})
            if kinds:
                return exc.GraphModuleUnsupportedOps(
                    f"{kernel_name}(): {label} is a GraphModule with {' and '.join(kinds)} nodes; only pure "
                    "computation graphs run in a tile loop", location=user_location(),
                    hint="pass its parameters as tensor arguments and index them with tiles, or trace a "
                         "function of the tile values alone (torch.fx.symbolic_trace(lambda x: ...))")
    return None


def unsupported_argument(kernel_name: str, args: tuple, kwargs: dict) -> exc.TesseraError | None:
    """A located error naming the first argument a kernel cannot run on, else None."""
    refused = stateful_graph_module(kernel_name, args, kwargs)
    if refused is not None:
        return refused
    for label in _huge_integers(args, kwargs):
        return exc.KernelArgumentError(f"{kernel_name}(): {label} is an int outside int64's range",
                                       location=user_location(),
                                       hint="kernels compute with int64 at most: pass a smaller int, or a float")
    for label, tensor in _tensors(args, kwargs):
        why = _why_unsupported(tensor)
        if why is not None:
            what, instead = why
            return exc.KernelArgumentError(
                f"{kernel_name}(): {label} is {what}; kernels read strided tensors only",
                location=user_location(), hint=instead)
    return None
