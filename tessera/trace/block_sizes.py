"""Which block size a tile dimension gets: the Config's entry for its slot, else the default."""
from __future__ import annotations

from tessera import exc
from tessera.config import Config, default_block_size
from tessera.frontend.block_slots import BlockSlotTable, Site
from tessera.location import user_location


def choose_block_sizes(slots: BlockSlotTable, config: Config, site: Site | None, count: int,
                       bounds: list[tuple[int, int | None]]) -> list[int]:
    """Block sizes for `count` tunable dims declared at `site` (bounds: per dim (min, max))."""
    first = slots.first_slot(site, count)
    configured = config.get("block_sizes")
    if configured is None:
        return [default_block_size(low) for low, _ in bounds]
    if first + count > len(configured):
        raise exc.ConfigError(
            f"this tile loop uses block_sizes[{first}:{first + count}], but the Config has "
            f"only {len(configured)} block sizes", location=user_location(),
            hint=f"give one block size per tunable tile dimension "
                 f"(this kernel has at least {slots.known_count()})")
    return list(configured[first:first + count])
