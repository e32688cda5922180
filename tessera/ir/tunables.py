"""What a trace learned about each tunable block size, for the autotuner and the backends' heuristics."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from tessera.exc import ConfigError


@dataclasses.dataclass(frozen=True)
class TunableDim:
    """One entry of `Config.block_sizes`, with what the trace learned about it.

    `extent` is this call's size of the dimension the block tiles (the largest one seen when a
    slot tiles several loops); `min_block` is the smallest legal block (16 for a dimension that
    feeds `tl.dot`); `role` is 'launch' (tiles program ids), 'loop' (an inner device loop) or
    'reduction' (a reduced dimension) or 'split' (a tile of an inner loop whose iterations the
    backend may spread over several programs: `split_programs`, ir/loop_split.py).
    """

    index: int
    extent: int
    min_block: int
    role: str
    registered: bool = False  # an hl.register_block_size entry (its role: what the loops it blocks are)


@dataclasses.dataclass(frozen=True)
class LoadedTile:
    """The tile one load of a software-pipelined loop brings in per iteration: `itemsize` bytes
    times `fixed` elements (its dims of fixed block: whole dims, fixed block sizes) times the
    blocks of the block_sizes entries `slots`. Triton keeps `num_stages` copies of it in shared
    memory (backends/triton/heuristics.py sizes Configs by it).

    >>> LoadedTile(2, 64, (0,)).size_under([128])
    16384
    """

    itemsize: int
    fixed: int
    slots: tuple[int, ...]

    def size_under(self, blocks: "list[int] | tuple[int, ...]") -> int:
        """Bytes of the tile under these block_sizes (a slot the Config lacks counts 1)."""
        size = self.itemsize * self.fixed
        for slot in self.slots:
            size *= int(blocks[slot]) if slot < len(blocks) and blocks[slot] else 1
        return size


# -- hl.register_tunable's value ranges (Helion's config fragments, same names) -----------------

@dataclasses.dataclass(frozen=True)
class ConfigFragment:
    """The values one `hl.register_tunable(name, fragment)` may take: a Config key of its own,
    searched by the autotuner; eager mode and an untuned call use `default`."""

    def choices(self) -> tuple:
        raise NotImplementedError

    def default(self) -> object:
        return self.choices()[0]

    def ordered(self) -> bool:
        """Whether neighbouring choices are near in effect (the search steps between them)."""
        return True

    def allows(self, value: object) -> bool:
        return value in self.choices()


@dataclasses.dataclass(frozen=True)
class IntegerFragment(ConfigFragment):
    """An int in [low, high]. >>> IntegerFragment(1, 3).choices()
    (1, 2, 3)"""

    low: int
    high: int
    default_val: int | None = None

    def choices(self) -> tuple:
        return tuple(range(self.low, self.high + 1))

    def default(self) -> object:
        return self.default_val if self.default_val is not None else self.low


@dataclasses.dataclass(frozen=True)
class PowerOfTwoFragment(IntegerFragment):
    """A power of two in [low, high]. >>> PowerOfTwoFragment(16, 64).choices()
    (16, 32, 64)"""

    def choices(self) -> tuple:
        return tuple(1 << bit for bit in range(self.high.bit_length()) if self.low <= 1 << bit <= self.high)


@dataclasses.dataclass(frozen=True)
class EnumFragment(ConfigFragment):
    """One of `choices` (the first is the default). >>> EnumFragment(choices=("a", "b")).default()
    'a'"""

    choices_: tuple = ()

    def __init__(self, choices: tuple = ()) -> None:
        object.__setattr__(self, "choices_", tuple(choices))

    def choices(self) -> tuple:
        return self.choices_

    def ordered(self) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class BooleanFragment(ConfigFragment):
    """False or True (False is the default)."""

    def choices(self) -> tuple:
        return (False, True)

    def ordered(self) -> bool:
        return False


def tunable_value(config: Mapping[str, object], name: str, fragment: ConfigFragment) -> object:
    """The value `hl.register_tunable(name, fragment)` takes under `config`: its entry, else the
    fragment's default; a ConfigError when the entry is outside the fragment."""
    if name not in config:
        return fragment.default()
    value = config[name]
    if not fragment.allows(value):
        raise ConfigError(f"Config key {name!r}={value!r} is not one of the values hl.register_tunable gave it",
                          hint=f"use one of {', '.join(map(repr, fragment.choices()))}")
    return value
