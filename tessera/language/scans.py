"""Prefix scans and reductions with a user combine function: `torch.cumsum` / `torch.cumprod` of
tile values, `hl.cumsum`, `hl.cumprod`, `hl.associative_scan` and `hl.reduce`.

A scan records an `Op.SCAN` node along one axis. A user combine function is traced into the
node's block (trace/combine.py); lanes past a tile's extent never take part in what it combines
(the backend pairs each lane with a validity flag), so results do not depend on block sizes,
and `other=` of `hl.reduce` (Helion's fill for those lanes) does not change them.

>>> running = torch.cumsum(x[tile, :], dim=1)                                   # doctest: +SKIP
>>> best, where = hl.reduce(pick, (values, indices), dim=1)                       # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from tessera import exc
from tessera.ir.graph import UNIT, Node, Op
from tessera.ir.primitive import defined_primitive
from tessera.language.operands import ask_torch
from tessera.language.view import cast
from tessera.location import user_location
from tessera.trace.combine import call_combine, trace_combine
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

T = torch.Tensor
SCAN_FUNCTIONS = ("sum", "prod", "combine")
"""The functions an `Op.SCAN` node names."""


def cumsum(input_tensor: Any, dim: int, reverse: bool = False) -> Any:
    """Running sums along `dim` (from the end with `reverse=True`), dtypes as `torch.cumsum`.

    >>> prefix = hl.cumsum(x[tile, :], dim=1)          # doctest: +SKIP
    """
    return cumsum_p.bind(input_tensor, dim, reverse=reverse)


def cumprod(input_tensor: Any, dim: int, reverse: bool = False) -> Any:
    """Running products along `dim` (from the end with `reverse=True`), dtypes as `torch.cumprod`."""
    return cumprod_p.bind(input_tensor, dim, reverse=reverse)


def associative_scan(combine_fn: Callable[..., Any], input_tensor: Any, dim: int, reverse: bool = False) -> Any:
    """The prefix scan of `input_tensor` (a tile value or a tuple of them) along `dim` with `combine_fn`,
    an associative function of two elements (of two tuples: `f(a0, a1, b0, b1)` or
    `f((a0, a1), (b0, b1))`). Element i is `x0 . x1 . ... . xi` (with `reverse`, `xi . ... . x_last`,
    combined from the end).

    >>> running_max = hl.associative_scan(torch.maximum, x[tile, :], dim=1)     # doctest: +SKIP
    """
    return associative_scan_p.bind(combine_fn, input_tensor, dim, reverse=reverse)


def reduce(combine_fn: Callable[..., Any], input_tensor: Any, dim: int | None = None, other: Any = 0,
           keep_dims: bool = False) -> Any:
    """Reduce `input_tensor` (a tile value or a tuple of them) along `dim` (None: every dim) with
    `combine_fn`, associative and commutative. `other` is accepted for Helion's signature: lanes
    past a tile's extent are left out of the combination, so no fill value is needed.

    >>> total = hl.reduce(lambda a, b: a + b, x[tile, :], dim=1)               # doctest: +SKIP
    """
    return combine_reduce_p.bind(combine_fn, input_tensor, dim, keep_dims=keep_dims)


def _torch_associative_scan(combine_fn: Callable[..., Any], xs: Any, dim: int, reverse: bool = False,
                            combine_mode: str = "pointwise") -> Any:
    """`torch._higher_order_ops.associative_scan` in a tile loop: hl.associative_scan (Helion maps
    it so); `combine_mode` picks torch's own implementation and means nothing here."""
    return associative_scan(combine_fn, xs, dim, reverse=reverse)


# torch callables that mean an hl function when a traced kernel calls them on tile values
# (control.torch_call_helper): torch's own would run on host tensors only
HL_FORMS_OF_TORCH: dict[Callable[..., Any], Callable[..., Any]] = {}
if hasattr(torch, "_higher_order_ops") and hasattr(torch._higher_order_ops, "associative_scan"):
    HL_FORMS_OF_TORCH[torch._higher_order_ops.associative_scan] = _torch_associative_scan


# -- eager rules ----------------------------------------------------------------------------------
def _leaves(input: Any) -> tuple[tuple[Any, ...], bool]:
    if isinstance(input, (tuple, list)):
        if not input:
            raise exc.TesseraError("a scan or reduction of an empty tuple", location=user_location())
        return tuple(input), True
    return (input,), False


def _cumulative_eager(function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(input: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None, reverse: bool = False,
             out: Any = None) -> torch.Tensor:
        if not reverse:
            return function(input, dim, dtype=dtype)
        return function(input.flip(dim), dim, dtype=dtype).flip(dim)
    return rule


def _scan_eager(combine_fn: Callable[..., Any], input: Any, dim: int, *, reverse: bool) -> Any:
    leaves, is_tuple = _leaves(input)
    if leaves[0].dim() == 0:
        return input
    axis = dim % leaves[0].dim()
    order = range(leaves[0].size(axis) - 1, -1, -1) if reverse else range(leaves[0].size(axis))
    running: tuple[torch.Tensor, ...] | None = None
    columns: dict[int, tuple[torch.Tensor, ...]] = {}
    for k in order:
        current = tuple(leaf.select(axis, k) for leaf in leaves)
        running = current if running is None else _as_tuple(call_combine(combine_fn, running, current))
        running = tuple(r.to(leaf.dtype) for r, leaf in zip(running, leaves))
        columns[k] = running
    results = tuple(torch.stack([columns[k][i] for k in sorted(columns)], dim=axis) for i in range(len(leaves)))
    return results if is_tuple else results[0]


def _reduce_eager(combine_fn: Callable[..., Any], input: Any, dim: int | None, *, keep_dims: bool) -> Any:
    leaves, is_tuple = _leaves(input)
    rank = leaves[0].dim()
    dims = range(rank) if dim is None else [dim % rank]
    for d in sorted(dims, reverse=True):
        running = tuple(leaf.select(d, 0) for leaf in leaves)
        for k in range(1, leaves[0].size(d)):
            following = tuple(leaf.select(d, k) for leaf in leaves)
            running = _as_tuple(call_combine(combine_fn, running, following))
        leaves = tuple(r.to(leaf.dtype).unsqueeze(d) if keep_dims else r.to(leaf.dtype)
                       for r, leaf in zip(running, leaves))
    return leaves if is_tuple else leaves[0]


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


# -- trace rules ----------------------------------------------------------------------------------
def _operands(tracer: Tracer, input: Any, what: str) -> tuple[tuple[TileValue, ...], bool]:
    """The operands as tile values of one shape (broadcast together, as torch would)."""
    leaves, is_tuple = _leaves(input)
    for leaf in leaves:
        if not isinstance(leaf, TileValue):
            raise exc.UnsupportedOperationError(f"{what} of {type(leaf).__name__} {leaf!r}: only tile values "
                                                "scan and reduce inside a tile loop", location=user_location())
    if any(leaf.dim() != leaves[0].dim() for leaf in leaves):
        raise exc.ShapeMismatchError(f"{what}: the operands have different ranks "
                                     f"{[list(leaf.axes) for leaf in leaves]}", location=user_location(),
                                     hint="give them one shape first (e.g. v[:, None].expand_as(other))")
    shape = tracer.broadcast([leaf.axes for leaf in leaves], what)
    return tuple(leaf if tuple(map(tracer.canonical_axis, leaf.axes)) == shape else
                 tracer.emit(Op.BROADCAST, [leaf.node], shape, leaf.dtype) for leaf in leaves), is_tuple


def _dim(value: TileValue, dim: Any, what: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -value.dim() <= dim < value.dim():
        raise exc.IndexingError(f"{what}: dim={dim!r} is not a dimension of a value of rank {value.dim()}",
                                location=user_location(), hint=f"pass an int in [-{value.dim()}, {value.dim()})")
    return dim % value.dim()


def _results(tracer: Tracer, node: Node, leaves: tuple[TileValue, ...], shape: tuple[Any, ...],
             is_tuple: bool) -> Any:
    if len(leaves) == 1:
        value = TileValue(node)
        return (value,) if is_tuple else value
    return tuple(tracer.emit(Op.ITEM, [node], shape, leaf.dtype, index=i) for i, leaf in enumerate(leaves))


def _combine_node(tracer: Tracer, op: Op, combine_fn: Callable[..., Any], leaves: tuple[TileValue, ...],
                  shape: tuple[Any, ...], what: str, **params: Any) -> Node:
    dtypes = tuple(leaf.dtype for leaf in leaves)
    block, results = trace_combine(tracer, combine_fn, dtypes, what)
    several = {"dtypes": dtypes} if len(leaves) > 1 else {}
    return tracer.emit_with_block(op, [leaf.node for leaf in leaves], shape, None if several else dtypes[0], block,
                                  fn="combine", **params, results=results, combine_name=_function_name(combine_fn),
                                  **several)


def _function_name(function: Any) -> str:
    """The user's name of a combine function (a decorated kernel's own function's), for the
    generated helper's name; "combine" for lambdas and callables without one."""
    name = getattr(function, "__name__", None) or getattr(getattr(function, "fn", None), "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else "combine"


def _cumulative_trace(fn: str) -> Callable[..., Any]:
    name = "cumsum" if fn == "sum" else "cumprod"

    def rule(tracer: Tracer, input: Any, dim: int, *, dtype: torch.dtype | None = None, reverse: bool = False,
             out: Any = None) -> TileValue:
        if not isinstance(input, TileValue):
            raise exc.UnsupportedOperationError(f"torch.{name} of {type(input).__name__}: only tile values scan "
                                                "inside a tile loop", location=user_location())
        result = ask_torch(f"torch.{name}", getattr(torch, name), (input,),
                           {"dim": dim, **({"dtype": dtype} if dtype else {})}).dtype
        if input.dim() == 0:
            return cast(tracer, input, result)
        d = _dim(input, dim, f"torch.{name}")
        # 16-bit floats accumulate in fp32 and round each running value, as PyTorch does
        accumulate = torch.float32 if result in (torch.float16, torch.bfloat16) else result
        return tracer.emit(Op.SCAN, [input.node], input.axes, result, fn=fn, dim=d, axis=input.axes[d],
                           reverse=reverse, accumulate=accumulate)
    return rule


def scan_trace(tracer: Tracer, combine_fn: Callable[..., Any], input: Any, dim: int, *, reverse: bool) -> Any:
    leaves, is_tuple = _operands(tracer, input, "hl.associative_scan")
    if leaves[0].dim() == 0:
        return input
    d = _dim(leaves[0], dim, "hl.associative_scan")
    axes = leaves[0].axes
    node = _combine_node(tracer, Op.SCAN, combine_fn, leaves, axes, "hl.associative_scan", dim=d, axis=axes[d],
                         reverse=bool(reverse), accumulate=leaves[0].dtype)
    return _results(tracer, node, leaves, axes, is_tuple)


def _reduce_trace(tracer: Tracer, combine_fn: Callable[..., Any], input: Any, dim: int | None, *,
                  keep_dims: bool) -> Any:
    leaves, is_tuple = _operands(tracer, input, "hl.reduce")
    dims = range(leaves[0].dim()) if dim is None else [_dim(leaves[0], dim, "hl.reduce")]
    results: Any = leaves
    for d in sorted(dims, reverse=True):
        axes = list(results[0].axes)
        shape = tuple(axes[:d] + ([UNIT] if keep_dims else []) + axes[d + 1:])
        node = _combine_node(tracer, Op.REDUCE, combine_fn, tuple(results), shape, "hl.reduce", dim=d, keepdim=keep_dims,
                             axis=axes[d], accumulate=results[0].dtype)
        results = _results(tracer, node, tuple(results), shape, True)
    return tuple(results) if is_tuple else results[0]


def _times(a: Any, b: Any) -> Any:
    return a * b


def _prod_trace(tracer: Tracer, input: Any, dim: int | None = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None, out: Any = None) -> TileValue:
    """`torch.prod`: a combine reduction with `*`, in torch's result dtype (ints and bools give
    int64); 16-bit floats multiply in fp32 and round once, as PyTorch does."""
    if not isinstance(input, TileValue):
        raise exc.UnsupportedOperationError(f"torch.prod of {type(input).__name__}: only tile values reduce "
                                            "inside a tile loop", location=user_location())
    asked = {"dtype": dtype} if dtype is not None else {}
    if dim is not None:
        asked.update(dim=dim, keepdim=keepdim)
    result = ask_torch("torch.prod", torch.prod, (input,), asked).dtype
    accumulate = torch.float32 if result in (torch.float16, torch.bfloat16) else result
    value = cast(tracer, input, accumulate)
    if value.dim() == 0:
        return cast(tracer, value, result)
    product = _reduce_trace(tracer, _times, value, None if dim is None else _dim(value, dim, "torch.prod"),
                            keep_dims=bool(keepdim) and dim is not None)
    return cast(tracer, product, result)


prod_p = defined_primitive("prod", torch.prod, _prod_trace, torch_functions=(torch.prod, T.prod))
cumsum_p = defined_primitive("cumsum", _cumulative_eager(torch.cumsum), _cumulative_trace("sum"),
                             torch_functions=(torch.cumsum, T.cumsum))
cumprod_p = defined_primitive("cumprod", _cumulative_eager(torch.cumprod), _cumulative_trace("prod"),
                              torch_functions=(torch.cumprod, T.cumprod))
associative_scan_p = defined_primitive("associative_scan", _scan_eager, scan_trace)
combine_reduce_p = defined_primitive("reduce", _reduce_eager, _reduce_trace)
