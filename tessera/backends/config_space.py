"""A kernel call's tuning space as data: axes of choices, and moves between points, for any backend.

A backend decides which Config keys it tunes and which values each may take
(`Backend.config_space(facts)`, e.g. backends/triton/space.py); this module holds what is the same
for every backend: the facts a space is built from (`KernelFacts`), one `Axis` per tunable choice
(an ordered tuple of values), conversion between points and Configs, validation of a user's
Config, and the moves a search makes (a neighbour: one axis, one step; a random point; mutation
and crossover).

>>> axis = Axis("num_warps", None, (1, 2, 4, 8), 4, "warps per program")
>>> space = ConfigSpace([axis], KernelFacts(tunables=()))
>>> [config["num_warps"] for config in space.neighbors(space.default())]
[2, 8]
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Iterator, Mapping

import torch

from tessera.config import IGNORED_KEYS, Config, default_block_size
from tessera.exc import ConfigError
from tessera.ir.tunables import LoadedTile, TunableDim


@dataclasses.dataclass(frozen=True)
class KernelFacts:
    """What one kernel call tells a backend's config space and heuristics.

    `launch_dims`: per top-level tile loop, how many dims it tiles (loop_orders and l2_grouping
    apply to loops of two or more). `reduction_extents`: per whole-row reduction, its length
    (reduction_loops has one entry per reduction). `uses_dot` / `uses_reduction`: the op mix.
    `programs`: the largest launch grid (programs) of the planned call.

    >>> KernelFacts(tunables=(TunableDim(0, 4096, 1, "launch"),), launch_dims=(1,)).uses_dot
    False
    """

    tunables: tuple[TunableDim, ...]
    launch_dims: tuple[int, ...] = ()
    reduction_extents: tuple[int, ...] = ()
    dtypes: tuple[torch.dtype, ...] = ()
    uses_dot: bool = False
    uses_reduction: bool = False
    largest_numel: int = 0
    on_gpu: bool = False
    programs: int = 0  # the most programs one launch of the call starts under the default Config
    whole_row: int = 0  # the longest whole row (`:`) a launch holds per program, e.g. attention's head_dim
    user_tunables: tuple[tuple[str, Any], ...] = ()  # hl.register_tunable: (Config key, ConfigFragment)
    whole_elements: int = 1  # the most elements a program holds along whole dims (x[tile, :]), padded
    # a call of several launches that use disjoint block_sizes slots (attention's backward: a row
    # reduction, then two dot loops): each launch's own facts, so each gets its own blocks
    launches: tuple[KernelFacts, ...] = ()
    carried_row: int = 0  # the most whole-row elements (per row) an inner loop carries: accumulators
    score_tiles: int = 0  # the most products from zero (rows x its block) one inner loop computes per iteration
    unit_dims: tuple[tuple[int, ...], ...] = ()  # per top-level tile loop: its dims of one index per program
    split_reduction: bool = False  # a launch's K loop may be split over programs (ir/split_reduction.py: split_k)
    interpreted: bool = False  # the call runs in Triton's CPU interpreter (interpret mode), not on a GPU
    # per software-pipelined loop (of any launch): the tiles its loads bring in per iteration
    # (ir/tunables.py LoadedTile); the backend keeps num_stages copies of each in shared memory
    pipelined_loads: tuple[tuple[LoadedTile, ...], ...] = ()


@dataclasses.dataclass(frozen=True)
class Axis:
    """One tunable choice: a Config key (and list position), its ordered values and its default.

    `choices` are the values a search visits; `accepts`, when given, says which values a user's
    Config may hold beyond them (e.g. any power of two up to a cap, since extents vary between
    calls); without it only the choices are valid.

    >>> Axis("block_sizes", 0, (16, 32, 64), 16, "a launch dim of extent 64").name
    'block_sizes[0]'
    """

    key: str
    position: int | None
    choices: tuple[Any, ...]
    default: Any
    why: str  # said in a validation error, e.g. "this dim feeds a dot product"
    ordered: bool = True  # neighbours are adjacent choices; unordered axes reach every other choice
    accepts: Callable[[Any], bool] | None = dataclasses.field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.key if self.position is None else f"{self.key}[{self.position}]"

    def allows(self, value: Any) -> bool:
        """Whether a user's Config may set this axis to `value`."""
        return self.accepts(value) if self.accepts is not None else value in self.choices


def powers_of_two(low: int, high: int) -> tuple[int, ...]:
    """The powers of two from `low` to `high`, both included (`low` rounded up to one).

    >>> powers_of_two(16, 100)
    (16, 32, 64)
    """
    return tuple(1 << bit for bit in range(max(low, 1).bit_length() - 1, high.bit_length()) if (1 << bit) >= low)


def next_power_of_two(value: int) -> int:
    """The smallest power of two >= `value` (1 for values below 2).

    >>> next_power_of_two(100)
    128
    """
    return 1 << max(int(value) - 1, 0).bit_length()


class ConfigSpace:
    """Every axis of one kernel call's tuning space, with conversion to and from Configs.

    `max_tile_elements` is the backend's register budget: the most elements the tile of one
    program (the product of its launch dims' blocks) may hold; None for no limit.
    """

    def __init__(self, axes: list[Axis], facts: KernelFacts, max_tile_elements: int | None = None,
                 fits_device: Callable[[Config], bool] | None = None) -> None:
        self.axes = axes
        self.facts = facts
        self.max_tile_elements = max_tile_elements
        self._fits_device = fits_device  # the backend's check of a Config against the device (shared memory)
        self._by_name = {axis.name: axis for axis in axes}

    def axis(self, name: str) -> Axis:
        return self._by_name[name]

    def size(self) -> int:
        """Number of points (the product of the axes' choice counts)."""
        total = 1
        for axis in self.axes:
            total *= len(axis.choices)
        return total

    # -- points <-> Configs -------------------------------------------------------------------

    def default(self) -> Config:
        return self.to_config({axis.name: axis.default for axis in self.axes})

    @property
    def flatten_loops(self) -> list:
        """Helion's per-loop flatten choices: none to search, as Tessera maps every N-D tile loop
        to one flat program id already (config.py names the `flatten_loops` key as ignored)."""
        return []

    @property
    def reduction_loops(self) -> list[Axis]:
        """Helion's per-reduction loop choices: one axis per whole row that may be reduced in
        chunks (`Config.reduction_loops[i]`), empty when no reduction may loop."""
        return [axis for axis in self.axes if axis.key == "reduction_loops" and axis.choices != (None,)]

    @staticmethod
    def unsupported_config_keys(config: Mapping[str, Any]) -> list[str]:
        """Helion's name: the keys of `config` that Tessera accepts but does not honour (each
        warned about once by name when a Config holds it)."""
        return [key for key in config if key in IGNORED_KEYS]

    def default_config(self) -> Config:
        """Helion's name for `default` (`bound.config_spec.default_config()`)."""
        return self.default()

    @property
    def block_sizes(self) -> list[Axis]:
        """The axes of the `block_sizes` entries, in Config order (Helion's `config_spec.block_sizes`)."""
        return sorted((axis for axis in self.axes if axis.key == "block_sizes"), key=lambda axis: axis.position)

    def unsupported_config_keys(self, config: Any) -> list[str]:
        """The keys of `config` (a Config or its dict) that Tessera accepts but ignores (Helion's
        name: the keys a caller may drop before compiling)."""
        values = config.to_dict() if isinstance(config, Config) else config
        return sorted(key for key in values if key in IGNORED_KEYS)

    @property
    def user_defined_tunables(self) -> dict[str, Any]:
        """The `hl.register_tunable` names of the call and their fragments (Helion's name)."""
        return dict(self.facts.user_tunables)

    def to_config(self, values: dict[str, Any], extra: Config | None = None) -> Config:
        """A Config from per-axis values (keys not in the space are taken from `extra`)."""
        config: dict[str, Any] = dict(extra or {})
        lists: dict[str, dict[int, Any]] = {}
        for axis in self.axes:
            if axis.position is None:
                config[axis.key] = values[axis.name]
            else:
                lists.setdefault(axis.key, {})[axis.position] = values[axis.name]
        for key, entries in lists.items():
            # a slot this call never reached (a branch not taken) keeps the default block size
            filler = default_block_size() if key == "block_sizes" else None
            config[key] = [entries.get(i, filler) for i in range(max(entries) + 1)]
        return Config(**config)

    def values_of(self, config: Config) -> dict[str, Any]:
        """Per-axis values of `config`, defaults for keys it leaves unset."""
        values: dict[str, Any] = {}
        for axis in self.axes:
            given = config.get(axis.key)
            if axis.position is not None and given is not None:
                given = given[axis.position] if axis.position < len(given) else None
            values[axis.name] = axis.default if given is None else given
        return values

    def normalize(self, config: Config) -> Config:
        """`config` with every axis filled in, so equal points compare (and hash) equal."""
        return self.to_config(self.values_of(config), extra=config)

    # -- validation ---------------------------------------------------------------------------

    def validate(self, config: Config) -> None:
        """Raise a ConfigError naming the first key whose value this kernel cannot use."""
        blocks = config.get("block_sizes")
        positions = [axis.position for axis in self.axes if axis.key == "block_sizes"]
        expected = max(positions) + 1 if positions else 0
        if blocks is not None and len(blocks) < expected:
            raise ConfigError(f"block_sizes has {len(blocks)} entries, but this kernel has {expected} "
                              "tunable tile dims", hint="give one block size per tunable tile dimension, "
                              "in the order the kernel's source meets them")
        for axis in self.axes:
            given = config.get(axis.key)
            if given is None:
                continue
            if axis.position is not None:
                if axis.position >= len(given):
                    raise ConfigError(f"{axis.key} has {len(given)} entries; this kernel needs one for "
                                      f"{axis.why} at position {axis.position}")
                given = given[axis.position]
            if not axis.allows(given):
                raise ConfigError(f"{axis.name}={given!r} does not fit this kernel ({axis.why})",
                                  hint=f"allowed values: {_describe(axis.choices)}")

    # -- moves for the search -----------------------------------------------------------------

    def neighbors(self, config: Config, step: int = 1) -> Iterator[Config]:
        """Configs one axis away (`step` positions up and down its ordered choices), in axis order."""
        for moves in self._moves_by_axis(config, step):
            yield from moves

    def neighbors_interleaved(self, config: Config) -> Iterator[Config]:
        """The one-step neighbours, each axis's first move before any axis's second: a search
        that takes only the first few still moves along every axis (in axis order, the last
        axes, e.g. `indexing`, were cut off for a matmul)."""
        rounds = self._moves_by_axis(config, 1)
        for number in range(max((len(moves) for moves in rounds), default=0)):
            yield from (moves[number] for moves in rounds if number < len(moves))

    def _moves_by_axis(self, config: Config, step: int) -> list[list[Config]]:
        values = self.values_of(config)
        moves = []
        for axis in self.axes:
            position = _position(axis, values[axis.name])
            if axis.ordered:
                targets = [p for p in (position - step, position + step) if 0 <= p < len(axis.choices)]
            else:
                targets = [p for p in range(len(axis.choices)) if p != position] if step == 1 else []
            moves.append([self.to_config({**values, axis.name: axis.choices[moved]}, extra=config) for moved in targets])
        return moves

    def random_config(self, rng: random.Random) -> Config:
        """A uniformly drawn point (block sizes biased to fit the register budget)."""
        for _ in range(20):
            values = {axis.name: axis.choices[rng.randrange(len(axis.choices))] for axis in self.axes}
            config = self.to_config(values)
            if self.fits_device(config):
                return config
        return config

    def mutate(self, config: Config, rng: random.Random, rate: float = 0.3) -> Config:
        """Each axis moves one step up or down with probability `rate` (at least one moves)."""
        values = self.values_of(config)
        moved_any = False
        for axis in self.axes:
            if rng.random() < rate and len(axis.choices) > 1:
                position = _position(axis, values[axis.name]) + rng.choice((-1, 1))
                values[axis.name] = axis.choices[min(max(position, 0), len(axis.choices) - 1)]
                moved_any = True
        if not moved_any and self.axes:
            axis = self.axes[rng.randrange(len(self.axes))]
            values[axis.name] = axis.choices[rng.randrange(len(axis.choices))]
        return self.to_config(values, extra=config)

    def crossover(self, first: Config, second: Config, rng: random.Random) -> Config:
        """Each axis value from one parent or the other."""
        a, b = self.values_of(first), self.values_of(second)
        return self.to_config({name: (a if rng.random() < 0.5 else b)[name] for name in a}, extra=first)

    def fits_device(self, config: Config) -> bool:
        """Whether `config` fits the device's memories: the register budget and what the backend
        checks beyond it (Triton: the shared memory of its pipelined loops)."""
        return self.fits_registers(config) and (self._fits_device is None or self._fits_device(config))

    def fits_registers(self, config: Config) -> bool:
        """Whether the tile a program holds (the product of its launch dims' blocks) fits the budget.

        Inner-loop blocks are not multiplied in: a dot's K block lives in operand tiles next to
        the accumulator, not in a product with it.
        """
        if self.max_tile_elements is None:
            return True
        blocks = config.get("block_sizes") or []
        # a call of several launches: each launch's programs hold only that launch's tiles
        groups = [{dim.index for dim in launch.tunables} for launch in self.facts.launches] or [None]
        roles = {dim.index: dim.role for dim in self.facts.tunables}
        for group in groups:
            product = 1
            for index, block in enumerate(blocks):
                if roles.get(index, "launch") == "launch" and (group is None or index in group):
                    product *= block
            if product > self.max_tile_elements:
                return False
        return True


def _position(axis: Axis, value: Any) -> int:
    """Index of `value` among the axis choices, or of the nearest choice for an off-grid value."""
    if value in axis.choices:
        return axis.choices.index(value)
    if isinstance(value, int) and all(isinstance(c, int) for c in axis.choices):
        return min(range(len(axis.choices)), key=lambda i: abs(axis.choices[i] - value))
    return axis.choices.index(axis.default) if axis.default in axis.choices else 0


def _describe(choices: tuple[Any, ...]) -> str:
    if len(choices) > 8:
        return f"{choices[0]!r} .. {choices[-1]!r} ({len(choices)} values: {', '.join(map(repr, choices[:4]))}, ...)"
    return ", ".join(map(repr, choices))


__all__ = ["Axis", "ConfigSpace", "KernelFacts", "next_power_of_two", "powers_of_two"]
