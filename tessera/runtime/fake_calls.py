"""Calls under torch's FakeTensorMode: torch.compile and custom-op fake implementations run a kernel
on fake tensors, whose sizes may be symbolic (SymInts with a hint), to learn its outputs' shapes.

The host code runs as usual on the fake tensors, so outputs made from the inputs' sizes keep the
symbolic sizes. A launch has no data to compute on: each fake tensor with symbolic sizes is
traced (and compiled, for `bound.config_spec` and friends) at its hint sizes, and nothing runs.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from tessera import exc
from tessera.location import user_location


UNBACKED_EXAMPLE = 64  # the size an unbacked symbol traces at, within its range


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is active (one C call: this is asked on every kernel call)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def _hint(size: Any) -> int:
    if not isinstance(size, torch.SymInt):
        return int(size)
    hint = size.node.hint
    if hint is not None:
        return int(hint)
    # an unbacked size (data-dependent): any value its range allows traces the same launches; a
    # middle-sized one keeps tails and blocks ordinary
    try:
        known = size.node.shape_env.bound_sympy(size.node.expr)
        low, high = int(known.lower), known.upper
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise exc.KernelArgumentError(
            f"a fake tensor size {size} has no example value and no known range", location=user_location(),
            hint="give the fake tensor backed sizes (a ShapeEnv symbol with a hint), as torch.compile does") from None
    value = max(low, UNBACKED_EXAMPLE)
    return value if not high.is_finite else min(value, int(high))


def range_at_hints(tile_range: Any) -> Any:
    """A tile range whose bounds are symbolic sizes of fake tensors, at their example values."""
    bounds = (*tile_range.begins, *tile_range.ends)
    if not any(isinstance(bound, torch.SymInt) for bound in bounds):
        return tile_range
    return dataclasses.replace(tile_range, begins=[_example(b) for b in tile_range.begins],
                               ends=[_example(e) for e in tile_range.ends])


def _example(bound: Any) -> Any:
    return _hint(bound) if isinstance(bound, torch.SymInt) else bound


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
