"""Counter-based random numbers: `hl.rand`, `hl.randint`, `hl.rand4x` (Philox 4x32 with 10 rounds, Triton's).

Element `(i, j, ...)` of `hl.rand([tile_m, tile_n], seed)` is the Philox stream of `seed` at the
element's row-major number in the loops' full extents (`i * n + j` for loops over `m` and `n`),
so a value depends on the seed and the element only: the same in eager, interpret and compiled
modes and under any block sizes. `offsets=` gives the numbers explicitly.

>>> keep = hl.rand([tile], seed=seed) > p                      # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Sequence

import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.language import eager_lanes
from tessera.language.creation import check_device, like_axes, shape_axes
from tessera.language.eager_indexing import mark_tile_values
from tessera.language.tile import Tile
from tessera.location import is_internal_file, user_location
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
    return random_at_offsets(_eager_seed(seed), numbers, fn, low, high)


def random_at_offsets(seed: int, offsets: torch.Tensor, fn: str, low: int = 0, high: int = 0) -> Any:
    """What `hl.<fn>` (rand, rand4x, randn, randint in [low, high)) gives at these Philox offsets
    of `seed`: the eager rule, and the reference tests compare the other modes with.

    >>> random_at_offsets(7, torch.arange(3), "randint", 0, 10).dtype
    torch.int32
    """
    words = philox_words(seed & (2 ** 64 - 1), offsets)
    if fn == "rand4x":
        return tuple(_uniform(word) for word in words)
    if fn == "rand":
        return _uniform(words[0])
    if fn == "randn":
        return _normal(words)
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


# -- torch's random functions inside a tile loop: torch.rand_like(v), torch.randn([tile, 8]) ----
# As in Helion, each call site draws its seed from torch's generator when the launch runs (one
# `torch.randint(2**63 - 1, [sites])` per launch), so `torch.manual_seed` makes a kernel
# reproducible, and element (i, j) gets the Philox stream of that seed at its row-major number
# in the loops' full extents (as hl.rand numbers them): the same in every mode and block size.
_IMPLICIT_FNS = {"rand_like": "rand", "randn_like": "randn", "randint_like": "randint", "rand": "rand", "randn": "randn"}
_BOX_MULLER_MIN = 1.0e-7


def draw_seeds(count: int, device: torch.device) -> torch.Tensor:
    """`count` int64 seeds in [0, 2**63 - 1) from torch's generator of `device` (Helion's draw)."""
    return torch.randint(2 ** 63 - 1, [count], device=device)


def generator_state(device: torch.device) -> torch.Tensor | None:
    """torch's generator state for `device` (None for devices without one here)."""
    return _generator_state(device) if device.type in ("cpu", "cuda") else None


@contextlib.contextmanager
def generator_at(device: torch.device, state: torch.Tensor | None) -> Iterator[None]:
    """Run with `device`'s generator at `state`, then put back where it was: the tuner's plans and
    its eager reference draw the same seeds for torch.rand_like & co., and leave the user's alone."""
    if state is None:
        yield
        return
    saved = _generator_state(device)
    _set_generator_state(device, state)
    try:
        yield
    finally:
        _set_generator_state(device, saved)


def _generator_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.random.get_rng_state()


def _set_generator_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.random.set_rng_state(state)


class LaunchSeeds:
    """The seeds of one eager launch's random call sites, numbered as the trace numbers them (in
    the order first met). A compiled launch draws all its seeds at once; eager mode meets sites
    one by one, so on meeting a new one it rewinds the generator and draws them all again: the
    first k seeds of one draw are those of a draw of k, and the generator ends where it would."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sites: dict[Any, int] = {}
        self.start: torch.Tensor | None = None
        self.seeds: list[int] = []

    def seed(self, site: Any) -> int:
        slot = self.sites.setdefault(site, len(self.sites))
        if slot >= len(self.seeds):
            if self.start is None:
                self.start = _generator_state(self.device)
            else:
                _set_generator_state(self.device, self.start)
            self.seeds = draw_seeds(slot + 1, self.device).tolist()
        return self.seeds[slot]


def call_site() -> tuple:
    """The call site of a random call: the user's frames on the stack (code object and
    instruction), so each call in a loop body keeps one seed over every tile, and a helper
    called twice has two sites."""
    frame, site = sys._getframe(1), []
    while frame is not None:
        if not is_internal_file(frame.f_code.co_filename):
            site.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    return tuple(site)


def _implicit_dtype(fn: str, dtype: torch.dtype | None, like: torch.dtype | None) -> torch.dtype:
    resolved = dtype or like or torch.get_default_dtype()
    if fn != "randint_like" and not resolved.is_floating_point:
        raise exc.DtypeError(f"torch.{fn} inside a tile loop makes floats, not {resolved}: implicit RNG only "
                             "supports floating-point dtypes", location=user_location(2),
                             hint="pass dtype=torch.float32 (or torch.randint_like for integers)")
    return resolved


def _randint_bounds(args: tuple, kwargs: dict) -> tuple[int, int]:
    """(low, high) of `randint_like(v, high)` / `randint_like(v, low, high)` / keywords."""
    if "high" in kwargs:
        low, high = (args[0] if args else kwargs.get("low", 0)), kwargs["high"]
    elif len(args) == 2:
        low, high = args
    elif len(args) == 1:
        low, high = kwargs.get("low", 0), args[0]
    else:
        raise exc.TesseraError("torch.randint_like needs high=", location=user_location(2), hint="randint_like(v, 10)")
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in (low, high)) or low >= high \
            or high - low > 2 ** 31:
        raise exc.TesseraError(f"torch.randint_like inside a tile loop: the range [{low}, {high})",
                               location=user_location(2), hint="pass Python ints low < high, at most 2**31 apart")
    return low, high


def _refuse_generator(fn: str, kwargs: dict) -> None:
    if kwargs.get("generator") is not None:
        raise exc.UnsupportedOperationError(
            f"torch.{fn}(generator=...) inside a tile loop", location=user_location(2),
            hint="the seed comes from torch's default generator (torch.manual_seed); for an explicit seed "
                 "use hl.rand / hl.randint")


def _normal(words: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Box-Muller on the first two words, as Triton's tl.randn."""
    small = torch.clamp_min(_uniform(words[0]), _BOX_MULLER_MIN)
    return torch.sqrt(-2.0 * torch.log(small)) * torch.cos(6.283185307179586 * _uniform(words[1]))


def _implicit_eager(fn: str) -> Any:
    function = getattr(torch, fn)

    def rule(*args: Any, **kwargs: Any) -> Any:
        eager = interpreter.active()
        if not getattr(eager, "loop_depth", 0):  # host code: torch's own function
            return function(*args, **kwargs)
        _refuse_generator(fn, kwargs)
        check_device(kwargs.get("device"))
        if fn.endswith("_like"):
            value, args = args[0], args[1:]
            shape, lanes = _eager_like_shape(fn, value)
            dtype = _implicit_dtype(fn, kwargs.get("dtype"), value.dtype)
        else:
            shape = _shape_of(args, kwargs)
            lanes = tuple(d if isinstance(d, Tile) else None for d in shape)
            dtype = _implicit_dtype(fn, kwargs.get("dtype"), None)
        words = philox_words(eager.launch_seeds.seed(call_site()), _eager_offsets(shape))
        if _IMPLICIT_FNS[fn] == "randint":
            low, high = _randint_bounds(args, kwargs)
            result = low + _signed(words[0]).abs() % (high - low)
        else:
            result = _uniform(words[0]) if _IMPLICIT_FNS[fn] == "rand" else _normal(words)
        result = result.to(dtype)
        eager_lanes.tag(result, lanes)
        return mark_tile_values(result)
    return rule


def _shape_of(args: tuple, kwargs: dict) -> tuple:
    """The sizes of `torch.rand(a, b)` / `torch.rand([a, b])` / `torch.rand(size=...)`."""
    if "size" in kwargs:
        return tuple(kwargs["size"])
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def _eager_like_shape(fn: str, value: Any) -> tuple[tuple, Any]:
    """The shape (tiles and ints) of an eager value whose numbers `torch.*_like` draws: each dim
    that runs over a tile is numbered by the tile's place in its loop, as compiled code numbers it."""
    lanes = eager_lanes.lanes_of(value)
    if lanes == eager_lanes.LOST or not eager_lanes.is_tracking():
        raise exc.UnsupportedOperationError(
            f"torch.{fn} of a value whose dims eager mode cannot match to their tiles", location=user_location(2),
            hint="call it in the kernel's own body on a value loaded or made there, or use "
                 "hl.rand([tile_m, tile_n], seed) / torch.rand([tile_m, tile_n]) with the tiles named")
    return tuple(lane if isinstance(lane, Tile) else value.size(d) for d, lane in enumerate(lanes)), lanes


def _implicit_trace(fn: str) -> Any:
    def rule(tracer: Tracer, *args: Any, **kwargs: Any) -> TileValue:
        _refuse_generator(fn, kwargs)
        check_device(kwargs.get("device"))
        if fn.endswith("_like"):
            value, args = args[0], args[1:]
            axes = like_axes(tracer, value)
            dtype = _implicit_dtype(fn, kwargs.get("dtype"), value.dtype)
        else:
            axes = shape_axes(tracer, _shape_of(args, kwargs))
            dtype = _implicit_dtype(fn, kwargs.get("dtype"), None)
        low, high = _randint_bounds(args, kwargs) if _IMPLICIT_FNS[fn] == "randint" else (0, 0)
        kind = _IMPLICIT_FNS[fn]
        seed = trace_load(tracer, tracer.implicit_seed(call_site()), (0,))
        result = tracer.emit(Op.RANDOM, [seed.node, None], axes, torch.int32 if kind == "randint" else torch.float32,
                             fn=kind, low=low, high=high)
        return result if result.dtype == dtype else result.to(dtype)
    return rule


# the ATen overloads of the same functions, which kernels traced from torch code spell out
_ATEN_SPELLINGS = {"rand": (torch.ops.aten.rand.default,), "randn": (torch.ops.aten.randn.default,),
                   "rand_like": (torch.ops.aten.rand_like.default,), "randn_like": (torch.ops.aten.randn_like.default,)}
for _fn in _IMPLICIT_FNS:
    defined_primitive(f"torch_{_fn}", _implicit_eager(_fn), _implicit_trace(_fn),
                      torch_functions=(getattr(torch, _fn), *_ATEN_SPELLINGS.get(_fn, ())))
