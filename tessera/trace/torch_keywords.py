"""torch's keyword spellings of a call on tile values, made into the arguments a trace rule takes.

Trace rules take torch's arguments in torch's order, mostly by position. torch also takes them by
keyword (`torch.sum(input=v, dim=1)`, `v.masked_fill(mask=m, value=0)`, `torch.addcmul(a,
tensor1=b, tensor2=c)`) and takes NumPy's names for reductions (`v.sum(axis=1, keepdims=True)`).
Before a rule runs, those become what it takes: NumPy's names become torch's, and keywords naming
torch's leading positional parameters (torch's own signature records, `torch.overrides`) become
positions. A call that still does not fit the rule is a located error naming the keywords, never a
raw TypeError.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch

from tessera import exc
from tessera.ir.torch_alternatives import torch_spelling
from tessera.location import user_location

T = torch.Tensor

_NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim"}
# torch's leading parameters that its override records name otherwise (or leave out)
_EXTRA_POSITIONS: dict[Callable[..., Any], tuple[str, ...]] = {
    T.permute: ("self", "dims"), torch.permute: ("input", "dims"),
    torch.max: ("input", "other"), torch.min: ("input", "other"), T.max: ("self", "other"), T.min: ("self", "other"),
}
_SHAPES = frozenset({"dims", "shape", "size"})  # a view's dims: moved into place like the operands
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@functools.cache
def _signature(rule: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(rule)
    except (TypeError, ValueError):
        return None


@functools.cache
def _torch_positions(func: Callable[..., Any]) -> tuple[str, ...]:
    """The names of `func`'s positional parameters, in order (torch's override records)."""
    if func in _EXTRA_POSITIONS:
        return _EXTRA_POSITIONS[func]
    reference = torch.overrides.get_testing_overrides().get(func)
    signature = _signature(reference) if reference is not None else None
    if signature is None:
        return ()
    return tuple(p.name for p in signature.parameters.values() if p.kind in _POSITIONAL)


def _binds(signature: inspect.Signature, args: tuple, kwargs: dict) -> bool:
    try:
        signature.bind(None, *args, **kwargs)  # the rule's first parameter is the tracer
    except TypeError:
        return False
    return True


def _is_operand(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or hasattr(value, "axes") or isinstance(value, (list, tuple)) and any(
        _is_operand(item) for item in value)


def _takes_anything(signature: inspect.Signature) -> bool:
    return any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values())


def rule_arguments(func: Callable[..., Any], rule: Callable[..., Any], args: tuple,
                   kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of torch call `func(*args, **kwargs)` as the trace rule `rule` takes them."""
    if not kwargs:
        return args, kwargs
    kwargs = {(_NUMPY_NAMES[k] if k in _NUMPY_NAMES and _NUMPY_NAMES[k] not in kwargs else k): v
              for k, v in kwargs.items()}
    signature = _signature(rule)
    if signature is None:
        return args, kwargs
    if not _takes_anything(signature) and _binds(signature, args, kwargs):
        return args, kwargs
    positional, rest = list(args), dict(kwargs)
    anything = _takes_anything(signature)
    for name in _torch_positions(func)[len(args):]:
        # a rule taking *args gets the operands (tensors, tile values) moved, not the options after them
        if name not in rest or anything and not (_is_operand(rest[name]) or name in _SHAPES):
            break
        positional.append(rest.pop(name))
        if not anything and _binds(signature, tuple(positional), rest):
            return tuple(positional), rest
    if anything and len(positional) > len(args):
        return tuple(positional), rest
    if _binds(signature, args, kwargs):
        return args, kwargs
    raise exc.UnsupportedOperationError(
        f"{torch_spelling(func)} with the keyword argument(s) {', '.join(kwargs)} inside a tile loop: "
        "this spelling is not understood here", location=user_location(),
        hint="pass the tensors and dims positionally, in torch's order (e.g. torch.sum(v, 1))")
