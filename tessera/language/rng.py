"""Counter-based random numbers: `hl.rand`, `hl.randint`, `hl.rand4x` (Philox 4x32 with 10 rounds, Triton's).

Element `(i, j, ...)` of `hl.rand([tile_m, tile_n], seed)` is the Philox stream of `seed` at the
element's row-major number in the loops' full extents (`i * n + j` for loops over `m` and `n`),
so a value depends on the seed and the element only: the same in eager, interpret and compiled
modes and under any block sizes. `offsets=` gives the numbers explicitly.

>>> keep = hl.rand([tile], seed=seed) > p                      # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.language.creation import check_device, shape_axes
from tessera.language.tile import Tile
from tessera.location import user_location
from tessera.trace.indexing import trace_load
from tessera.trace.proxy import TensorProxy, TileValue
from tessera.trace.tracer import Tracer

_MASK32 = 0xFFFFFFFF
# Philox 4x32: the round multipliers and the key increments (the Weyl sequence)
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
_ROUNDS = 10
_UNIFORM_SCALE = 4.6566127342e-10  # 2**-31: a 31-bit magnitude to [0, 1), as Triton's uint_to_uniform_float


def rand(shape: Sequence[Any], seed: Any, device: Any = None, offsets: Any = None) -> Any:
    """Uniform float32 numbers in [0, 1) of shape `shape` (tiles and ints), from `seed` (an int
    or a one-element integer tensor); with `offsets` (an int64 tile value), one number per offset
    and `shape` is ignored.

    >>> r = hl.rand([tile_m, 8], seed=42)                        # doctest: +SKIP
    """
    check_device(device)
    return random_p.bind(tuple(shape), seed, offsets, fn="rand", low=0, high=0)


def rand4x(seed: Any, offsets: Any, device: Any = None) -> tuple[Any, Any, Any, Any]:
    """Four independent uniform float32 values in [0, 1) per element of `offsets` (an integer tile
    value): the four 32-bit words of one Philox evaluation, as Triton's `tl.rand4x`; the first is
    `hl.rand(..., seed, offsets=offsets)`.

    >>> r0, r1, r2, _ = hl.rand4x(seed=42, offsets=tile.index.to(torch.int64))   # doctest: +SKIP
    """
    check_device(device)
    if offsets is None:
        raise exc.TesseraError("hl.rand4x needs offsets=", location=user_location(),
                               hint="pass an integer tile value, e.g. tile.index.to(torch.int64)")
    return random_p.bind((), seed, offsets, fn="rand4x", low=0, high=0)


def randint(shape: Sequence[Any], low: int, high: int, seed: Any, device: Any = None) -> Any:
    """Uniform int32 numbers in [low, high), numbered as `hl.rand` numbers them.

    >>> bucket = hl.randint([tile], low=0, high=10, seed=7)       # doctest: +SKIP
    """
    check_device(device)
    if isinstance(low, bool) or isinstance(high, bool) or not isinstance(low, int) or not isinstance(high, int):
        raise exc.TesseraError(f"hl.randint: low={low!r} and high={high!r} must be ints", location=user_location(),
                               hint="pass Python ints")
    if low >= high or high - low > 2 ** 31:
        raise exc.TesseraError(f"hl.randint: the range [{low}, {high}) is empty or wider than 2**31",
                               location=user_location(), hint="pass low < high")
    return random_p.bind(tuple(shape), seed, None, fn="randint", low=low, high=high)


# -- eager: Philox written with torch integer operations ----------------------------------------
def _mul_hi_lo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32 bits of `a * b` (both below 2**32), in 16-bit halves so that no
    int64 intermediate overflows."""
    a_high, a_low = a >> 16, a & 0xFFFF
    b_high, b_low = b >> 16, b & 0xFFFF
    middle = a_high * b_low + a_low * b_high
    low = a_low * b_low + ((middle & 0xFFFF) << 16)
    return (a_high * b_high + (middle >> 16) + (low >> 32)) & _MASK32, low & _MASK32


def philox_first_word(seed: int, offsets: torch.Tensor) -> torch.Tensor:
    """The first 32-bit word Philox 4x32-10 gives for counter (offset low, offset high, 0, 0)
    and key (seed low, seed high), as an int64 tensor in [0, 2**32)."""
    return philox_words(seed, offsets)[0]


def philox_words(seed: int, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four 32-bit words of Philox 4x32-10 at counter (offset low, offset high, 0, 0) and key
    (seed low, seed high), as int64 tensors in [0, 2**32)."""
    c0, c1 = offsets & _MASK32, (offsets >> 32) & _MASK32
    c2, c3 = torch.zeros_like(c0), torch.zeros_like(c0)
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for _ in range(_ROUNDS):
        high_b, low_b = _mul_hi_lo(_ROUND_B, c2)
        high_a, low_a = _mul_hi_lo(_ROUND_A, c0)
        c0, c1, c2, c3 = high_b ^ c1 ^ k0, low_b, high_a ^ c3 ^ k1, low_a
        k0, k1 = (k0 + _KEY_A) & _MASK32, (k1 + _KEY_B) & _MASK32
    return c0, c1, c2, c3


def _signed(word: torch.Tensor) -> torch.Tensor:
    return torch.where(word >= 2 ** 31, word - 2 ** 32, word)


def _eager_offsets(shape: tuple) -> torch.Tensor:
    device = interpreter.device()
    offsets = torch.zeros([], dtype=torch.int64, device=device)
    for position, dim in enumerate(shape):
        if isinstance(dim, Tile):
            index = torch.arange(dim.begin, dim.end, dtype=torch.int64, device=device)
            extent = (dim.range_end if dim.range_end is not None else dim.end) - dim.range_begin
        else:
            extent = int(dim)
            index = torch.arange(extent, dtype=torch.int64, device=device)
        offsets = offsets.unsqueeze(-1) * extent + index
    return offsets


def _eager_seed(seed: Any) -> int:
    if isinstance(seed, torch.Tensor):
        if seed.numel() != 1 or seed.dtype.is_floating_point:
            raise exc.TesseraError(f"hl.rand seed: a tensor of shape {list(seed.shape)} and dtype {seed.dtype}",
                                   location=user_location(), hint="pass an int or a one-element integer tensor")
        return int(seed.reshape(()))
    return int(seed)


def _uniform(word: torch.Tensor) -> torch.Tensor:
    signed = _signed(word)
    return torch.where(signed < 0, -signed - 1, signed).to(torch.float32) * _UNIFORM_SCALE


def _random_eager(shape: tuple, seed: Any, offsets: Any, *, fn: str, low: int, high: int) -> Any:
    numbers = offsets.to(torch.int64) if offsets is not None else _eager_offsets(shape)
    words = philox_words(_eager_seed(seed) & (2 ** 64 - 1), numbers)
    if fn == "rand4x":
        return tuple(_uniform(word) for word in words)
    if fn == "rand":
        return _uniform(words[0])
    return (low + _signed(words[0]).abs() % (high - low)).to(torch.int32)


# -- trace ----------------------------------------------------------------------------------------
def _traced_seed(tracer: Tracer, seed: Any) -> Any:
    if isinstance(seed, TensorProxy):
        if seed.dtype.is_floating_point or seed.dim() > 1:
            raise exc.TesseraError(f"hl.rand seed: tensor {seed.name} of dtype {seed.dtype} and rank {seed.dim()}",
                                   location=user_location(), hint="pass an int or a one-element integer tensor")
        seed = trace_load(tracer, seed, (0,) * seed.dim())
    if isinstance(seed, TileValue):
        if seed.dtype.is_floating_point or any(axis.block != 1 for axis in seed.axes):
            raise exc.TesseraError("hl.rand seed: a tile value of several elements or a float",
                                   location=user_location(), hint="pass an int or a one-element integer tensor")
        return seed.node
    if isinstance(seed, float) or isinstance(seed, bool):
        raise exc.TesseraError(f"hl.rand seed {seed!r} is not an int", location=user_location(),
                               hint="pass an int or a one-element integer tensor")
    return tracer.symbols.canonical(seed)


def _random_trace(tracer: Tracer, shape: tuple, seed: Any, offsets: Any, *, fn: str, low: int, high: int) -> Any:
    seed_value = _traced_seed(tracer, seed)
    dtype = torch.int32 if fn == "randint" else torch.float32
    if offsets is not None:
        if not isinstance(offsets, TileValue) or offsets.dtype.is_floating_point:
            raise exc.TesseraError(f"hl.{fn} offsets= must be an integer tile value", location=user_location(),
                                   hint="e.g. tile.index.to(torch.int64) * 3")
        if fn == "rand4x":  # four results: ITEM nodes take them apart
            node = tracer.emit(Op.RANDOM, [seed_value, offsets.node], offsets.axes, None, fn=fn, low=low, high=high,
                               dtypes=(dtype,) * 4).node
            return tuple(tracer.emit(Op.ITEM, [node], offsets.axes, dtype, index=i) for i in range(4))
        return tracer.emit(Op.RANDOM, [seed_value, offsets.node], offsets.axes, dtype, fn=fn, low=low, high=high)
    return tracer.emit(Op.RANDOM, [seed_value, None], shape_axes(tracer, shape), dtype, fn=fn, low=low, high=high)


random_p = defined_primitive("random", _random_eager, _random_trace)
