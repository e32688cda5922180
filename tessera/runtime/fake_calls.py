"""Calls under torch's FakeTensorMode: torch.compile and custom-op fake implementations run a kernel
on fake tensors, whose sizes may be symbolic (SymInts with a hint), to learn its outputs' shapes.

The host code runs as usual on the fake tensors, so outputs made from the inputs' sizes keep the
symbolic sizes. A launch has no data to compute on: each fake tensor with symbolic sizes is
traced (and compiled, for `bound.config_spec` and friends) at its hint sizes, and nothing runs.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from tessera import exc
from tessera.location import user_location


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is active (one C call: this is asked on every kernel call)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def _hint(size: Any) -> int:
    if not isinstance(size, torch.SymInt):
        return int(size)
    hint = size.node.hint
    if hint is None:
        raise exc.KernelArgumentError(
            f"a fake tensor size {size} has no example value (an unbacked symbol)", location=user_location(),
            hint="give the fake tensor backed sizes (a ShapeEnv symbol with a hint), as torch.compile does")
    return int(hint)


def at_hint_sizes(value: Any) -> Any:
    """A fake tensor (its sizes and strides maybe symbolic, or symbols the shape environment has
    since pinned, which still print as ints) as a meta tensor at their hints; else `value`."""
    if not isinstance(value, FakeTensor):
        return value
    shape, strides = value.shape, value.stride()
    # a meta tensor (no memory, outside the fake mode): the launch reads only its metadata
    with unset_fake_temporarily():
        return torch.empty_strided([_hint(s) for s in shape], [_hint(s) for s in strides], dtype=value.dtype,
                                   device="meta")
