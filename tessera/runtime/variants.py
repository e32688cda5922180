"""Compiled variants of a kernel's launches, the store that holds them, and remembered launches.

A `Variant` is one generated and imported Triton function with what it needs on every call (its
guard check, grid function, launcher). A kernel's `VariantStore` keeps them by launch key
(compiled.py builds keys and variants) with the hit/miss counts of `cache_info()`, and, per mode
and Config, the exact-facts memo of `RememberedLaunch`es (exact_facts.py).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import sympy
import torch

from tessera.runtime.exact_facts import Memo
from tessera.ir.tunables import TunableDim

if TYPE_CHECKING:
    from tessera.runtime.compiled import CompiledRunner


@dataclasses.dataclass
class Variant:
    """One compiled kernel: its guard check, argument builder, grid and Triton function."""

    guard: Callable[..., bool]   # of the kernel arguments (tensors ignored): True when every guard holds
    symbols: list[sympy.Symbol]
    function: Any
    grid: Callable[..., tuple[int, ...]]  # of the kernel arguments, like guard
    source: str
    path: str
    num_warps: int
    num_stages: int
    guard_text: list[str]
    tunables: list[TunableDim] = dataclasses.field(default_factory=list)
    locations: dict[int, Any] = dataclasses.field(default_factory=dict)  # generated line -> kernel line
    launch_location: Any = None
    launched: bool = False
    launch_index: int = 0   # which top-level tile loop (source order)
    launch_ndim: int = 1    # dims its programs tile
    loopable_row: int = 0   # length of the whole dimension reduction_loops may chunk (0: none can be)
    launcher: Any = None  # compiled mode: a TritonLauncher, so repeat launches skip JITFunction.run


@dataclasses.dataclass
class VariantStore:
    """Compiled variants by launch key, with hit/miss counts (one per kernel, one per tuning run)."""

    variants: dict[tuple, list[Variant]] = dataclasses.field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    # launch decisions by exact facts (exact_facts.py), one memo per (mode, Config key)
    memos: dict[tuple[str, str], Memo] = dataclasses.field(default_factory=dict)

    def count(self) -> int:
        return sum(len(v) for v in self.variants.values())

    def memo_for(self, mode: str, config_key: str) -> Memo:
        memo = self.memos.get((mode, config_key))
        if memo is None:
            memo = self.memos[(mode, config_key)] = Memo()
        return memo


class RememberedLaunch:
    """The keyed path's decision for one launch's exact facts: variant, grid, argument list.

    Holds no tensor: the argument list keeps a hole where each tensor goes, filled from the
    captured values of the launch being served (the k-th tensor argument is the k-th tensor
    value, as `launch_inputs` lays them out).
    """

    __slots__ = ("variant", "grid", "arguments", "tensor_slots", "binary")

    def __init__(self, variant: Variant, values: list[Any], arguments: list[Any], grid: tuple[int, ...]) -> None:
        self.variant = variant
        self.grid = grid
        template = list(arguments)
        tensor_positions = []
        for position, value in enumerate(arguments):
            if isinstance(value, torch.Tensor):
                tensor_positions.append(position)
                template[position] = None
        tensor_values = [index for index, value in enumerate(values) if isinstance(value, torch.Tensor)]
        assert len(tensor_values) == len(tensor_positions), "launch_inputs lays out one argument per tensor"
        self.tensor_slots = tuple(zip(tensor_positions, tensor_values))
        self.arguments = template
        self.binary: list[Any] = [None, None]  # [device, binary] once the launcher knows them

    def run(self, runner: "CompiledRunner", values: list[Any]) -> None:
        arguments = self.arguments.copy()
        for position, index in self.tensor_slots:
            arguments[position] = values[index]
        runner.run_variant(self.variant, arguments, self.grid, self.binary)
