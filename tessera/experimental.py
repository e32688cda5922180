"""Helion's `helion.experimental`: `backward` (gradients of a kernel), and the deprecated `aot_*`
names (now `tessera.aot_kernel`).

`backward(kernel, grad_out, *inputs)` returns the gradients of the kernel's outputs, weighted by
`grad_out`, with respect to its floating-point tensor inputs. Tessera computes them with
torch.autograd through the kernel's eager execution (the tile loops run as PyTorch on slices):
every op torch differentiates is covered (elementwise math, reductions, products, softmax-like
passes, several tile loops, several outputs, inputs written in place), and the gradients are
torch's own. It runs at eager speed; no backward Triton kernel is generated.

>>> grad_x, grad_y = tessera.experimental.backward(mul_kernel, grad_out, x, y)   # doctest: +SKIP
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from tessera import aot, exc
from tessera.config import warn_ignored
from tessera.location import user_location
from tessera.runtime.call_keys import common_device
from tessera.runtime.kernel import Kernel

_AUTOTUNE_EFFORTS = (None, "none", "quick", "full")


def backward(kernel: Kernel, grad_out: torch.Tensor | tuple[torch.Tensor, ...], *inputs: Any,
             return_code: bool = False, autotune: bool = False, autotune_effort: str | None = None) -> Any:
    """Gradients of `kernel(*inputs)` for the output gradients `grad_out` (a tuple for a kernel
    returning several tensors): one per floating-point tensor input, a tuple, or the tensor itself
    for one. `return_code=True` also returns the backward's description and None for Triton code.

    >>> grad_x = tessera.experimental.backward(sin_kernel, torch.ones_like(x), x)   # doctest: +SKIP
    """
    if not isinstance(kernel, Kernel):
        raise exc.InvalidAPIUsage(f"tessera.experimental.backward needs a @tessera.kernel, got "
                                  f"{type(kernel).__name__}", location=user_location())
    if autotune_effort not in _AUTOTUNE_EFFORTS:
        raise exc.ConfigError(f"unknown autotune_effort {autotune_effort!r}", hint="use 'none', 'quick' or 'full'")
    if autotune or autotune_effort not in (None, "none"):
        warn_ignored("experimental.backward(autotune=...)", "the backward runs through eager execution, with nothing to tune")
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x
              for x in inputs]
    working = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]  # the kernel may write its inputs
    with torch.enable_grad():
        outputs = kernel.call_eager(tuple(working), {}, common_device(kernel.fn.__name__, tuple(working), {}))
    grads = _gradients(kernel.fn.__name__, outputs, grad_out, [x for x in leaves if _differentiable(x)])
    result = grads[0] if len(grads) == 1 else tuple(grads)
    if not return_code:
        return result
    return result, _description(kernel), None


def _differentiable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _gradients(name: str, outputs: Any, grad_out: Any, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    results = [o for o in (outputs if isinstance(outputs, (tuple, list)) else (outputs,)) if isinstance(o, torch.Tensor)]
    weights = list(grad_out) if isinstance(grad_out, (tuple, list)) else [grad_out]
    if len(weights) > len(results):  # fewer: the first outputs' gradients, as Helion pairs them
        raise exc.InvalidAPIUsage(f"{name} returns {len(results)} tensors but {len(weights)} output gradients "
                                  "were given", location=user_location(2),
                                  hint="pass one grad_out per returned tensor (a tuple for several)")
    pairs = [(o, w) for o, w in zip(results, weights) if o.requires_grad]
    if not leaves:
        return []
    if not pairs:  # no output depends on a differentiable input: all gradients are zero
        return [torch.zeros_like(leaf) for leaf in leaves]
    found = torch.autograd.grad([o for o, _ in pairs], leaves, [w.to(o.dtype) for o, w in pairs], allow_unused=True)
    return [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, found)]


def _description(kernel: Kernel) -> str:
    return (f"# backward_kernel of {kernel.fn.__name__}: torch.autograd through the eager execution of\n"
            f"{kernel.source.text}")


# helion.experimental.aot_* moved to helion.autotuner / helion.aot_kernel; Tessera's is tessera.aot_kernel
_AOT_MOVED = {"aot_kernel"}
_AOT_ABSENT = {"aot_key", "extract_shape_features", "make_aot_key"}


def __getattr__(name: str) -> Any:
    if name in _AOT_MOVED:
        warnings.warn(f"tessera.experimental.{name} is deprecated: use tessera.{name}", DeprecationWarning,
                      stacklevel=2)
        return getattr(aot, name)
    if name in _AOT_ABSENT:
        raise AttributeError(f"tessera.experimental.{name}: Tessera's aot_kernel computes each call's shape features "
                             "itself (tessera.aot.AOTKernel.features, or aot_kernel(key=...))")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["backward"]
