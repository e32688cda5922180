"""Eager mode: run the kernel function as Python, tile loops iterating real slices.

Eager is the specification every other mode is tested against. It uses the same block sizes a
compiled config would, so tail tiles and block-size-dependent results (`tile.id`, per-block
partial buffers) match compiled runs. Torch ops inside kernels are plain torch ops; products
are computed in fp32 (as a compiled `tl.dot` accumulates) so CPU fp16/bf16 and mixed-dtype
products work.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from tessera import exc
from tessera.config import Config
from tessera.frontend.block_slots import BlockSlotTable
from tessera.location import user_location
import tessera.language  # noqa: F401  (defines the primitives whose eager rules _OVERRIDES reads)
from tessera.ir.primitive import ALL_PRIMITIVES, Primitive
from tessera.ir.tile_range import TileRange, static_bounds
from tessera.ir.tunables import tunable_value
from tessera.language.tile import Tile
from tessera.ir import interpreter
from tessera.trace.block_sizes import choose_block_sizes


class EagerInterpreter:
    """Runs primitives by their eager rules and iterates tile loops as real tiles."""

    def __init__(self, slots: BlockSlotTable, config: Config, device: torch.device) -> None:
        self.slots = slots
        self.config = config
        self.device = device
        self.loop_depth = 0

    def process(self, primitive: Primitive, args: tuple, params: dict) -> Any:
        if primitive.device_only and self.loop_depth == 0:
            raise exc.NotInTileLoopError(
                interpreter.public_name(primitive.name), location=user_location(),
                hint="move it into a `for tile in hl.tile(...)` loop, or use the torch "
                     "equivalent on the host (torch.zeros, tensor indexing, ...)")
        assert primitive.eager_rule is not None, f"{primitive} has no eager rule"
        return primitive.eager_rule(*args, **params)

    def block_sizes(self, site: tuple[str, int, int] | None, count: int,
                    bounds: list[tuple[int, int | None]]) -> list[int]:
        return choose_block_sizes(self.slots, self.config, site, count, bounds)

    def tunable(self, name: str, fragment: Any) -> Any:
        """`hl.register_tunable`: the Config's value, else the fragment's default."""
        return tunable_value(self.config, name, fragment)

    def _resolved_blocks(self, tile_range: TileRange) -> list[int]:
        tunable = [i for i, block in enumerate(tile_range.block_sizes) if block is None]
        blocks = list(tile_range.block_sizes)
        if tunable:
            bounds = static_bounds(tile_range)
            chosen = self.block_sizes(tile_range.site, len(tunable), [bounds[i] for i in tunable])
            for i, block in zip(tunable, chosen):
                blocks[i] = block
        return [int(block) for block in blocks]

    def iterate_tiles(self, tile_range: TileRange) -> Iterator[Any]:
        blocks = self._resolved_blocks(tile_range)
        per_dim = []
        for begin, end, block in zip(tile_range.begins, tile_range.ends, blocks):
            begin, end = int(begin), int(end)
            count = max(-(-(end - begin) // block), 0)
            per_dim.append([Tile(b, min(b + block, end), block, i, count, self.device)
                            for i, b in enumerate(range(begin, end, block))])
        return self._loop(per_dim, tile_range.multi_dim)

    def iterate_grid(self, tile_range: TileRange) -> Iterator[Any]:
        per_dim = [list(range(int(b), int(e), int(s)))
                   for b, e, s in zip(tile_range.begins, tile_range.ends, tile_range.block_sizes)]
        return self._loop(per_dim, tile_range.multi_dim)

    def _loop(self, per_dim: list[list[Any]], multi_dim: bool) -> Iterator[Any]:
        # Row-major order: the last dimension varies fastest, like nested Python loops.
        self.loop_depth += 1
        try:
            for combo in itertools.product(*per_dim):
                yield combo if multi_dim else combo[0]
        finally:
            self.loop_depth -= 1


def _eager_overrides() -> dict[Callable[..., Any], Callable[..., Any]]:
    """torch callables whose meaning inside a kernel differs from torch's: those of primitives
    whose eager rule is not the torch function itself (tiles index like slices, with bounds
    checks; products accumulate in fp32 with PyTorch's dtype promotion)."""
    return {function: primitive.eager_rule for primitive in ALL_PRIMITIVES.values()
            for function in primitive.torch_functions
            if primitive.eager_rule is not None and primitive.eager_rule is not primitive.torch_functions[0]}


_OVERRIDES = _eager_overrides()


class EagerTorchMode(TorchFunctionMode):
    """Routes the torch calls listed in `_OVERRIDES` to their eager-mode meaning."""

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        override = _OVERRIDES.get(func)
        if override is not None:
            return override(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def run_eager(fn: Callable[..., Any], args: tuple, kwargs: dict, slots: BlockSlotTable,
              config: Config, device: torch.device) -> Any:
    """Call the kernel function in eager mode."""
    eager = EagerInterpreter(slots, config, device)
    with interpreter.activate(eager), EagerTorchMode():
        return fn(*args, **kwargs)
