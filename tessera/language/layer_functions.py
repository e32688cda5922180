"""torch.nn.functional's layer functions on tile values, written with other primitives: `F.linear`,
`F.pad`, `F.dropout` and `F.cosine_similarity` (also `torch.cosine_similarity`).

- `F.linear(x, w, b)` is `x @ w.T + b` for 1-, 2- and 3-D `x`: the product accumulates in fp32
  (fp64 for fp64), the bias joins before the one rounding to torch's dtype, as torch's addmm.
- `F.pad` pads whole dims (read with `:`) in every mode of torch's (`constant`, `reflect`,
  `replicate`, `circular`): each result lane names the source lane it takes, as rearrange.py's
  ops do. A tile's extent varies per tile, so padding a tile dim is refused, located, in every mode.
- `F.dropout(x, p, training)` keeps a lane where Tessera's Philox draw (that of `torch.rand_like`
  at the call: seeded from torch's generator at each launch) is at least `p`, scaled by
  `1 / (1 - p)`, and multiplies as torch does (a dropped NaN stays NaN; p = 1 gives x * 0); the
  same numbers in eager, interpret and compiled modes. `training=False` returns x.
- `F.cosine_similarity` follows torch's formula: each operand divided by its 2-norm over `dim`
  (clamped to `eps`), multiplied and summed, every step in the operands' dtype as torch rounds it.

>>> y = F.linear(x[tile, :], w[:, :], b[:])                                   # doctest: +SKIP
>>> padded = F.pad(x[tile, :], (1, 2), value=0.0)                             # doctest: +SKIP
"""
from __future__ import annotations

import numbers
from typing import Any, Callable

import sympy
import torch
import torch.nn.functional as F

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import UNIT
from tessera.ir.primitive import TORCH_FUNCTIONS, defined_primitive
from tessera.language.eager_indexing import refuse_tile_dims
from tessera.language.elementwise import apply_elementwise
from tessera.language.formulas import Ops, compute_dtype, refuse_inplace, widened
from tessera.language.math import exact_matmul, wide_dtype
from tessera.language.operands import ask_torch, pinned_int
from tessera.language.reductions import record_reduction
from tessera.language.slicing import pick_lanes, whole_extent
from tessera.language.statistics import only_tile_value, vector_norm_p
from tessera.language.view import cast, normalized_dims, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer


def _probe(function: Callable[..., Any], *operands: Any, **kwargs: Any) -> torch.Tensor:
    """`function` on one-element stand-ins of the operands' dtypes and ranks (eager's check of
    what torch refuses for these dtypes, e.g. F.linear of fp16 with fp32)."""
    stand_ins = [torch.ones((1,) * v.dim(), dtype=v.dtype) if isinstance(v, torch.Tensor) else v for v in operands]
    return function(*stand_ins, **kwargs)


# -- F.linear -------------------------------------------------------------------------------------
def _in_tile_loop() -> bool:
    """Whether eager mode runs a tile loop's body (host code calls torch's own function)."""
    return bool(getattr(interpreter.active(), "loop_depth", 0))


def _linear_eager(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    if not _in_tile_loop():
        return F.linear(input, weight, bias)
    dtype = _probe(F.linear, input, weight, bias).dtype
    product = exact_matmul(input, weight.mT if weight.dim() == 2 else weight)
    if bias is not None:
        product = product + bias.to(product.dtype)
    return product.to(dtype)


def _linear_trace(tracer: Tracer, input: Any, weight: Any, bias: Any = None) -> TileValue:
    dtype = ask_torch("F.linear", F.linear, (input, weight, bias), {}).dtype
    input, weight = only_tile_value("F.linear", input), only_tile_value("F.linear", weight)
    if input.dim() > 3 or weight.dim() > 2:
        raise exc.UnsupportedOperationError(
            f"F.linear of a rank-{input.dim()} input and a rank-{weight.dim()} weight inside a tile loop: "
            "the input is 1-, 2- or 3-D and the weight 1- or 2-D", location=user_location(),
            hint="reshape the input to 3-D first (v.reshape(a, b, k)), or use torch.matmul")
    transposed = weight.t() if weight.dim() == 2 else weight
    if input.dim() == 3 and transposed.dim() == 2:  # a batch of products with one weight, spread over the batch
        transposed = transposed[None].expand(input.size(0), -1, -1)
    total = TORCH_FUNCTIONS[torch.matmul].bind(input, transposed, out_dtype=wide_dtype(dtype))
    if bias is not None:
        total = apply_elementwise(tracer, "add", total, widened(tracer, bias, total.dtype))
    return cast(tracer, total, dtype)


# -- F.pad ----------------------------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_amounts(value: Any, pad: Any) -> list[tuple[int, int, int]]:
    """(dim, before, after) of each dim `pad` changes: its pairs name the dims from the last one."""
    amounts = list(pad) if isinstance(pad, (list, tuple, torch.Size)) else None
    if amounts is None or len(amounts) % 2 or len(amounts) // 2 > value.dim() \
            or any(isinstance(a, bool) or not isinstance(a, int) for a in amounts):
        raise exc.UnsupportedOperationError(
            f"F.pad with pad={pad!r} for a value of rank {value.dim()}", location=user_location(),
            hint="pass Python ints in pairs (before, after), the last dim first, at most one pair per dim")
    return [(value.dim() - 1 - i, amounts[2 * i], amounts[2 * i + 1]) for i in range(len(amounts) // 2)
            if amounts[2 * i] or amounts[2 * i + 1]]


def _pad_eager(input: Any, pad: Any, mode: str = "constant", value: Any = None) -> Any:
    if isinstance(input, torch.Tensor):
        refuse_tile_dims(input, [dim for dim, _, _ in _pad_amounts(input, pad)], "F.pad")
    return F.pad(input, pad, mode, value)


def _source_lane(e: Ops, mode: str, lanes: Any, before: int, size: int) -> Any:
    """The source lane result lane `lanes` takes along a padded dim (a lane outside 0..size-1 for
    the constant border, which pick_lanes reads as no lane)."""
    shifted = e.sub(lanes, before) if isinstance(lanes, TileValue) else lanes - before
    if mode == "constant":
        return shifted
    if not isinstance(shifted, TileValue):  # a result of one lane: its source is known now
        return {"reflect": (size - 1) - abs((size - 1) - abs(shifted)), "replicate": min(max(shifted, 0), size - 1),
                "circular": shifted % size}[mode]
    if mode == "reflect":  # mirror at both ends (torch asks pads smaller than the dim)
        return e.sub(size - 1, e.abs(e.sub(size - 1, e.abs(shifted))))
    if mode == "replicate":
        return e.minimum(e.maximum(shifted, 0), size - 1)
    return e.mod(e.add(shifted, size), size)  # circular (torch asks pads at most the dim)


def _pad_trace(tracer: Tracer, input: Any, pad: Any, mode: str = "constant", value: Any = None) -> TileValue:
    input = only_tile_value("F.pad", input)
    if isinstance(pad, (list, tuple)):  # amounts from scalar arguments: this call's, guarded
        pad = tuple(pinned_int(tracer, amount, "an F.pad amount") for amount in pad)
    amounts = _pad_amounts(input, pad)
    if mode not in _PAD_MODES:
        raise exc.UnsupportedOperationError(f"F.pad mode {mode!r}", location=user_location(),
                                            hint=f"use one of {', '.join(_PAD_MODES)}")
    if mode != "constant" and any(before < 0 or after < 0 for _, before, after in amounts):
        # torch's circular padding reads past the value for some negative pads (garbage, not a crop)
        raise exc.UnsupportedOperationError(f"F.pad{tuple(pad)} with a negative pad in mode {mode!r}",
                                            location=user_location(), hint="crop with a slice first: v[:, 1:]")
    sizes = [1] * input.dim()
    for dim, _, _ in amounts:
        sizes[dim] = whole_extent(tracer, input, dim, "F.pad")  # a tile dim: the located refusal
    try:  # torch's own checks of the mode, the pads and the rank, on a stand-in of the real sizes
        F.pad(torch.empty(sizes, dtype=input.dtype, device="meta"), tuple(pad), mode,
              value if value is None or isinstance(value, numbers.Number) else 0.0)
    except (RuntimeError, ValueError, NotImplementedError) as error:
        raise exc.ShapeMismatchError(f"F.pad{tuple(pad)} (mode {mode!r}) of a value of shape {sizes}: "
                                     f"{str(error).splitlines()[0]}", location=user_location(),
                                     hint="PyTorch refuses it too") from None
    e = Ops(tracer)
    fill = 0 if value is None else value  # a number converts to x's dtype, as torch's; a runtime scalar casts there
    if isinstance(fill, numbers.Number):
        fill = torch.tensor(fill).to(input.dtype).item()
    for dim, before, after in amounts:
        size = sizes[dim]
        count = size + before + after
        axis = UNIT if count == 1 else tracer.full_axis(count)
        lanes = 0 if axis is UNIT else tracer.tile_index(axis)
        picked = pick_lanes(tracer, input, dim, axis, _source_lane(e, mode, lanes, before, size))
        if mode == "constant":
            if axis is UNIT:  # one result lane: in the border or not, known now
                if 0 <= -before < size:
                    input = picked
                    continue
                inside = e.bitwise_and(e.eq(picked, picked), e.ne(picked, picked))  # nowhere (NaN lanes too)
            else:
                border = e.bitwise_and(e.ge(lanes, before), e.lt(lanes, before + size))
                inside = view_axes(tracer, border, tuple(axis if d == dim else UNIT for d in range(input.dim())),
                                   "F.pad border")
            picked = widened(tracer, e.where(inside, picked, fill), input.dtype)
        input = picked
    return input


# -- F.dropout ------------------------------------------------------------------------------------
def _check_dropout(p: Any, training: Any, inplace: Any) -> None:
    refuse_inplace("F.dropout", {"inplace": inplace})
    if isinstance(p, numbers.Real) and not 0 <= p <= 1:
        raise exc.TesseraError(f"F.dropout probability {p} is not between 0 and 1", location=user_location(),
                               hint="pass 0 <= p <= 1 (torch raises the same ValueError)")
    if not isinstance(training, bool):
        raise exc.UnsupportedOperationError(f"F.dropout(training={training!r}) inside a tile loop",
                                            location=user_location(), hint="pass a Python bool")


def _dropout_eager(input: Any, p: Any = 0.5, training: bool = True, inplace: bool = False, *,
                   train: bool | None = None) -> Any:
    training = training if train is None else train  # torch.dropout(input, p, train) spells it `train`
    if not _in_tile_loop():
        return F.dropout(input, p, training, inplace)
    _check_dropout(p, training, inplace)
    if not training or p == 0:  # torch returns x itself (of any dtype)
        return input
    with torch.random.fork_rng(devices=[]):  # the probe draws: the launch's seeds must not move
        _probe(F.dropout, input, p)  # torch's refusal of integer inputs (p = 1 multiplies them by 0)
    uniform = TORCH_FUNCTIONS[torch.rand_like].eager_rule(input, dtype=torch.float32)
    ones = torch.ones_like(uniform, dtype=compute_dtype(input.dtype))
    noise = torch.where(uniform >= p, ones * (1.0 / (1.0 - p) if p < 1 else 0.0), 0.0)
    return input * noise.to(input.dtype)


def _dropout_trace(tracer: Tracer, input: Any, p: Any = 0.5, training: bool = True,
                   inplace: bool = False, *, train: bool | None = None) -> TileValue:
    training = training if train is None else train
    _check_dropout(p, training, inplace)
    input = only_tile_value("F.dropout", input)
    if training and not input.dtype.is_floating_point and not isinstance(p, numbers.Real):
        # torch takes integers at p = 0 and p = 1 only: this call's p, guarded (another retraces)
        known = float(tracer.symbols.evaluate(p))
        tracer.symbols.guard(sympy.Eq(p, known), f"F.dropout of integers with p = {known}")
        p = known
    if not training or isinstance(p, numbers.Real) and p == 0:  # torch returns x itself (of any dtype)
        return input
    with torch.random.fork_rng(devices=[]):  # the probe draws: the launch's seeds must not move
        ask_torch("F.dropout", F.dropout, (input, p if isinstance(p, numbers.Real) else 0.5), {})
    e = Ops(tracer)
    uniform = TORCH_FUNCTIONS[torch.rand_like].trace_rule(tracer, input, dtype=torch.float32)
    keep = e.ge(uniform, p)
    ones = e.add(e.mul(widened(tracer, uniform, compute_dtype(input.dtype)), 0.0), 1.0)  # (u is finite)
    # torch's mask scaled by 1 / (1 - p), rounded to x's dtype; a runtime p divides in the kernel,
    # read only where a lane is kept (p = 1 keeps none)
    scale = e.mul(ones, 1.0 / (1.0 - p) if p < 1 else 0.0) if isinstance(p, numbers.Real) else e.truediv(ones, 1 - p)
    return e.mul(input, widened(tracer, e.where(keep, scale, 0.0), input.dtype))


# -- F.cosine_similarity --------------------------------------------------------------------------
def _cosine_similarity_trace(tracer: Tracer, x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> TileValue:
    dtype = ask_torch("F.cosine_similarity", F.cosine_similarity, (x1, x2), {"dim": dim, "eps": eps}).dtype
    x1, x2 = only_tile_value("F.cosine_similarity", x1), only_tile_value("F.cosine_similarity", x2)
    e = Ops(tracer)
    # torch normalises each float operand in its own dtype (a zero fp16 row: its norm clamped to
    # eps = 1e-8 rounds to 0 in fp16, 0 / 0 is NaN even beside an fp32 operand); integers join as floats
    x1, x2 = (x if x.dtype.is_floating_point else widened(tracer, x, dtype) for x in (x1, x2))
    if x1.axes != x2.axes:  # torch broadcasts first: each norm is over the broadcast operand
        everywhere = e.bitwise_or(e.eq(x1, x1), e.ne(x2, x2))
        x1, x2 = e.where(everywhere, x1, x1), e.where(everywhere, x2, x2)
    position = normalized_dims(x1, dim)
    scaled = []
    for operand in (x1, x2):
        norm = vector_norm_p.trace_rule(tracer, operand, 2, position, True)
        scaled.append(e.truediv(operand, e.maximum(norm, eps)))  # clamp_min: a NaN norm stays NaN
    product = e.mul(*(widened(tracer, value, dtype) for value in scaled))
    return cast(tracer, record_reduction(tracer, "sum", product, position, False, dtype=compute_dtype(dtype)), dtype)


linear_p = defined_primitive("linear", _linear_eager, _linear_trace, torch_functions=(F.linear,))
pad_p = defined_primitive("pad", _pad_eager, _pad_trace, torch_functions=(F.pad,))
dropout_p = defined_primitive("dropout", _dropout_eager, _dropout_trace, torch_functions=(F.dropout, torch.dropout))
cosine_similarity_p = defined_primitive("cosine_similarity", F.cosine_similarity, _cosine_similarity_trace,
                                        torch_functions=(F.cosine_similarity, torch.cosine_similarity))
