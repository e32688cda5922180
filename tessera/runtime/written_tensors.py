"""What autograd must learn about the tensors a compiled launch writes in place.

Generated code writes through raw pointers, which PyTorch cannot see. Eager mode's writes are
torch ops, so PyTorch records them; compiled and interpret modes must tell it themselves:

- each written tensor's version counter moves, as a torch in-place op moves it: a tensor some
  op saved for backward (`c = b * b`) and a kernel then overwrote makes `c.backward()` raise
  torch's "modified by an inplace operation" error instead of differentiating the new values;
- a write into a tensor that requires grad, with grad mode on and no `@kernel.backward`, is
  refused: autograd would differentiate as if the kernel had not run (eager records the write,
  or torch refuses it for a leaf). `torch.no_grad()`, `.detach()` or a backward rule lifts it.

Cost per launch: one requires_grad read per written tensor and one version bump for all.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.autograd.graph import increment_version as torch_increment_version

from tessera import exc
from tessera.compiler import flat_values
from tessera.location import user_location


def written_tensors(positions: tuple[int, ...], direct: bool, names: tuple[str, ...], values: list[Any]) -> list[torch.Tensor]:
    """The tensors at `positions` of the launch's flat values (`direct`: no closure among the
    values, so the positions index `values` itself and nothing is flattened)."""
    if direct:
        return [values[i] for i in positions]
    flat = flat_values(names, values)
    return [flat[i][1] for i in positions]


def note_writes(kernel_name: str, tensors: list[torch.Tensor], location: Any) -> None:
    """Refuse a write autograd cannot see, then move the written tensors' version counters."""
    for tensor in tensors:
        if tensor.requires_grad and torch.is_grad_enabled():
            raise exc.KernelArgumentError(
                f"{kernel_name}: this tile loop writes into a tensor that requires grad (shape "
                f"{tuple(tensor.shape)}), so autograd would not see the write", location=location or user_location(),
                hint="call the kernel under torch.no_grad(), pass a .detach()ed tensor, or give the kernel "
                     "a backward rule (@kernel.backward); eager mode records the write as torch ops")
    increment_version(tensors)


# torch's own wrapper checks for a single tensor first; the list goes straight to the C function
increment_version = getattr(torch._C, "_increment_version", None) or torch_increment_version
