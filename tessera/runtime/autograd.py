"""A kernel with a backward: `@kernel.backward` pairs a forward kernel with a gradient rule.

    >>> @softmax.backward                                   # doctest: +SKIP
    ... def softmax_backward(ctx, grad_out):
    ...     return softmax_bwd(grad_out, ctx.output)       # a Tessera kernel, or any torch code

A call of the forward kernel that needs gradients (grad mode on, a tensor argument requiring
grad) runs as a `torch.autograd.Function`: the forward kernel runs as usual and its inputs and
outputs are saved; on backward the rule gets a `BackwardContext` (the call's arguments and the
kernel's return value, as they were) and one gradient per returned tensor, and returns one
gradient per positional argument (None where there is none). Calls that need no gradient
dispatch as before, at no extra cost; inside torch.compile the kernels on both sides become
custom ops (torch_library.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from tessera import exc
from tessera.location import user_location
from tessera.runtime.call_structure import Leaf, flatten, unflatten


@dataclasses.dataclass(frozen=True)
class BackwardRule:
    """A kernel's gradient rule and the positions of returned tensors that have no gradient."""

    function: Callable[..., Any]
    nondifferentiable_outputs: tuple[int, ...] = ()


@dataclasses.dataclass
class BackwardContext:
    """What a backward rule sees of its forward call.

    `inputs`: the positional arguments as passed; `kwargs`: the keyword arguments; `output`: the
    forward kernel's return value; `needs_input_grad`: per positional argument, whether it wants
    a gradient (a rule may skip work for the others and return None there).
    """

    inputs: tuple
    kwargs: dict
    output: Any
    needs_input_grad: tuple[bool, ...]


def needs_grad(args: tuple, kwargs: dict) -> bool:
    """Whether this call records a graph for autograd: grad mode on and a tensor requiring grad."""
    if not torch.is_grad_enabled():
        return False
    for value in (*args, *kwargs.values()) if kwargs else args:  # on every call of such a kernel
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                return True
        elif isinstance(value, (list, tuple, dict)):
            if needs_grad(tuple(value.values()) if isinstance(value, dict) else tuple(value), {}):
                return True
    return False


def call_with_backward(kernel: Any, rule: BackwardRule, args: tuple, kwargs: dict) -> Any:
    """`kernel(*args, **kwargs)` recorded for autograd, with `rule` as its backward."""
    tensors: list[torch.Tensor] = []
    ints: list[Any] = []
    floats: list[Any] = []
    structure = flatten((args, kwargs), tensors, ints, floats)
    call = _Call(kernel, rule, structure, tuple(ints), tuple(floats), len(tensors))
    outputs = _KernelFunction.apply(call, *tensors)
    return unflatten(call.result_structure, iter(outputs), iter(()), iter(()))


@dataclasses.dataclass
class _Call:
    """One recorded call: everything but its tensors, and (after forward) its result's shape."""

    kernel: Any
    rule: BackwardRule
    structure: Any
    ints: tuple
    floats: tuple
    input_count: int
    result_structure: Any = None

    def arguments(self, tensors: tuple) -> tuple[tuple, dict]:
        args, kwargs = unflatten(self.structure, iter(tensors), iter(self.ints), iter(self.floats))
        return tuple(args), dict(kwargs)


class _KernelFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, call: _Call, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        args, kwargs = call.arguments(tensors)
        result = call.kernel(*args, **kwargs)  # grad mode is off here: the kernel dispatches as usual
        outputs: list[torch.Tensor] = []
        numbers: list[Any] = []
        call.result_structure = flatten(result, outputs, numbers, numbers)
        if numbers or any(output is tensor for output in outputs for tensor in tensors):
            raise exc.KernelArgumentError(
                f"{call.kernel.fn.__name__} has a backward but returns "
                f"{'a number' if numbers else 'one of its inputs'}", location=user_location(),
                hint="a kernel with a backward returns new tensors only (and None)")
        ctx.call = call
        ctx.save_for_backward(*tensors, *outputs)
        ctx.mark_non_differentiable(*(outputs[i] for i in call.rule.nondifferentiable_outputs if i < len(outputs)))
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        call: _Call = ctx.call
        saved = ctx.saved_tensors
        args, kwargs = call.arguments(saved[:call.input_count])
        output = unflatten(call.result_structure, iter(saved[call.input_count:]), iter(()), iter(()))
        flat_needs = ctx.needs_input_grad[1:]
        needs = _per_argument(call.structure, flat_needs)
        grads = call.rule.function(BackwardContext(args, kwargs, output, needs), *grad_outputs)
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        return (None, *_flat_gradients(call, args, tuple(grads)))


def _argument_structures(structure: Any) -> tuple[Any, Any]:
    """The structures of the positional arguments and of the keyword arguments."""
    _, (positional, keywords) = structure
    return positional[1], keywords[1]


def _tensor_count(structure: Any) -> int:
    tensors: list[Any] = []
    unflatten(structure, _Counter(tensors), _Counter([]), _Counter([]))
    return len(tensors)


class _Counter:
    """An iterator that records how many items were taken (each a placeholder None)."""

    def __init__(self, taken: list) -> None:
        self.taken = taken

    def __iter__(self) -> _Counter:
        return self

    def __next__(self) -> None:
        self.taken.append(None)
        return None


def _per_argument(structure: Any, flat_needs: tuple[bool, ...]) -> tuple[bool, ...]:
    """Per positional argument: whether any tensor in it needs a gradient."""
    positional, _ = _argument_structures(structure)
    needs, start = [], 0
    for argument in positional:
        count = _tensor_count(argument)
        needs.append(any(flat_needs[start:start + count]))
        start += count
    return tuple(needs)


def _flat_gradients(call: _Call, args: tuple, grads: tuple) -> list[Any]:
    """The rule's gradients (one per positional argument) as one per flattened input tensor."""
    name = call.kernel.fn.__name__
    positional, keywords = _argument_structures(call.structure)
    if len(grads) != len(positional):
        raise exc.KernelArgumentError(
            f"the backward of {name} returned {len(grads)} gradients for {len(positional)} positional arguments",
            location=user_location(), hint="return one gradient per positional argument, None where there is none")
    flat: list[Any] = []
    for position, (argument, grad) in enumerate(zip(positional, grads)):
        count = _tensor_count(argument)
        if isinstance(argument, Leaf) and argument.kind == "tensor":
            flat.append(grad)
        elif grad is not None:
            raise exc.KernelArgumentError(
                f"the backward of {name} returned a gradient for argument {position}, which is not a tensor",
                location=user_location(), hint="return None for arguments that are not tensors")
        else:
            flat.extend([None] * count)
    flat.extend([None] * sum(_tensor_count(item) for _, item in keywords))
    return flat
