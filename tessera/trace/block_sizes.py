"""Which block size a tile dimension gets: the Config's entry for its slot, else the default."""
from __future__ import annotations

from typing import Protocol

from tessera import exc
from tessera.config import Config, default_block_size
from tessera.location import user_location

Site = tuple[str, int, int]  # (file, line, col) of a tile call


class BlockSlots(Protocol):
    """Which `Config.block_sizes` entries each tile call uses (frontend/block_slots.py scans them)."""

    def first_slot(self, site: Site | None, count: int) -> int: ...
    def known_count(self) -> int: ...


def choose_block_sizes(slots: BlockSlots, config: Config, site: Site | None, count: int,
                       bounds: list[tuple[int, int | None]]) -> list[int]:
    """Block sizes for `count` tunable dims declared at `site` (bounds: per dim (min, max))."""
    first = slots.first_slot(site, count)
    configured = config.get("block_sizes")
    if configured is None:
        return [default_block_size(low) for low, _ in bounds]
    if first + count > len(configured) and config.fills_missing_blocks:
        configured = list(configured)
        while len(configured) < first + count:
            position = len(configured) - first
            configured.append(default_block_size(bounds[position][0] if position >= 0 else 1))
    if first + count > len(configured):
        raise exc.InvalidConfig(
            f"the Config's block_sizes list is too short: expected {first + count} block sizes, got "
            f"{len(configured)} (this tile loop uses block_sizes[{first}:{first + count}]); every tunable "
            f"hl.tile dimension takes one entry", location=user_location(),
            hint=f"give one block size per tunable tile dimension "
                 f"(this kernel has at least {slots.known_count()})")
    return list(configured[first:first + count])
