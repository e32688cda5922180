"""torch.nn.functional's pointwise losses on tile values, written with other primitives: `F.mse_loss
l1_loss smooth_l1_loss huber_loss soft_margin_loss kl_div binary_cross_entropy_with_logits`, and
`F.one_hot`.

Each loss is torch's formula lane by lane (each step rounded to a 16-bit dtype, as torch's), then
torch's `reduction`: "none", "sum" or "mean" of the whole tile value (so `F.mse_loss(a[tile],
b[tile])` is the mean over this tile's lanes, as eager mode computes it). The per-element `weight=`
of mse/l1/huber (whose "mean" divides by the weights' sum) is refused, located: multiply the
unreduced loss instead. `F.one_hot` needs `num_classes` (a class count read from the data is not a
compile-time size); a class outside 0..num_classes-1 gives a row of zeros where torch raises.

>>> loss = F.mse_loss(pred[tile, :], target[tile, :], reduction="sum")          # doctest: +SKIP
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
import torch.nn.functional as F

from tessera import exc
from tessera.ir.graph import UNIT
from tessera.ir.primitive import TORCH_FUNCTIONS, torch_primitive
from tessera.language.elementwise import scalar_tensor_value
from tessera.language.formulas import Ops
from tessera.language.operands import ask_torch, pinned_int
from tessera.language.statistics import only_tile_value
from tessera.language.view import cast, view_axes
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

_REDUCTIONS = {"none": None, "sum": torch.sum, "mean": torch.mean}


def _mse(e: Ops, x: TileValue, t: Any) -> TileValue:
    difference = e.sub(x, t)
    return e.mul(difference, difference)


def _l1(e: Ops, x: TileValue, t: Any) -> TileValue:
    return e.abs(e.sub(x, t))


def _smooth_l1(e: Ops, x: TileValue, t: Any, beta: float = 1.0) -> TileValue:
    size = e.abs(e.sub(x, t))
    if beta == 0:  # torch: the l1 loss
        return size
    return e.where(e.lt(size, beta), e.truediv(e.mul(e.mul(size, size), 0.5), beta), e.sub(size, 0.5 * beta))


def _huber(e: Ops, x: TileValue, t: Any, delta: float = 1.0) -> TileValue:
    size = e.abs(e.sub(x, t))
    return e.where(e.lt(size, delta), e.mul(e.mul(size, size), 0.5), e.mul(e.sub(size, 0.5 * delta), delta))


def _soft_margin(e: Ops, x: TileValue, t: Any) -> TileValue:
    # torch works in place in the input's dtype (`(-x).mul_(t).exp_().log1p_()`): beside an fp32
    # target, an fp16 input's product still rounds to fp16 and its exp overflows there
    product = e.mul(x, t)
    if x.dtype.is_floating_point and product.dtype != x.dtype:
        product = cast(e.tracer, product, x.dtype)
    return e.log1p(e.exp(e.neg(product)))


def _kl_div(e: Ops, x: TileValue, t: Any, log_target: bool = False) -> TileValue:
    if log_target:
        return e.mul(e.exp(t), e.sub(t, x))
    # xlogy(t, t) with log(t) rounded to t's dtype first, as torch's CPU xlogy rounds a 16-bit log
    entropy = e.where(e.isnan(t), t, e.where(e.eq(t, 0), 0.0, e.mul(t, e.log(t))))
    return e.sub(entropy, e.mul(t, x))


def _logits_bce(e: Ops, x: TileValue, t: Any, weight: Any = None, pos_weight: Any = None) -> TileValue:
    """(1 - t) x - w_p log sigmoid(x), w_p = 1 + (pos_weight - 1) t; times `weight` (torch's formula)."""
    log_sigmoid = TORCH_FUNCTIONS[F.logsigmoid].trace_rule(e.tracer, x)
    if pos_weight is not None:
        log_sigmoid = e.mul(e.add(e.mul(e.sub(pos_weight, 1), t), 1), log_sigmoid)
    loss = e.sub(e.mul(e.sub(1, t), x), log_sigmoid)
    return loss if weight is None else e.mul(loss, weight)


def _loss_rule(spelling: str, function: Callable[..., Any], formula: Callable[..., TileValue],
               parameters: tuple[str, ...]) -> Callable[..., TileValue]:
    """The trace rule of a loss: torch's arguments bound by name, the formula, then the reduction."""
    signature = inspect.signature(function)

    def rule(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        if given.get("size_average") is not None or given.get("reduce") is not None:
            raise exc.UnsupportedOperationError(f"{spelling}(size_average=..., reduce=...) inside a tile loop",
                                                location=user_location(), hint="pass reduction='none'|'sum'|'mean'")
        if "weight" in given and given["weight"] is not None and "weight" not in parameters:
            raise exc.UnsupportedOperationError(
                f"{spelling}(weight=...) inside a tile loop (its 'mean' divides by the weights' sum)",
                location=user_location(), hint=f"multiply the unreduced loss: ({spelling}(a, b, reduction='none') "
                                               "* w).sum() / w.sum()")
        reduction = given["reduction"]
        if reduction not in _REDUCTIONS:
            raise exc.UnsupportedOperationError(f"{spelling}(reduction={reduction!r}) inside a tile loop",
                                                location=user_location(), hint="use 'none', 'sum' or 'mean'")
        x = only_tile_value(spelling, scalar_tensor_value(tracer, given["input"]))
        operands = {name: scalar_tensor_value(tracer, given[name]) for name in ("target", *parameters)
                    if given.get(name) is not None}
        tensors = {name: value for name, value in operands.items() if isinstance(value, TileValue)}
        settings = {name: given[name] for name in signature.parameters
                    if name not in ("input", "target", "size_average", "reduce", "reduction", "weight",
                                    "pos_weight") and name in given}
        # torch's dtype rule with this call's settings (smooth_l1_loss of integers: refused, but
        # with beta=0 it is l1_loss, which takes them)
        plain = {name: value for name, value in settings.items() if isinstance(value, (bool, int, float))}
        dtype = ask_torch(spelling, function, (x,), {**tensors, **plain, "reduction": "none"}).dtype
        options = {name: value for name, value in operands.items() if name != "target"}
        options.update(settings)
        # each step in the operands' dtype: torch's loss kernels round every step to a 16-bit dtype
        loss = formula(Ops(tracer), x, operands["target"], **options)
        loss = cast(tracer, loss, dtype) if loss.dtype != dtype else loss
        reduce = _REDUCTIONS[reduction]
        return loss if reduce is None else TORCH_FUNCTIONS[reduce].bind(loss)
    rule.__name__ = f"_{function.__name__}_trace"
    return rule


for _name, _function, _formula, _parameters in (
        ("mse_loss", F.mse_loss, _mse, ()), ("l1_loss", F.l1_loss, _l1, ()),
        ("smooth_l1_loss", F.smooth_l1_loss, _smooth_l1, ()), ("huber_loss", F.huber_loss, _huber, ()),
        ("soft_margin_loss", F.soft_margin_loss, _soft_margin, ()), ("kl_div", F.kl_div, _kl_div, ()),
        ("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits, _logits_bce,
         ("weight", "pos_weight"))):
    torch_primitive(_name, _function)(_loss_rule(f"F.{_name}", _function, _formula, _parameters))


def _classification_dtype(spelling: str, function: Callable[..., Any], scores: TileValue, target: TileValue,
                          weight: Any) -> torch.dtype:
    """torch's result dtype, or its refusal, from stand-ins of two classes (class 0 targeted)."""
    stand_ins = [torch.zeros((2,) * scores.dim(), dtype=scores.dtype), torch.zeros((2,) * target.dim(), dtype=target.dtype)]
    if weight is not None:
        stand_ins.append(torch.ones(2, dtype=only_tile_value(spelling, weight).dtype))
    try:
        return function(*stand_ins, reduction="none").dtype
    except (RuntimeError, ValueError) as error:
        raise exc.DtypeError(f"{spelling} of {', '.join(str(v.dtype) for v in stand_ins)} values: PyTorch refuses it "
                             f"({str(error).splitlines()[0]})", location=user_location(),
                             hint="scores in a float dtype, targets int64 class indices (or probabilities)") from None


def _classification_rule(spelling: str, function: Callable[..., Any], logits: bool) -> Callable[..., TileValue]:
    """F.cross_entropy (`logits`) and F.nll_loss of [N, C] (or [C]) scores with class indices [N]
    (or class probabilities shaped like the scores): the picked score is a sum over the class dim of
    the lanes whose class equals the target (no gather); "mean" divides by the picked weights'
    sum over the targets not equal to `ignore_index` (NaN when all are ignored), as torch."""
    signature = inspect.signature(function)

    def rule(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        given = signature.bind(*args, **kwargs)
        given.apply_defaults()
        options = dict(given.arguments)
        scores = only_tile_value(spelling, options["input"])
        target = only_tile_value(spelling, options["target"])
        weight, reduction = options["weight"], options["reduction"]
        if options.get("size_average") is not None or options.get("reduce") is not None \
                or options.get("label_smoothing", 0.0) != 0.0 or scores.dim() not in (1, 2) \
                or reduction not in _REDUCTIONS:
            settings = {k: options.get(k) for k in ("size_average", "reduce", "label_smoothing", "reduction")}
            raise exc.UnsupportedOperationError(
                f"{spelling} of rank-{scores.dim()} scores with {settings} inside a tile loop", location=user_location(),
                hint="pass [N, C] (or [C]) scores, reduction='none'|'sum'|'mean' and no label_smoothing "
                     "(or write the loss with log_softmax, torch.where and sum)")
        dtype = _classification_dtype(spelling, function, scores, target, weight)
        e = Ops(tracer)
        class_dim = scores.dim() - 1
        log_probabilities = TORCH_FUNCTIONS[F.log_softmax].bind(scores, class_dim) if logits else scores
        if target.dtype.is_floating_point:  # class probabilities: -sum_c w_c t_c log p_c
            terms = e.mul(target, log_probabilities)
            if weight is not None:
                terms = e.mul(terms, weight)
            loss = e.neg(TORCH_FUNCTIONS[torch.sum].bind(terms, class_dim))
            count: Any = None
        else:
            axis = scores.axes[class_dim]
            classes = 0 if axis is UNIT else view_axes(tracer, tracer.tile_index(axis), (UNIT,) * class_dim + (axis,),
                                                       "class lanes")
            hit = e.eq(view_axes(tracer, target, (*target.axes, UNIT), "target classes"), classes)

            def picked(value: TileValue) -> TileValue:
                return TORCH_FUNCTIONS[torch.sum].bind(e.where(hit, value, 0.0), class_dim)
            valid = e.ne(target, options["ignore_index"])
            # (the unweighted count from the hits alone: scores * 0 + 1 is NaN at an infinite score)
            chosen = e.where(valid, picked(weight if weight is not None else e.where(hit, 1.0, 0.0)), 0.0)
            loss = e.where(valid, e.neg(e.mul(picked(log_probabilities), chosen)), 0.0)
            count = chosen
        loss = cast(tracer, loss, dtype) if loss.dtype != dtype else loss
        if reduction == "none":
            return loss
        total = TORCH_FUNCTIONS[torch.sum].bind(loss)
        if reduction == "sum":
            return total
        if count is None:
            return TORCH_FUNCTIONS[torch.mean].bind(loss)
        return cast(tracer, e.truediv(total, TORCH_FUNCTIONS[torch.sum].bind(count)), dtype)
    rule.__name__ = f"_{function.__name__}_trace"
    return rule


torch_primitive("cross_entropy", F.cross_entropy)(_classification_rule("F.cross_entropy", F.cross_entropy, True))
torch_primitive("nll_loss", F.nll_loss)(_classification_rule("F.nll_loss", F.nll_loss, False))


@torch_primitive("one_hot", F.one_hot)
def one_hot_p(tracer: Tracer, value: Any, num_classes: int = -1) -> TileValue:
    value = only_tile_value("F.one_hot", value)
    num_classes = pinned_int(tracer, num_classes, "F.one_hot's num_classes")  # of scalar arguments: guarded
    if value.dtype != torch.int64 and value.dtype != torch.int32 or isinstance(num_classes, bool) \
            or not isinstance(num_classes, int) or num_classes < 1:
        raise exc.UnsupportedOperationError(
            f"F.one_hot of a {value.dtype} value with num_classes={num_classes!r} inside a tile loop",
            location=user_location(),
            hint="pass an int64 (or int32) class value and num_classes as a Python int > 0 (the class count "
                 "read from the data is no compile-time size)")
    axis = UNIT if num_classes == 1 else tracer.full_axis(num_classes)
    classes = 0 if axis is UNIT else view_axes(tracer, tracer.tile_index(axis), (UNIT,) * value.dim() + (axis,),
                                               "one_hot classes")
    column = view_axes(tracer, value, (*value.axes, UNIT), "one_hot value")
    return cast(tracer, Ops(tracer).eq(column, classes), torch.int64)
