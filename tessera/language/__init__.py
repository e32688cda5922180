"""What kernels call, as `hl`: the names and meaning of Helion's `helion.language`.

>>> import tessera.language as hl
"""
from __future__ import annotations

from tessera.language.constexpr import constexpr, specialize
from tessera.language.creation import arange, full, zeros
from tessera.language.math import dot
from tessera.language.memory import atomic_add, atomic_max, atomic_min, load, store
from tessera.language.tile import Tile, grid, register_block_size, register_tunable, static_range, tile

__all__ = [
    "Tile", "arange", "atomic_add", "atomic_max", "atomic_min", "constexpr", "dot", "full", "grid",
    "load", "register_block_size", "register_tunable", "specialize", "static_range", "store", "tile", "zeros",
]

# Op families that only define primitives for torch calls (no new `hl.` names).
from tessera.language import elementwise as _elementwise  # noqa: E402,F401
from tessera.language import reduce as _reduce  # noqa: E402,F401
from tessera.language import view as _view  # noqa: E402,F401
