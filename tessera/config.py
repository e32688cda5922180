"""`tessera.Config`: one point in a kernel's tuning space.

>>> Config(block_sizes=[64, 32], num_warps=4)
Config(block_sizes=[64, 32], num_warps=4)
"""
from __future__ import annotations

import copy
import difflib
import json
import os
import pathlib
import sys
from typing import Any, Callable, Mapping

from tessera.exc import ConfigError
from tessera.location import user_location

# key -> (meaning, validator). The backend reads these; the autotuner searches them.
_KNOWN_KEYS: dict[str, str] = {
    "block_sizes": "one block size per tunable tile dimension, in the order the kernel meets them",
    "num_warps": "warps per program (power of two, 1..32)",
    "num_stages": "software-pipelining stages of device loops (1..8)",
    "loop_orders": "per top-level N-D tile loop, the order in which its dims map to program ids",
    "l2_grouping": "group size of program ids along the first dim, for L2 reuse (1 = off)",
    "indexing": "'pointer' | 'block_ptr' | 'tensor_descriptor', one for all accesses or a list per access",
    "reduction_loops": "per top-level tile loop: None (its whole row is one block) or a chunk size "
                       "(the row is processed in passes over chunks of that size)",
    "pid_type": "'flat' | 'xyz' | 'persistent_blocked' | 'persistent_interleaved'",
    "split_programs": "programs to launch in all when the launch's inner tile loop has independent iterations "
                      "(e.g. a tile loop over data-dependent sizes inside hl.grid): each program of the grid "
                      "becomes max(1, split_programs // grid) programs taking every such tile in turn; 0 = off",
    "split_k": "programs per output tile of a GEMM-shaped launch (one K loop summing products into zeros, "
               "elementwise code after it): each sums a contiguous slice of K into a float32 workspace and the "
               "last to finish adds the slices in a fixed order; 1 = off",
    "pallas_pre_broadcast": "Pallas: keep loop-carried per-row values with a trailing lane dim of 128 (default True)",
    "pallas_interpreter": "Pallas: 'jax' (interpret=True, the default) or 'tpu' (the TPU-semantics interpreter, "
                          "pltpu.InterpretParams(): slower, models TPU memory spaces)",
    "pallas_addressing": "Pallas: 'auto' (default: the blocked form, BlockSpecs and pl.ds slices that Mosaic "
                         "lowers for TPU, where the kernel allows it, else the flat form), 'blocks' or 'flat'",
    "pallas_tpu_layout_check": "Pallas: refuse blocks a TPU cannot hold (last two dims multiples of 8 x 128 "
                               "or whole dims) before lowering (default False: the CPU interpreter runs any)",
    "l2_groupings": "Helion's per-tile-loop l2_grouping list: entry i groups the program ids of top-level loop i",
    "load_eviction_policies": "per load in the kernel's order: '' | 'first' | 'last' (Triton's eviction_policy)",
    "range_num_stages": "per device loop (tl.range) in the kernel's order: its num_stages (0 = the kernel's)",
    "range_unroll_factors": "per device loop: its loop_unroll_factor (0 = Triton's choice)",
    "range_flattens": "per device loop: tl.range(flatten=) (None = Triton's choice)",
    "range_warp_specializes": "per device loop: tl.range(warp_specialize=) (None = Triton's choice)",
    "range_multi_buffers": "per device loop: False sets tl.range(disallow_acc_multi_buffer=True) (None = Triton's choice)",
}

# Helion's singular spellings of the per-loop list keys, for a kernel with one such loop
_SINGULAR_KEYS = ("loop_order", "reduction_loop", "flatten_loop", "static_range", "range_unroll_factor",
                  "range_warp_specialize", "range_num_stage", "range_multi_buffer", "range_flatten")

# per-loop / per-load list keys: a single value stands for a one-entry list, as in Helion
_PER_ITEM_KEYS = ("reduction_loops", "l2_groupings", "load_eviction_policies", "range_num_stages",
                  "range_unroll_factors", "range_flattens", "range_warp_specializes", "range_multi_buffers",
                  "static_ranges", "flatten_loops")

# Helion's Config keys that Triton 3.6 gives Tessera no way to honour (or that Tessera decides by
# itself): accepted, so that a Config printed by Helion's autotuner works, and named once in a warning.
IGNORED_KEYS: dict[str, str] = {
    "num_threads": "a per-axis thread count (other backends); Triton programs take num_warps",
    "flatten_loops": "Tessera maps every N-D tile loop to one flat program id already",
    "static_ranges": "tl.static_range needs compile-time bounds; Tessera's device loops keep tl.range",
    "atomic_indexing": "atomics use pointer indexing",
    "load_cache_modifiers": "cache modifiers are not emitted",
    "store_cache_modifiers": "cache modifiers are not emitted",
    "num_sm_multiplier": "persistent kernels launch one program per SM",
    "maxnreg": "the register cap is not passed to the launch",
    "advanced_controls_file": "PTXAS control files are not passed",
    "epilogue_subtile": "epilogues are not subtiled",
    "xcd_remap": "an AMD (MI300) program-id remap",
    "pallas_load_buffer_count": "a Pallas setting",
}


MAX_BLOCK_SIZE = 2 ** 20
"""Triton's limit on the elements of one block (TRITON_MAX_TENSOR_NUMEL)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


class Config(Mapping[str, Any]):
    """Block sizes and launch settings for one compiled variant.

    Unset keys take the kernel's defaults. Helion's Config keys keep their meaning.

    >>> Config(block_sizes=[128], num_warps=8)["num_warps"]
    8
    """

    def __init__(self, block_sizes: list[int] | None = None, num_warps: int | None = None,
                 num_stages: int | None = None, **kwargs: Any) -> None:
        values: dict[str, Any] = {}
        if isinstance(block_sizes, (list, tuple)):  # Helion groups an N-D tile loop's sizes: [[32, 32], 16]
            block_sizes = [size for entry in block_sizes
                           for size in (entry if isinstance(entry, (list, tuple)) else [entry])]
        if block_sizes is not None:
            if not isinstance(block_sizes, (list, tuple)) or not all(
                    isinstance(b, int) and not isinstance(b, bool) for b in block_sizes):
                raise ConfigError(f"block_sizes={block_sizes!r} must be a list of ints",
                                  hint="e.g. Config(block_sizes=[64, 32])", location=user_location())
            values["block_sizes"] = list(block_sizes)
        if num_warps is not None:
            values["num_warps"] = num_warps
        if num_stages is not None:
            values["num_stages"] = num_stages
        values.update(copy.deepcopy(kwargs))  # the caller's lists stay theirs
        if "block_size" in values:  # Helion's shorthand for a kernel with one block size
            shorthand = values.pop("block_size")
            values.setdefault("block_sizes", list(shorthand) if isinstance(shorthand, (list, tuple)) else [shorthand])
        if isinstance(values.get("l2_grouping"), (list, tuple)):  # Helion: one entry per top-level tile loop
            if "l2_groupings" in values:
                raise ConfigError("Config gives both l2_grouping (a list) and l2_groupings", location=user_location(),
                                  hint="l2_grouping=[...] is short for l2_groupings=[...]; give one of them")
            values["l2_groupings"] = list(values.pop("l2_grouping"))
        for key in _PER_ITEM_KEYS:  # Helion takes one value for a one-entry list: reduction_loops=32
            if values.get(key) is not None and not isinstance(values[key], (list, tuple)):
                values[key] = [values[key]]
        for singular in _SINGULAR_KEYS:  # Helion's one-entry shorthands: loop_order=(1, 0) -> loop_orders=[[1, 0]]
            if singular in values:
                if f"{singular}s" in values:
                    raise ConfigError(f"Config gives both {singular} and {singular}s", location=user_location(),
                                      hint=f"{singular}=v is short for {singular}s=[v]; give one of them")
                value = values.pop(singular)
                values[f"{singular}s"] = [list(value) if isinstance(value, tuple) else value]
        try:
            _validate(values)
        except ConfigError as error:
            raise error.with_location(user_location()) from None  # the user's Config(...) line
        self._values = values
        # True for a Config Tessera chose (heuristic, tuned): a tile loop its block_sizes do not
        # reach takes the default block instead of failing (see chosen()); not part of equality
        self.fills_missing_blocks = False

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        # a copy: a Config is immutable (its cache key is computed once per object)
        return copy.deepcopy(value) if isinstance(value, list) else value

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(repr(sorted(self._values.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._values == other._values

    def __repr__(self) -> str:
        body = ", ".join(f"{key}={value!r}" for key, value in self._values.items())
        return f"Config({body})"

    def chosen(self) -> Config:
        """This Config as one Tessera chose for a call, not the user: it was planned from one
        call's tile loops, so a loop it does not cover (a branch that call did not take) gets
        the default block size rather than an error about a Config the user never wrote."""
        copy_ = Config(**self._values)
        copy_.fills_missing_blocks = True
        return copy_

    def merged(self, **updates: Any) -> Config:
        """A copy with some keys replaced."""
        return Config(**{**self._values, **updates})

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._values)

    @property
    def config(self) -> dict[str, Any]:
        """The Config's own dict of keys (Helion's `config.config`; what is removed from it is gone)."""
        return self._values

    def __getattr__(self, name: str) -> Any:
        # Helion's attribute spellings (`config.num_warps`, `config.block_sizes`): the key's value,
        # else Helion's default for it (a list key: [])
        if name.startswith("_") or name not in _ATTRIBUTE_DEFAULTS:
            raise AttributeError(f"'Config' object has no attribute {name!r}")
        values = self.__dict__.get("_values", {})
        if name in values:
            return self[name]
        default = _ATTRIBUTE_DEFAULTS[name]
        if name == "block_sizes":
            raise AttributeError("this Config gives no block_sizes")
        return copy.deepcopy(default)

    def to_json(self) -> str:
        """The keys as JSON (Helion's format: `Config.from_json(c.to_json()) == c`)."""
        return json.dumps(self._values, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Config:
        return cls(**json.loads(text))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        return cls(**dict(values))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write `to_json()` to `path` (its folder made if missing; written whole, then renamed)."""
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        partial.write_text(self.to_json())
        os.replace(partial, target)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Config:
        return cls.from_json(pathlib.Path(path).read_text())


# what `config.<key>` reads for a key the Config does not give (Helion's defaults)
_ATTRIBUTE_DEFAULTS: dict[str, Any] = {
    "block_sizes": None, "num_warps": 4, "num_stages": 1, "pid_type": "flat", "indexing": "pointer",
    "xcd_remap": False, "num_sm_multiplier": 1, "maxnreg": None, "advanced_controls_file": "",
    "epilogue_subtile": None, "pallas_load_buffer_count": [],
    **{key: [] for key in ("loop_orders", "l2_groupings", "num_threads", "atomic_indexing", "load_cache_modifiers",
                           "store_cache_modifiers", *_PER_ITEM_KEYS)},
}


def _validate(values: dict[str, Any]) -> None:
    for key in values:
        if key in _KNOWN_KEYS:
            continue
        if key in IGNORED_KEYS:
            warn_ignored(f"Config key {key!r}", IGNORED_KEYS[key])
            continue
        # any other key is a user tunable (hl.register_tunable reads it by name), unless it
        # looks like a misspelt key Tessera honours: `Config(warps=4)` must not pass silently (a
        # name near an ignored Helion key, `multiplier` ~ `num_sm_multiplier`, stays a tunable)
        near = difflib.get_close_matches(key, list(_KNOWN_KEYS), n=1, cutoff=0.7)
        if near or not key.isidentifier() or key.startswith("_tessera"):
            known = ", ".join(sorted(_KNOWN_KEYS))
            guess = f"did you mean {near[0]!r}? " if near else ""
            raise ConfigError(f"unknown Config key {key!r}",
                              hint=f"{guess}known keys: {known} (other names are hl.register_tunable values)")
    for block in values.get("block_sizes", []):
        if not _is_power_of_two(block):
            raise ConfigError(f"block size {block} is not a power of two",
                              hint="Triton blocks must be powers of two; use e.g. "
                                   f"{1 << max(block - 1, 0).bit_length()}")
        if block > MAX_BLOCK_SIZE:
            raise ConfigError(f"block size {block} is larger than {MAX_BLOCK_SIZE}",
                              hint=f"a Triton block holds at most {MAX_BLOCK_SIZE} elements; use a smaller one")
    multiplier = values.get("num_sm_multiplier", 1)
    if multiplier != 1 and "pid_type" in values and not str(values["pid_type"]).startswith("persistent"):
        raise ConfigError(f"num_sm_multiplier={multiplier!r} needs a persistent pid_type, not "
                          f"pid_type={values['pid_type']!r}",
                          hint="drop num_sm_multiplier, or set pid_type='persistent_blocked' / 'persistent_interleaved'")
    warps = values.get("num_warps")
    if warps is not None and not (_is_int(warps) and _is_power_of_two(warps) and warps <= 32):
        raise ConfigError(f"num_warps={warps!r} must be a power of two between 1 and 32",
                          hint="e.g. num_warps=4")
    stages = values.get("num_stages")
    if stages is not None and not (_is_int(stages) and 1 <= stages <= 8):
        raise ConfigError(f"num_stages={stages!r} must be an int between 1 and 8", hint="e.g. num_stages=2")
    for key, check in _VALUE_CHECKS.items():
        if values.get(key) is not None:
            check(values[key])


PID_TYPES = ("flat", "xyz", "persistent_blocked", "persistent_interleaved")
INDEXING_STRATEGIES = ("pointer", "block_ptr", "tensor_descriptor")


def _check_split_programs(value: Any) -> None:
    if not (_is_int(value) and value >= 0):
        raise ConfigError(f"split_programs={value!r} must be an int of at least 0",
                          hint="e.g. split_programs=1024 (0 turns splitting off)")


def _check_split_k(value: Any) -> None:
    if not (_is_int(value) and value >= 1):
        raise ConfigError(f"split_k={value!r} must be an int of at least 1", hint="e.g. split_k=4 (1 turns splitting off)")


def _check_loop_orders(orders: Any) -> None:
    """Each entry must be a permutation of 0..d-1: a repeated or missing dim would drop tiles."""
    if not isinstance(orders, (list, tuple)):
        raise ConfigError(f"loop_orders={orders!r} must be a list with one permutation per N-D tile loop",
                          hint="e.g. loop_orders=[[1, 0]] to map the second dim to the fastest program id")
    for position, order in enumerate(orders):
        # the type checks come first: sorted() of mixed types raises TypeError
        if not (isinstance(order, (list, tuple)) and all(_is_int(d) for d in order)
                and sorted(order) == list(range(len(order)))):
            raise ConfigError(f"loop_orders[{position}]={order!r} is not a permutation of a tile loop's dims",
                              hint="give one list per N-D tile loop, each naming every dim exactly once: "
                                   "loop_orders=[[1, 0]], not loop_orders=[1, 0]")


def _check_l2_grouping(group: Any) -> None:
    if not (isinstance(group, int) and not isinstance(group, bool) and _is_power_of_two(group) and group <= 256):
        raise ConfigError(f"l2_grouping={group!r} must be a power of two between 1 and 256",
                          hint="1 turns grouping off; 8 is a common choice for matmuls")


def _check_indexing(indexing: Any) -> None:
    choices = [indexing] if isinstance(indexing, str) else indexing
    if not isinstance(choices, (list, tuple)) or not all(c in INDEXING_STRATEGIES for c in choices):
        raise ConfigError(f"indexing={indexing!r} is not an indexing strategy",
                          hint=f"use one of {', '.join(map(repr, INDEXING_STRATEGIES))}, or a list of them "
                               "(one per memory access)")


def _check_reduction_loops(loops: Any) -> None:
    if not isinstance(loops, (list, tuple)):
        raise ConfigError(f"reduction_loops={loops!r} must be a list with one entry per top-level tile loop",
                          hint="None keeps the loop's whole row (x[tile, :]) in one block; an int loops over "
                               "chunks of that size")
    for position, chunk in enumerate(loops):
        if chunk is not None and not (isinstance(chunk, int) and not isinstance(chunk, bool)
                                      and _is_power_of_two(chunk)):
            raise ConfigError(f"reduction_loops[{position}]={chunk!r} must be None or a power of two",
                              hint="e.g. reduction_loops=[None] (one block) or [1024] (loop in chunks of 1024)")


_WARNED: set[str] = set()


def warn_ignored(what: str, why: str) -> None:
    """Say once per process that `what` is accepted but has no effect, and why."""
    if what not in _WARNED:
        _WARNED.add(what)
        print(f"[tessera] warning: {what} is accepted but ignored: {why}", file=sys.stderr)


def _check_per_item(key: str, allowed: Any, example: str) -> Any:
    def check(values: Any) -> None:
        if not isinstance(values, (list, tuple)) or not all(allowed(v) for v in values):
            raise ConfigError(f"{key}={values!r} must be a list with one entry per {example}",
                              hint=f"e.g. {key}=[{', '.join(repr(v) for v in _EXAMPLES[key])}]")
    return check


_EXAMPLES: dict[str, tuple] = {
    "l2_groupings": (8,), "load_eviction_policies": ("", "last"), "range_num_stages": (0, 3),
    "range_unroll_factors": (0, 2), "range_flattens": (None, True), "range_warp_specializes": (None, False),
    "range_multi_buffers": (None, False),
}


def _check_pid_type(pid_type: Any) -> None:
    if pid_type not in PID_TYPES:
        raise ConfigError(f"pid_type={pid_type!r} is not a program-id mapping",
                          hint=f"use one of {', '.join(map(repr, PID_TYPES))}")


PALLAS_INTERPRETERS = ("jax", "tpu")
PALLAS_ADDRESSING = ("auto", "blocks", "flat")


def _check_choice(key: str, choices: tuple[str, ...], what: str) -> Callable[[Any], None]:
    def check(name: Any) -> None:
        if name not in choices:
            raise ConfigError(f"{key}={name!r} is not one of {what}",
                              hint=f"use one of {', '.join(map(repr, choices))}")
    return check


_VALUE_CHECKS = {
    "pallas_interpreter": _check_choice("pallas_interpreter", PALLAS_INTERPRETERS, "Pallas's interpreters"),
    "pallas_addressing": _check_choice("pallas_addressing", PALLAS_ADDRESSING, "Pallas's addressing forms"),
    "loop_orders": _check_loop_orders,
    "l2_grouping": _check_l2_grouping,
    "indexing": _check_indexing,
    "reduction_loops": _check_reduction_loops,
    "pid_type": _check_pid_type,
    "split_programs": _check_split_programs,
    "split_k": _check_split_k,
    "l2_groupings": _check_per_item("l2_groupings", lambda g: _is_int(g) and _is_power_of_two(g) and g <= 256,
                                    "top-level tile loop"),
    "load_eviction_policies": _check_per_item("load_eviction_policies", lambda p: p in ("", "first", "last"),
                                              "load"),
    "range_num_stages": _check_per_item("range_num_stages", lambda n: _is_int(n) and 0 <= n <= 8, "device loop"),
    "range_unroll_factors": _check_per_item("range_unroll_factors", lambda n: _is_int(n) and 0 <= n <= 64,
                                            "device loop"),
    **{key: _check_per_item(key, lambda v: v is None or isinstance(v, bool), "device loop")
       for key in ("range_flattens", "range_warp_specializes", "range_multi_buffers")},
}


DEFAULT_BLOCK_SIZE = 32
"""Block size of every tunable tile dimension when no Config gives one (eager and compiled)."""


def default_block_size(minimum: int = 1) -> int:
    """The documented default block size, raised to `minimum` (rounded up to a power of two)."""
    floor = 1 << max(int(minimum) - 1, 0).bit_length()
    return max(DEFAULT_BLOCK_SIZE, floor)


ONE_BLOCK_ROW_LIMIT = 1 << 15
"""A whole row (`x[tile, :]`) longer than this is looped in chunks unless `reduction_loops` says."""

DEFAULT_ROW_CHUNK = 4096
"""Chunk of such a looped row."""


def reduction_loop_of(config: Config, launch_index: int) -> int | None | str:
    """`reduction_loops` entry of tile loop `launch_index`: a chunk, None (one block), or
    "auto" when the Config does not say (one block if the row fits, else chunks)."""
    loops = config.get("reduction_loops")
    if loops is None or launch_index >= len(loops):
        return "auto"
    return loops[launch_index]
