"""Which lanes of two different axes are the same on every iteration, so that one may stand for
the other (Helion accepts these programs; eager mode computes them whenever the lengths agree):

- a window `x[t.begin : t.begin + block]` and tile `t` (`window_pairs_tile`), a whole dim and a tile
  whose loop runs once over it (`whole_pairs_tile`): a store's value lands on the window;
- two tiles of ranges of one length without a tail tile (`pairs_lanes`): a product sums over them.

Each answer that depends on this call's sizes becomes a guard (another call retraces).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from tessera.ir.graph import Axis

if TYPE_CHECKING:
    from tessera.trace.tracer import Tracer


def window_pairs_tile(tracer: Tracer, window: Axis, tile: Axis) -> bool:
    """Whether window `x[s : s + n]`'s lanes are tile `t`'s on every iteration: s is t's first
    index, n its block, and the window is cut short exactly where the tile is (the sliced dim
    ends where the tile's range does), or never while the tile is never short (the range is a
    multiple of the block and the dim reaches its end). Eager mode stores whenever the two
    lengths agree; these facts, guarded, say they always agree."""
    if window not in tracer.window_axes or not tile.is_tile or window.block != tile.block:
        return False
    start, view_size = tracer.window_axes[window]
    canonical = tracer.symbols.canonical
    if sympy.expand(canonical(sympy.sympify(start)) - canonical(sympy.sympify(tile.begin))) != 0:
        return False
    length = canonical(sympy.sympify(window.end))
    dim_end = canonical(sympy.expand(sympy.sympify(view_size) + sympy.sympify(start)))
    range_end, range_begin = canonical(sympy.sympify(tile.range_end)), canonical(sympy.sympify(tile.range_begin))
    host = set(tracer.symbols.values)
    if any(not sympy.sympify(e).free_symbols <= host for e in (length, dim_end, range_end, range_begin)):
        return False
    if tracer.symbols.evaluate(length) != tile.block:
        return False
    reason = f"window {window.name} holds the lanes of tile {tile.name}"
    tracer.symbols.guard(sympy.Eq(length, tile.block), reason)
    if tracer.symbols.evaluate(dim_end) == tracer.symbols.evaluate(range_end):
        tracer.symbols.guard(sympy.Eq(dim_end, range_end), reason)
        return True
    no_tail = sympy.Eq(sympy.Mod(range_end - range_begin, tile.block), 0)
    if not (tracer.symbols.evaluate(no_tail) and tracer.symbols.evaluate(dim_end) >= tracer.symbols.evaluate(range_end)):
        return False
    tracer.symbols.guard(no_tail, reason)
    tracer.symbols.guard(sympy.Ge(dim_end, range_end), reason)
    return True


def whole_pairs_tile(tracer: Tracer, whole: Axis, tile: Axis) -> bool:
    """Whether a whole dim's lanes are a tile's on every iteration: the tile's loop runs once,
    from 0 over the dim's whole size, in a block of the dim's (`out[:, t] = stack[s, t]` with
    `s` one tile of all the stack's rows). Both facts are guarded."""
    if whole not in tracer.full_axes() or not tile.is_tile or whole.block != tile.block:
        return False
    if tracer.row_loop is not None and whole is tracer.row_loop.axis:  # a chunked row: its block is the chunk
        return False
    canonical = tracer.symbols.canonical
    begin, end = canonical(sympy.sympify(tile.range_begin)), canonical(sympy.sympify(tile.range_end))
    extent = canonical(sympy.sympify(whole.end))
    host = set(tracer.symbols.values)
    if begin != 0 or any(not sympy.sympify(e).free_symbols <= host for e in (end, extent)):
        return False
    if tracer.symbols.evaluate(end) != tracer.symbols.evaluate(extent) or tracer.symbols.evaluate(end) > tile.block:
        return False
    reason = f"tile {tile.name} runs once over the whole dim {whole.name}"
    tracer.symbols.guard_equal(end, extent, reason)
    tracer.symbols.guard(sympy.Le(end, tile.block), reason)
    return True


def pairs_lanes(tracer: Tracer, a: Axis, b: Axis) -> bool:
    """Whether two tiles have the same valid lanes on every pair of iterations: same block, ranges
    of the same host length L, and L one block or less or a multiple of the block (no tail tile).
    Eager mode multiplies `p[tq, tk] @ v[tq, :]` whenever the sizes agree; this is when they always
    agree. Both facts become guards (a tail retraces and fails, as eager fails on that iteration)."""
    if not (a.is_tile and b.is_tile) or a.block != b.block:
        return False
    lengths = [tracer.symbols.canonical(sympy.sympify(axis.range_end) - sympy.sympify(axis.range_begin))
               for axis in (a, b)]
    if any(tracer.symbols.on_device(length) or not length.free_symbols <= set(tracer.symbols.values)
           for length in lengths):
        return False
    actual = tracer.symbols.evaluate(lengths[0])
    if actual != tracer.symbols.evaluate(lengths[1]) or not (actual <= a.block or actual % a.block == 0):
        return False
    reason = f"tiles {a.name} and {b.name} of a product pair lane for lane"
    tracer.symbols.guard_equal(lengths[0], lengths[1], reason)
    tracer.symbols.guard(sympy.Le(lengths[0], a.block) if actual <= a.block
                         else sympy.Eq(sympy.Mod(lengths[0], a.block), 0), reason)
    return True
