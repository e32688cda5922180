"""The tuning space of one kernel call: which values each Config key may take, derived from the IR.

A plan (`BoundKernel.plan`) says what the trace learned: one `TunableDim` per block size (its
extent, smallest legal block, role), the launches and their generated sources. From that the space
builds one `Axis` per tunable choice, each an ordered tuple of values, so the search can step to
a neighbour (one axis, one step) or draw a random point.

>>> space = ConfigSpace.from_facts(KernelFacts(tunables=(TunableDim(0, 4096, 1, "launch"),)))
>>> space.axis("block_sizes[0]").choices[:3]
(1, 2, 4)

Keys the Triton backend does not honour yet stay out of the space: widen `ENABLED_KEYS`
(the one place) when the backend learns a key.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, Iterable, Iterator

import torch

from tessera.config import default_block_size, INDEXING_STRATEGIES, PID_TYPES, Config, _is_power_of_two
from tessera.exc import ConfigError
from tessera.ir.tunables import TunableDim
from tessera.runtime.plan import KernelPlan

ENABLED_KEYS: frozenset[str] = frozenset({"block_sizes", "num_warps", "num_stages", "loop_orders", "l2_grouping",
                                          "pid_type", "indexing", "reduction_loops"})
"""Config keys the backend honours; the others are generated only once listed here."""

ENABLED_PID_TYPES: tuple[str, ...] = ("flat", "xyz", "persistent_blocked", "persistent_interleaved")
"""Program-id mappings the backend implements."""

NUM_WARPS_CHOICES = (1, 2, 4, 8, 16)
NUM_STAGES_CHOICES = (1, 2, 3, 4, 5)
L2_GROUPING_CHOICES = (1, 2, 4, 8, 16, 32, 64)
MAX_BLOCK = 1 << 14          # a larger block per dim never pays off and costs compile time
MAX_BLOCK_ELEMENTS = 1 << 16  # per launch: elements a program holds in registers at once
MIN_REDUCTION_CHUNK = 32


@dataclasses.dataclass(frozen=True)
class KernelFacts:
    """What the IR of one call tells the space and the heuristics.

    `launch_dims`: per top-level tile loop, how many dims it tiles (loop_orders and l2_grouping
    apply to loops of two or more). `reduction_extents`: per whole-row reduction, its length
    (reduction_loops has one entry per reduction). `uses_dot` / `uses_reduction`: the op mix.
    """

    tunables: tuple[TunableDim, ...]
    launch_dims: tuple[int, ...] = ()
    reduction_extents: tuple[int, ...] = ()
    dtypes: tuple[torch.dtype, ...] = ()
    uses_dot: bool = False
    uses_reduction: bool = False
    largest_numel: int = 0
    on_gpu: bool = False

    @classmethod
    def from_plan(cls, plan: KernelPlan) -> KernelFacts:
        """Read the facts off a plan (and the generated sources it names, for the op mix)."""
        sources = "\n".join(_read(launch.source_path) for launch in plan.launches)
        tensors = plan.tensors()
        tunables = tuple(plan.tunables)
        launch_dims = tuple(getattr(plan, "launch_dims", ()) or ())
        if not launch_dims and len(plan.launches) == 1:
            # until plans list each launch's dims: a single launch tiles its tunable launch dims
            # (a fixed-size dim is missed, which only leaves a loop order untried)
            launch_dims = (sum(1 for t in tunables if t.role == "launch"),)
        return cls(
            tunables=tunables,
            launch_dims=launch_dims,
            reduction_extents=tuple(getattr(plan, "reduction_extents", ()) or ()),
            dtypes=tuple(dict.fromkeys(t.dtype for t in tensors)),
            uses_dot="tl.dot(" in sources or any(t.min_block >= 16 for t in tunables),
            uses_reduction=any(f"tl.{name}(" in sources for name in ("sum", "max", "min", "reduce", "argmax")),
            largest_numel=max((t.numel() for t in tensors), default=0),
            on_gpu=any(t.is_cuda for t in tensors))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


@dataclasses.dataclass(frozen=True)
class Axis:
    """One tunable choice: a Config key (and list position), its ordered values and its default."""

    key: str
    position: int | None
    choices: tuple[Any, ...]
    default: Any
    why: str  # said in a validation error, e.g. "this dim feeds a dot product"
    ordered: bool = True  # neighbours are adjacent choices; unordered axes reach every other choice

    @property
    def name(self) -> str:
        return self.key if self.position is None else f"{self.key}[{self.position}]"


def _powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << bit for bit in range(max(low, 1).bit_length() - 1, high.bit_length()) if (1 << bit) >= low)


def _next_power_of_two(value: int) -> int:
    return 1 << max(int(value) - 1, 0).bit_length()


def _block_axis(dim: TunableDim) -> Axis:
    low = _next_power_of_two(max(dim.min_block, 1))
    high = max(low, min(_next_power_of_two(max(dim.extent, 1)), MAX_BLOCK))
    why = (f"a {dim.role} dim of extent {dim.extent}"
           + (f" whose smallest legal block is {dim.min_block}" if dim.min_block > 1 else ""))
    return Axis("block_sizes", dim.index, _powers_of_two(low, high), low, why)


def _reduction_axis(position: int, extent: int) -> Axis:
    """Chunks from small to large, then None (one block: the largest "chunk" of all), so that
    the default None's neighbour is the largest chunk, not the smallest (a 32-wide chunk of a
    4096 row runs about 10x slower than one block: a wasted candidate)."""
    chunks = _powers_of_two(MIN_REDUCTION_CHUNK, min(_next_power_of_two(extent) // 2, MAX_BLOCK))
    return Axis("reduction_loops", position, chunks + (None,), None,
                f"a whole-row reduction of length {extent}")


class ConfigSpace:
    """Every axis of one kernel call's tuning space, with conversion to and from Configs."""

    def __init__(self, axes: list[Axis], facts: KernelFacts) -> None:
        self.axes = axes
        self.facts = facts
        self._by_name = {axis.name: axis for axis in axes}

    @classmethod
    def from_plan(cls, plan: KernelPlan, enabled: Iterable[str] = ENABLED_KEYS) -> ConfigSpace:
        return cls.from_facts(KernelFacts.from_plan(plan), enabled)

    @classmethod
    def from_facts(cls, facts: KernelFacts, enabled: Iterable[str] = ENABLED_KEYS) -> ConfigSpace:
        """Build the axes the facts imply, for the keys in `enabled`."""
        enabled = frozenset(enabled)
        axes: list[Axis] = []
        if "block_sizes" in enabled:
            axes += [_block_axis(dim) for dim in sorted(facts.tunables, key=lambda d: d.index)]
        if "reduction_loops" in enabled:
            axes += [_reduction_axis(i, extent) for i, extent in enumerate(facts.reduction_extents)]
        if "num_warps" in enabled:
            axes.append(Axis("num_warps", None, NUM_WARPS_CHOICES, 4, "warps per program"))
        if "num_stages" in enabled:
            axes.append(Axis("num_stages", None, NUM_STAGES_CHOICES, 2, "pipelining stages"))
        multi_dim = [i for i, dims in enumerate(facts.launch_dims) if dims >= 2]
        if "loop_orders" in enabled:
            for i in multi_dim:
                orders = tuple(list(p) for p in itertools.permutations(range(facts.launch_dims[i])))
                axes.append(Axis("loop_orders", i, orders, list(range(facts.launch_dims[i])),
                                 f"tile loop {i} with {facts.launch_dims[i]} dims", ordered=False))
        if "l2_grouping" in enabled and multi_dim:
            axes.append(Axis("l2_grouping", None, L2_GROUPING_CHOICES, 1, "program-id grouping"))
        if "pid_type" in enabled:
            axes.append(Axis("pid_type", None, ENABLED_PID_TYPES, "flat", "program-id mapping", ordered=False))
        if "indexing" in enabled:
            axes.append(Axis("indexing", None, INDEXING_STRATEGIES, "pointer", "memory access strategy",
                             ordered=False))
        return cls(axes, facts)

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
            if not _allowed(axis, given):
                raise ConfigError(f"{axis.name}={given!r} does not fit this kernel ({axis.why})",
                                  hint=f"allowed values: {_describe(axis.choices)}")

    # -- moves for the search -----------------------------------------------------------------

    def neighbors(self, config: Config, step: int = 1) -> Iterator[Config]:
        """Configs one axis away (`step` positions up and down its ordered choices), in axis order."""
        values = self.values_of(config)
        for axis in self.axes:
            position = _position(axis, values[axis.name])
            if axis.ordered:
                targets = [p for p in (position - step, position + step) if 0 <= p < len(axis.choices)]
            else:
                targets = [p for p in range(len(axis.choices)) if p != position] if step == 1 else []
            for moved in targets:
                yield self.to_config({**values, axis.name: axis.choices[moved]}, extra=config)

    def random_config(self, rng: random.Random) -> Config:
        """A uniformly drawn point (block sizes biased to fit the register budget)."""
        for _ in range(20):
            values = {axis.name: axis.choices[rng.randrange(len(axis.choices))] for axis in self.axes}
            config = self.to_config(values)
            if self.fits_registers(config):
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

    def fits_registers(self, config: Config) -> bool:
        """Whether the tile a program holds (the product of its launch dims' blocks) fits the budget.

        Inner-loop blocks are not multiplied in: a dot's K block lives in operand tiles next to
        the accumulator, not in a product with it.
        """
        blocks = config.get("block_sizes") or []
        roles = {dim.index: dim.role for dim in self.facts.tunables}
        product = 1
        for index, block in enumerate(blocks):
            if roles.get(index, "launch") == "launch":
                product *= block
        return product <= MAX_BLOCK_ELEMENTS


def _allowed(axis: Axis, value: Any) -> bool:
    if axis.key == "block_sizes":
        # any power of two from the smallest legal block up to the cap: extents vary between calls
        return isinstance(value, int) and _is_power_of_two(value) and axis.choices[0] <= value <= MAX_BLOCK
    if axis.key == "num_warps":
        return value in (1, 2, 4, 8, 16, 32)
    if axis.key == "num_stages":
        return isinstance(value, int) and 1 <= value <= 8
    if axis.key == "reduction_loops":
        return value is None or (isinstance(value, int) and _is_power_of_two(value))
    if axis.key == "l2_grouping":
        return isinstance(value, int) and _is_power_of_two(value)
    if axis.key == "pid_type":
        return value in ENABLED_PID_TYPES
    if axis.key == "indexing":
        return all(v in axis.choices for v in ([value] if isinstance(value, str) else value))
    return value in axis.choices


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


__all__ = ["ENABLED_KEYS", "ENABLED_PID_TYPES", "Axis", "ConfigSpace", "KernelFacts", "PID_TYPES"]
