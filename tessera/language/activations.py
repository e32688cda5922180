"""torch's activation functions on tile values, written with other primitives: `F.leaky_relu elu selu
celu mish hardsigmoid hardswish hardtanh relu6 logsigmoid softsign
normalize` and `torch.nan_to_num`; F.gelu(approximate="tanh") is in elementwise.py.

Each follows the formula torch's CPU kernel evaluates (so ties, NaN and the clamps of the hard
variants match exactly), computed in fp32 for 16-bit inputs and rounded once (formulas.py).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tessera.ir.primitive import torch_primitive
from tessera.language.elementwise import apply_elementwise, scalar_tensor_value
from tessera.language.formulas import Ops, formula_primitive
from tessera.language.operands import ask_torch
from tessera.language.statistics import only_tile_value, vector_norm_p
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _leaky_relu(e: Ops, x: TileValue, negative_slope: float = 0.01) -> TileValue:
    return e.where(e.gt(x, 0), x, e.mul(x, negative_slope))


def _elu(e: Ops, x: TileValue, alpha: float = 1.0) -> TileValue:
    return e.where(e.gt(x, 0), x, e.mul(e.expm1(x), alpha))


def _selu(e: Ops, x: TileValue) -> TileValue:
    return e.where(e.gt(x, 0), e.mul(x, _SELU_SCALE), e.mul(e.expm1(x), _SELU_ALPHA * _SELU_SCALE))


def _celu(e: Ops, x: TileValue, alpha: float = 1.0) -> TileValue:
    return e.where(e.gt(x, 0), x, e.mul(e.expm1(e.truediv(x, alpha)), alpha))


def _mish(e: Ops, x: TileValue) -> TileValue:
    return e.mul(x, e.tanh(e.log1p(e.exp(x))))


def _hardtanh(e: Ops, x: TileValue, min_val: float = -1.0, max_val: float = 1.0) -> TileValue:
    return e.minimum(e.maximum(x, min_val), max_val)


def _relu6(e: Ops, x: TileValue) -> TileValue:
    return _hardtanh(e, x, 0.0, 6.0)


def _hardsigmoid(e: Ops, x: TileValue) -> TileValue:
    return e.truediv(_relu6(e, e.add(x, 3)), 6)


def _hardswish(e: Ops, x: TileValue) -> TileValue:
    return e.truediv(e.mul(x, _relu6(e, e.add(x, 3))), 6)


def _logsigmoid(e: Ops, x: TileValue) -> TileValue:
    return e.sub(e.minimum(x, 0), e.log1p(e.exp(e.neg(e.abs(x)))))


def _softsign(e: Ops, x: TileValue) -> TileValue:
    return e.truediv(x, e.add(e.abs(x), 1))


def _nan_to_num(tracer: Tracer, x: Any, nan: float = 0.0, posinf: Any = None, neginf: Any = None,
                *, out: Any = None) -> TileValue:
    x = only_tile_value("torch.nan_to_num", scalar_tensor_value(tracer, x))
    ask_torch("torch.nan_to_num", torch.nan_to_num, (x, nan, posinf, neginf), {})
    if not x.dtype.is_floating_point:  # integers hold no NaN or infinity
        return x
    limits = torch.finfo(x.dtype)  # the defaults: the input dtype's largest finite values
    e = Ops(tracer)
    x = e.where(e.isnan(x), nan, x)
    x = e.where(e.eq(x, float("inf")), limits.max if posinf is None else posinf, x)
    return e.where(e.eq(x, float("-inf")), limits.min if neginf is None else neginf, x)


def _normalize(tracer: Tracer, x: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None) -> TileValue:
    """x / max(norm, eps), the norm over `dim` as torch.linalg.vector_norm computes it."""
    x = only_tile_value("F.normalize", x)
    ask_torch("F.normalize", F.normalize, (x,), {"p": p, "dim": dim, "eps": eps})
    norm = vector_norm_p.trace_rule(tracer, x, p, dim, True)
    return apply_elementwise(tracer, "truediv", x, apply_elementwise(tracer, "maximum", norm, eps))


formula_primitive("leaky_relu", "F.leaky_relu", (F.leaky_relu,), _leaky_relu)
formula_primitive("elu", "F.elu", (F.elu,), _elu)
formula_primitive("selu", "F.selu", (F.selu, torch.selu), _selu)
formula_primitive("celu", "F.celu", (F.celu, torch.celu), _celu)
formula_primitive("mish", "F.mish", (F.mish,), _mish)
formula_primitive("hardtanh", "F.hardtanh", (F.hardtanh,), _hardtanh, integers_as_is=True)
formula_primitive("relu6", "F.relu6", (F.relu6,), _relu6, integers_as_is=True)
formula_primitive("hardsigmoid", "F.hardsigmoid", (F.hardsigmoid,), _hardsigmoid)
formula_primitive("hardswish", "F.hardswish", (F.hardswish,), _hardswish)
formula_primitive("logsigmoid", "F.logsigmoid", (F.logsigmoid,), _logsigmoid)
# torch's F.softsign is three tensor ops, each rounding to the input's dtype (ints wrap): so here too
formula_primitive("softsign", "F.softsign", (F.softsign,), _softsign, widen=False)
torch_primitive("nan_to_num", torch.nan_to_num, torch.Tensor.nan_to_num)(_nan_to_num)
torch_primitive("normalize", F.normalize)(_normalize)
