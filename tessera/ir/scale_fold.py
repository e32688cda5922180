"""Take a row max (or min) before a positive scale, not after: `amax(x * c)` -> `amax(x) * c`.

Attention's scores are scaled (`scores = q @ k * scale`) and then reduced to a row max and
exponentiated: `exp2(scores - amax(scores))`. Scaling every element for the max costs one
multiply per element per key tile; the exponent's `x * c - m` fuses into one FMA by itself once
the max no longer needs `x * c` (the GPU's code had one FFMA and one extra FMUL per element).

The rewrite is exact, not approximate: `x -> x * c` (rounded, in any dtype) is non-decreasing for
a finite `c > 0` and non-increasing for a finite `c < 0`, and a max or min commutes with a
monotone map (NaN: both sides are NaN, the reductions propagate it). So `amax(x * c)` is
`amax(x) * c` for `c > 0` and `amin(x) * c` for `c < 0`. `c = 0` (or infinite) is not monotone
(`-inf * 0` is NaN, `0 * inf` too): no rewrite. The scale must be a host scalar (then the sign
it was traced with is a guard: a call with the other sign compiles its own variant) or a
constant.

>>> fold_scales_out_of_extrema(ir)   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import sympy

from tessera.ir.graph import KernelIR, Node, Op, rewrite_block, walk

_FLIPPED = {"amax": "amin", "amin": "amax"}


def fold_scales_out_of_extrema(ir: KernelIR) -> KernelIR:
    """`ir` with every `amax`/`amin` of a tile times a nonzero finite scalar reduced before the product."""
    redirect: dict[Node, Node] = {}
    reductions: dict[Node, tuple[Node, ...]] = {}  # placed right after the product they read the tile of
    guards: list[tuple[sympy.Basic, str]] = []
    for node in walk(ir.body):
        folded = _fold(ir, node)
        if folded is not None:
            product, guard = folded
            redirect[node] = product
            reduced = next(value for value in product.inputs if isinstance(value, Node))
            reductions[node.inputs[0]] = reductions.get(node.inputs[0], ()) + (reduced,)
            if guard is not None and guard not in guards:
                guards.append(guard)
    if not redirect:
        return ir
    return ir.replace(body=rewrite_block(ir.body, redirect, insert_after=reductions), guards=ir.guards + tuple(guards))


def _fold(ir: KernelIR, node: Node) -> tuple[Node, tuple[sympy.Basic, str] | None] | None:
    """The product replacing reduction `node` and the guard it needs, or None to leave it."""
    if node.op is not Op.REDUCE or node.params.get("fn") not in _FLIPPED or len(node.inputs) != 1:
        return None
    scaled = node.inputs[0]
    if not isinstance(scaled, Node) or scaled.op is not Op.ELEMENTWISE or scaled.params.get("fn") != "mul":
        return None
    tiles = [value for value in scaled.inputs if isinstance(value, Node)]
    scales = [value for value in scaled.inputs if not isinstance(value, Node)]
    if len(tiles) != 1 or len(scales) != 1 or tiles[0].dtype != scaled.dtype or tiles[0].shape != scaled.shape:
        return None
    sign = _sign(ir, scales[0])
    if sign is None:
        return None
    fn = node.params["fn"] if sign > 0 else _FLIPPED[node.params["fn"]]
    reduced = dataclasses.replace(node, inputs=(tiles[0],), params=type(node.params)({**node.params, "fn": fn}),
                                  name=node.name + "_unscaled")
    # the scalar keeps its side, so the product's text and rounding are the elementwise op's own
    inputs = tuple(reduced if value is tiles[0] else value for value in scaled.inputs)
    product = dataclasses.replace(scaled, inputs=inputs, shape=node.shape, name=node.name)
    scale = scales[0]
    if not isinstance(scale, sympy.Symbol):
        return product, None
    condition = sympy.And(scale > 0, scale < sympy.oo) if sign > 0 else sympy.And(scale < 0, scale > -sympy.oo)
    return product, (condition, f"{scale} {'>' if sign > 0 else '<'} 0 and finite: the {node.params['fn']} of "
                                f"values times {scale} is taken before the product")


def _sign(ir: KernelIR, scale: Any) -> int | None:
    """+1 or -1 for a finite nonzero scale the code may rely on (a constant, or a host scalar's
    traced value), else None."""
    if isinstance(scale, sympy.Symbol):
        if scale not in ir.symbols or not ir.symbols[scale].is_floating_point or scale not in ir.example:
            return None
        scale = ir.example[scale]
    elif isinstance(scale, sympy.Number):
        scale = float(scale)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale == 0:
        return None
    return 1 if scale > 0 else -1


__all__ = ["fold_scales_out_of_extrema"]
