"""Compiled variants of a kernel's launches, the store that holds them, and remembered launches.

A `Variant` is one compiled launch (the backend's loaded kernel) with what it needs on every call
(its guard check and grid function). A kernel's `VariantStore` keeps them by launch key
(compiled.py builds keys and variants) with the hit/miss counts of `cache_info()`, and, per mode
and Config, the exact-facts memo of `RememberedLaunch`es (exact_facts.py).
"""
from __future__ import annotations

import dataclasses
import math
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch

from tessera.backends.base import LoadedKernel
from tessera.compiler import CompiledLaunch, captured_cells, flat_values, holds_tensors
from tessera.ir.aliasing import overlap_error, partial_overlap
from tessera.ir.graph import Op
from tessera.ir.tunables import TunableDim
from tessera.runtime.exact_facts import Memo, opened_closures
from tessera.runtime.global_reads import GlobalReads
from tessera.runtime.scratch import kept_scratch
from tessera.runtime.written_tensors import note_writes, written_tensors
from tessera.location import user_location

if TYPE_CHECKING:
    from tessera.runtime.compiled import CompiledRunner


@dataclasses.dataclass
class Variant:
    """One compiled launch, with what the hot path needs at hand: its guard check, grid function
    and loaded kernel (`compiled` has the rest: IR, generated source, tunables)."""

    guard: Callable[..., bool]   # of the kernel arguments (tensors ignored): True when every guard holds
    grid: Callable[..., tuple[int, ...]]  # of the kernel arguments, like guard
    loaded: LoadedKernel
    compiled: CompiledLaunch
    launch_index: int = 0   # which top-level tile loop (source order)
    # the module globals its body read when traced (None: none); it serves a launch only while
    # they keep those values (global_reads.py)
    global_reads: GlobalReads | None = None
    # positions (in `flat_values` of the launch's captured values) of the tensors it stores into, not atomically:
    # each must not overlap itself (overlap.py)
    stored_values: tuple[int, ...] = ()
    # positions (as stored_values) of every tensor it writes, atomics included (written_tensors.py);
    # `written_direct`: no captured value was a closure, so they index the captured values themselves
    written_values: tuple[int, ...] = ()
    written_direct: bool = True
    # positions (as stored_values) of every tensor it loads or writes: a written one must not
    # partially overlap another (ir/aliasing.py)
    accessed_values: tuple[int, ...] = ()
    # weak references to the module-global tensors its body reads, its trailing arguments (it
    # serves only while global_reads hold, so while they are those tensors)
    global_tensors: tuple[Any, ...] = ()

    @classmethod
    def of(cls, compiled: CompiledLaunch, launch_index: int, global_reads: GlobalReads | None = None,
           names: tuple[str, ...] = (), values: list[Any] = ()) -> Variant:
        """`names`, `values`: the loop body's free variables and captured values."""
        stores = [node for node in compiled.ir.nodes() if node.op is Op.STORE]
        stored = {node.params["tensor"].name for node in stores if not node.params.get("atomic")}
        written = {node.params["tensor"].name for node in stores}
        flat = flat_values(names, list(values))
        positions = tuple(i for i, (name, _) in enumerate(flat) if name in stored)  # indexes flat_values(names, values)
        written_positions = tuple(i for i, (name, value) in enumerate(flat)
                                  if name in written and isinstance(value, torch.Tensor))
        accessed = written | {node.params["tensor"].name for node in compiled.ir.nodes() if node.op is Op.LOAD}
        accessed_positions = tuple(i for i, (name, value) in enumerate(flat)
                                   if name in accessed and isinstance(value, torch.Tensor))
        global_tensors = tuple(weakref.ref(tensor) for _, tensor in global_reads.tensors()) if global_reads else ()
        return cls(compiled.guard, compiled.grid, compiled.loaded, compiled, launch_index, global_reads, positions,
                   written_positions, all(captured_cells(v) is None and not holds_tensors(v) for v in values),
                   accessed_values=accessed_positions if written_positions and len(accessed_positions) > 1 else (),
                   global_tensors=global_tensors)

    def global_arguments(self) -> list[torch.Tensor]:
        return [reference() for reference in self.global_tensors]

    def serves(self, arguments: list[Any]) -> bool:
        """Whether this variant may run a launch with these kernel arguments: its guards hold
        and the globals its body read are unchanged."""
        return self.guard(*arguments) and (self.global_reads is None or self.global_reads.hold())

    @property
    def path(self) -> str:
        return self.loaded.path

    @property
    def guard_text(self) -> tuple[str, ...]:
        return self.compiled.guard_text

    @property
    def tunables(self) -> tuple[TunableDim, ...]:
        return self.compiled.tunables

    @property
    def launch_ndim(self) -> int:
        """Dims its programs tile."""
        return len(self.compiled.ir.grid)

    @property
    def loopable_row(self) -> int:
        """Length of the whole dimension reduction_loops may chunk (0: none can be)."""
        return self.compiled.loopable_row


@dataclasses.dataclass
class VariantStore:
    """Compiled variants by launch key, with hit/miss counts (one per kernel, one per tuning run)."""

    variants: dict[tuple, list[Variant]] = dataclasses.field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    # launch decisions by exact facts (exact_facts.py), one memo per (mode, Config key, check_indices)
    memos: dict[tuple[str, str, bool], Memo] = dataclasses.field(default_factory=dict)

    def count(self) -> int:
        return sum(len(v) for v in self.variants.values())

    def memo_for(self, mode: str, config_key: str, check_indices: bool) -> Memo:
        memo = self.memos.get((mode, config_key, check_indices))
        if memo is None:
            memo = self.memos[(mode, config_key, check_indices)] = Memo()
        return memo


class RememberedLaunch:
    """The keyed path's decision for one launch's exact facts: variant, grid, argument list.

    Holds no tensor: the argument list keeps a hole where each tensor goes, filled from the
    captured values of the launch being served (the k-th tensor argument is the k-th tensor
    value, as `launch_inputs` lays them out).

    Its first run asks the backend for a direct launch (`LoadedKernel.direct_launch`): the
    exact facts fix every argument but the tensors, so a function with the grid and those
    arguments built in can launch from the captured values alone. Until then, and whenever the
    direct launch declines (hooks installed, another device current), the variant's own
    `launch` runs.

    The checks a hit still makes (written tensors must not partially overlap another one the
    launch accesses; autograd must see the writes) read tensors at positions fixed by the facts,
    so those positions are found once here (`_Positions`): a hit reads each tensor directly.
    """

    __slots__ = ("variant", "grid", "arguments", "tensor_slots", "byte_slots", "direct", "asked", "opens_closures",
                 "positions", "scratch", "device", "value_count", "pointer_direct", "location")

    def __init__(self, variant: Variant, values: list[Any], arguments: list[Any], grid: tuple[int, ...],
                 names: tuple[str, ...] = ()) -> None:
        self.variant = variant
        self.grid = grid
        self.location = variant.compiled.location  # where a refused write is reported
        # a captured closure's tensors are arguments too: slots index the values with closures opened
        self.opens_closures = any(captured_cells(value) is not None for value in values)
        opened = opened_closures(values) if self.opens_closures else values
        self.positions = _Positions.of(variant, names, values, opened)
        values = opened
        template = list(arguments)
        tensor_positions = []
        for position, value in enumerate(arguments):
            if isinstance(value, torch.Tensor):
                tensor_positions.append(position)
                template[position] = None
        tensor_values = [index for index, value in enumerate(values) if isinstance(value, torch.Tensor)]
        assert len(tensor_values) == len(tensor_positions), "launch_inputs lays out one argument per tensor"
        self.tensor_slots = tuple(zip(tensor_positions, tensor_values))
        # packed fp4 tensors go to the kernel as their bytes, as launch_inputs passes them (the
        # exact facts hold dtypes, so the same slots are fp4 on every launch served)
        self.byte_slots = tuple((position, index) for position, index in self.tensor_slots
                                if values[index].dtype is torch.float4_e2m1fn_x2)
        self.arguments = template
        # split-K's scratch buffers: a direct launch takes the kept ones (scratch.kept_scratch), after the values
        self.scratch = variant.compiled.lowered.scratch
        self.device = values[tensor_values[0]].device if tensor_values else None
        self.value_count = len(values)
        self.direct: Callable[[list[Any]], bool] | None = None
        self.pointer_direct: Callable[[Any], bool] | None = None
        self.asked = False  # whether the backend was asked for a direct launch

    def hit(self, runner: "CompiledRunner", values: list[Any], names: tuple[str, ...], disjoint: bool = False,
            pointers: Any = None) -> None:
        """Serve a launch whose exact facts are this decision's: the checks the facts cannot
        settle (aliasing, autograd), then the launch. `disjoint`: a fast check built with
        `disjoint_pairs` passed, so the written tensors' byte ranges meet no other's;
        `pointers`: its answer, the data pointers of the tensors it checked (or True)."""
        opened = opened_closures(values) if self.opens_closures else values
        positions = self.positions
        if positions is None:  # positions not found once: the general checks
            variant = self.variant
            if variant.accessed_values:
                refuse_partial_overlaps(variant, values, names)
            if variant.written_values:
                note_writes(runner.kernel.fn.__name__,
                            written_tensors(variant.written_values, variant.written_direct, names, values),
                            variant.compiled.location)
        else:
            if positions.pairs and not disjoint and positions.may_overlap(opened):
                refuse_partial_overlaps(self.variant, values, names)  # the exact test, for this rare case
            if positions.written:
                note_writes(runner.kernel.fn.__name__, [*map(opened.__getitem__, positions.written)], self.location)
        self.run(runner, opened, pointers if type(pointers) is tuple else None)

    def disjoint_pairs(self) -> list[tuple[int, tuple[int, int], int, tuple[int, int]]]:
        """What a fast check of this decision's launches verifies so that `hit` need not
        (`fast_checks.facts_check`'s `disjoint`); empty where `hit` checks them itself."""
        positions = self.positions
        if positions is None:
            return []
        return [(positions.accessed[a], positions.extents[a], positions.accessed[b], positions.extents[b])
                for a, b in positions.pairs]

    def run(self, runner: "CompiledRunner", values: list[Any], pointers: tuple[int, ...] | None = None) -> None:
        """Launch with `values`, the captured values with closures opened; `pointers`: the data
        pointers of their tensors, in order, checked to lie where the remembered ones did."""
        if pointers is not None and self.pointer_direct is not None:
            if self.pointer_direct(pointers) if not self.scratch else self._directly(self.pointer_direct, pointers):
                return
        if self.direct is not None and self._directly(self.direct, values):
            return
        arguments = self.arguments.copy()
        for position, index in self.tensor_slots:
            arguments[position] = values[index]
        for position, index in self.byte_slots:
            arguments[position] = values[index].view(torch.uint8)
        runner.run_variant(self.variant, arguments, self.grid)
        if not self.asked:
            self.asked = True
            self.direct = self._direct_launch(runner, arguments)
            if self.direct is not None:  # the same launch, given the tensors' data pointers
                self.pointer_direct = self._direct_launch(runner, arguments, pointers=True)

    def _directly(self, direct: Callable[[Any], bool], values: Any) -> bool:
        """Launch through a direct launch function; False if it declined (nothing launched)."""
        if not self.scratch:
            return direct(values)
        kept = kept_scratch(self.scratch, math.prod(self.grid), self.device)
        return kept is not None and direct([*values, *kept])

    def _direct_launch(self, runner: "CompiledRunner", arguments: list[Any],
                       pointers: bool = False) -> Callable[[list[Any]], bool] | None:
        """The backend's direct launch of this decision, asked for once, when the decision is
        first repeated (a decision used once costs nothing); None where there is none."""
        offer = getattr(self.variant.loaded, "direct_launch", None)
        if offer is None or self.byte_slots or runner.recorder is not None or min(self.grid) <= 0:
            return None
        if self.variant.compiled.ir.random_seeds:
            return None  # torch.rand_like & co. take fresh seeds each launch
        slots, count = self.tensor_slots, self.value_count
        if pointers:  # the k-th tensor value's pointer is the k-th pointer
            if any(isinstance(value, torch.Tensor) and value.device != self.device for value in arguments):
                return None  # fast checks give pointers of tensors on self.device only
            rank = {index: k for k, index in enumerate(sorted(index for _, index in slots))}
            slots, count = tuple((position, rank[index]) for position, index in slots), len(rank)
        if self.scratch:  # the kept buffers follow the arguments, and the values (see run)
            kept = kept_scratch(self.scratch, math.prod(self.grid), self.device) if self.device is not None else None
            if kept is None:
                return None  # fresh buffers on every launch (CPU, a CUDA graph being captured)
            slots = (*slots, *((len(arguments) + i, count + i) for i in range(len(kept))))
            arguments = [*arguments, *kept]
        return offer(self.grid, arguments, slots, pointers=True) if pointers else offer(self.grid, arguments, slots)


@dataclasses.dataclass(frozen=True)
class _Positions:
    """Where, in a launch's captured values with closures opened, are the tensors a variant
    writes and accesses, and the byte extents the facts fix for the accessed ones.

    `written`: indices of the written tensors. `accessed`: indices of every accessed tensor,
    with `extents` (lowest, past-highest byte offset from the data pointer); `pairs`: (written,
    other) pairs of positions in `accessed` that must not partially overlap. Two tensors whose
    byte ranges are disjoint cannot overlap, which settles almost every launch with one data
    pointer read per tensor; any other pair goes to the exact test.
    """

    written: tuple[int, ...]
    accessed: tuple[int, ...]
    extents: tuple[tuple[int, int], ...]
    pairs: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, variant: Variant, names: tuple[str, ...], values: list[Any], opened: list[Any]) -> _Positions | None:
        """None where a position cannot be told apart (one tensor object at two places)."""
        if not variant.written_values:
            return cls((), (), (), ())
        if variant.accessed_values and not set(variant.written_values) <= set(variant.accessed_values):
            return None
        flat = flat_values(names, values)
        slots = {}
        for position in {*variant.written_values, *variant.accessed_values}:
            found = [index for index, value in enumerate(opened) if value is flat[position][1]]
            if len(found) != 1:
                return None
            slots[position] = found[0]
        accessed = tuple(slots[position] for position in variant.accessed_values)
        pairs = tuple((variant.accessed_values.index(w), b) for w in variant.written_values if variant.accessed_values
                      for b in range(len(accessed)) if variant.accessed_values[b] != w)
        return cls(tuple(slots[position] for position in variant.written_values), accessed,
                   tuple(_byte_extent(opened[index]) for index in accessed), pairs)

    def may_overlap(self, opened: list[Any]) -> bool:
        """Whether some (written, other) pair's byte ranges meet."""
        pointers = [opened[index].data_ptr() for index in self.accessed]
        extents = self.extents
        for a, b in self.pairs:
            (a_low, a_high), (b_low, b_high) = extents[a], extents[b]
            if pointers[a] + a_low < pointers[b] + b_high and pointers[b] + b_low < pointers[a] + a_high:
                return True
        return False


def _byte_extent(tensor: torch.Tensor) -> tuple[int, int]:
    """(lowest, past-highest) byte offset a tensor's elements lie at from its data pointer."""
    if tensor.numel() == 0:
        return (0, 0)
    low = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()) if stride < 0)
    high = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()) if stride > 0)
    size = tensor.element_size()
    return (low * size, (high + 1) * size)


def refuse_partial_overlaps(variant: Variant, values: list[Any], names: tuple[str, ...]) -> None:
    """Refuse a launch writing into a tensor that shares memory with another one it accesses
    without being the same view (ir/aliasing.py): programs would race, as torch refuses."""
    flat = flat_values(names, values) if not variant.written_direct else None
    def value(position: int) -> tuple[str, Any]:
        return flat[position] if flat is not None else (names[position], values[position])
    for written in variant.written_values:
        name, target = value(written)
        storage = target.untyped_storage().data_ptr()  # runs on every launch: this settles most pairs
        for other in variant.accessed_values:
            other_name, tensor = value(other)
            if other != written and tensor.untyped_storage().data_ptr() == storage and partial_overlap(target, tensor):
                raise overlap_error(name, other_name, variant.compiled.location or user_location())
