"""Compiled and interpreted modes: each top-level tile loop becomes a cached compiled kernel.

A launch whose exact facts repeat an earlier one's repeats its decision (exact_facts.py). Else the
captured host values are turned into a key (dtypes, ranks, unit strides, int64 need, constants);
the variants under that key (variants.py) are tried in order and the first whose guards hold
runs. A miss asks the compiler (compiler.py) for a new variant: trace, passes, and the kernel's
backend lowers and loads it. This module only dispatches.
"""
from __future__ import annotations

import dataclasses
import operator
import sys
from typing import Any, Callable, Iterator

import torch

from tessera import backends, exc, settings
from tessera.backends.base import LoweringOptions
from tessera.compiler import (LaunchRequest, carried_row_elements, compile_launch, flat_values, held_whole_axes,
                              loop_score_tiles, to_ir, whole_row_length)
from tessera.config import Config
from tessera.frontend.block_slots import BlockSlotTable
from tessera.ir import interpreter
from tessera.ir.graph import KernelIR
from tessera.ir.split_reduction import split_reduction
from tessera.ir.tile_range import TileRange
from tessera.ir.tunables import TunableDim
from tessera.language.rng import draw_seeds
from tessera.location import user_location
from tessera.marking import STATIC_DIMS_ATTRIBUTE
from tessera.runtime.call_keys import config_key, device_type, launch_inputs, needs_int64, overlaps_itself
from tessera.runtime.eager import EagerInterpreter
from tessera.runtime.fake_calls import at_hint_sizes, fake_mode_active, range_at_hints
from tessera.runtime.exact_facts import launch_facts
from tessera.runtime.fast_checks import facts_check
from tessera.runtime.global_reads import GlobalReads
from tessera.runtime.plan import LaunchRecord
from tessera.runtime.scratch import scratch_arguments
from tessera.runtime.variants import RememberedLaunch, Variant, VariantStore, refuse_partial_overlaps
from tessera.runtime.written_tensors import note_writes, written_tensors


_CELL_CONTENTS = operator.attrgetter("cell_contents")


class LazySlotTable:
    """The kernel's block-slot table, copied on first use: a cache hit never reads it, and the
    copy (each call learns its own counts, see block_slots.py) costs about a microsecond."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self._table: BlockSlotTable | None = None

    def table(self) -> BlockSlotTable:
        if self._table is None:
            self._table = self._kernel.block_slots()
        return self._table

    def reset(self) -> None:
        """Drop the copy (and what it learned): the next use copies the kernel's table again."""
        self._table = None

    def first_slot(self, site: Any, count: int) -> int:
        return self.table().first_slot(site, count)

    def known_count(self) -> int:
        return self.table().known_count()

    def copy(self) -> BlockSlotTable:
        return self.table().copy()


class CompiledRunner:
    """Runs the launches of one kernel call in interpret or compiled mode.

    With a `recorder` list, launches are recorded as `LaunchRecord`s instead of run (see plan.py).
    `slots` defaults to a copy of the kernel's table made on first use. `check_indices`
    (TESSERA_CHECK_INDICES, read now when not given) is lowered into the variants it compiles,
    so it is part of their key and picks its own launch memo.
    """

    def __init__(self, kernel: Any, mode: str, config: Config, slots: BlockSlotTable | LazySlotTable | None = None,
                 store: VariantStore | None = None, recorder: list[LaunchRecord] | None = None,
                 check_indices: bool | None = None) -> None:
        self.kernel = kernel
        self.mode = mode
        self.config = config
        self.config_key = config_key(config)
        self.check_indices = bool(settings.get("check_indices")) if check_indices is None else check_indices
        self.stamp: tuple[Any, ...] | None = None  # the call stamp a kernel call last took this runner under
        self.static_shapes: bool = kernel.settings.static_shapes
        self.slots = slots if slots is not None else LazySlotTable(kernel)
        self.store = store if store is not None else kernel.store
        self.memo = self.store.memo_for(mode, self.config_key, self.check_indices)
        self.recorder = recorder
        self.fake = False  # this call's tensors are fake (fake_calls.py): launches trace but never run
        self.tunables: dict[int, TunableDim] = {}
        self.user_tunables: dict[str, Any] = {}  # hl.register_tunable name -> its fragment
        self.host: Any = None  # the host interpreter of a kernel's spare runner (see run_compiled)
        self.launch_dims: dict[int, int] = {}
        self.loopable_rows: dict[int, int] = {}
        self.whole_rows: dict[int, int] = {}
        self.whole_elements: dict[int, int] = {}  # per launch: elements of its whole dims (heuristics)
        self.launch_tunables: dict[int, tuple[int, ...]] = {}  # per launch: the block_sizes slots it uses
        self.launch_sources: dict[int, str] = {}  # per launch: its generated source (the op mix)
        self.carried_rows: dict[int, int] = {}  # per launch: whole-row elements its loops carry
        self.score_tiles: dict[int, int] = {}  # per launch: fresh products per inner-loop iteration
        self.split_reductions: dict[int, bool] = {}  # per launch: whether split_k applies (ir/split_reduction.py)
        self.unit_dims: dict[int, tuple[int, ...]] = {}  # per launch: grid dims of one index per program
        self.pipelined_loads: dict[int, tuple[Any, ...]] = {}  # per launch: its product loops' loaded tiles
        self.recording: list[Any] | None = None  # a recorded call's launches (run_compiled's `recording`)

    def launch(self, tile_range: TileRange, body: Callable[..., Any], launch_index: int = 0) -> None:
        """Run one top-level tile loop: the first variant under its key whose guards hold, else a new one.

        A launch with the exact facts of an earlier one repeats its decision (exact_facts.py);
        otherwise the keyed path reads each captured value once (`launch_inputs`), hashes the key,
        checks the guards and launches: no tracing, no sympy.
        """
        values = [*map(_CELL_CONTENTS, body.__closure__ or ())]  # no comprehension frame: on every launch
        facts = None
        if self.fake:  # fake tensors (torch.compile): traced at their hint sizes, never launched
            values = [at_hint_sizes(value) for value in values]
            tile_range = range_at_hints(tile_range)
        elif self.recorder is None:
            # id: a code object hashes its bytecode; the kernel holds its loop bodies, so ids stay unique
            memo, site = self.memo, id(body.__code__)
            entries = memo.recent.get(site) if memo.recent else None
            known = pointers = None
            if entries:  # the usual repeat: the most recent check answers (Memo.quick's first step, inlined)
                check, known, _ = entries[0]
                pointers = check(values, tile_range)
                if pointers is False:
                    found = memo.quick(site, values, tile_range)
                    known, pointers = found if found is not None else (None, None)
            if known is not None and known.variant.global_reads is not None and not known.variant.global_reads.hold():
                memo.forget_site(site)  # a module global changed: the facts path decides afresh
                known = None
            checked = known is not None  # a fast check also found the written tensors apart from the others
            if known is None and memo.wanted():
                facts = launch_facts(site, values, tile_range)
                if facts is not None:
                    known = memo.lookup(facts)
                    if known is not None and memo.check_wanted(facts):  # repeated: a fast check next time
                        check = facts_check(values, tile_range, known.disjoint_pairs(), known.device)
                        if check is not None:
                            memo.add_check(site, check, known, facts)
            # a variant whose body read a module global serves only while it keeps its value
            if known is not None and (known.variant.global_reads is None or known.variant.global_reads.hold()):
                self.store.hits += 1
                if self.recording is not None:
                    self.recording.append((known, values, body.__code__.co_freevars))
                return known.hit(self, values, body.__code__.co_freevars, checked, pointers)
        if self.recording is not None:
            self.recording.append(None)  # the keyed path: this call's launches are not all remembered
        values_key, range_key, arguments = launch_inputs(values, tile_range, self.static_shapes)
        key = (body.__code__.co_firstlineno, self.mode, self.config_key, self.check_indices, range_key, values_key)
        variants = self.store.variants.get(key)
        variant = next((v for v in variants if v.serves(arguments)), None) if variants is not None else None
        if variant is None:
            variant = self._compile(key, variants or [], values, tile_range, body, launch_index)
        else:
            self.store.hits += 1
        if variant.stored_values:
            _refuse_overlapping_outputs(self.kernel.fn.__name__, variant, values, body.__code__.co_freevars)
        if variant.accessed_values:
            refuse_partial_overlaps(variant, values, body.__code__.co_freevars)
        if variant.written_values and self.recorder is None:
            self._note_writes(variant, values, body)
        grid = variant.grid(*arguments)
        if variant.global_tensors:  # module-global tensors the body reads: trailing arguments
            self.run_variant(variant, arguments + variant.global_arguments(), grid)
            return  # not remembered: a remembered launch takes its tensors from the captured values
        self.run_variant(variant, arguments, grid)
        if facts is not None:  # ran: the next launch with these facts repeats this decision
            self.memo.remember(facts, RememberedLaunch(variant, values, arguments, grid, body.__code__.co_freevars))

    def _note_writes(self, variant: Variant, values: list[Any], body: Callable[..., Any]) -> None:
        tensors = written_tensors(variant.written_values, variant.written_direct, body.__code__.co_freevars, values)
        note_writes(self.kernel.fn.__name__, tensors, variant.compiled.location)

    def _compile(self, key: tuple, variants: list[Variant], values: list[Any], tile_range: TileRange,
                 body: Callable[..., Any], launch_index: int) -> Variant:
        """A miss: refuse past `max_variants`, else trace and compile a variant and log why."""
        self.store.misses += 1
        total = self.store.count()
        if total >= self.kernel.settings.max_variants:  # checked first: a refused variant is not compiled
            raise exc.RecompileLimitError(
                f"{self.kernel.fn.__name__} compiled {total} variants, its max_variants limit",
                location=user_location(),
                hint=f"this launch would compile because {_recompile_reason(variants) if variants else 'no variant has its cache key'}. Something its key holds changes "
                     "on every call: dtypes or layouts, static sizes (static_shapes / hl.specialize on changing "
                     "values), constants the tile loop captures (a bool, str, tuple or list whose contents "
                     "change, a new function object), or module globals it reads; pass changing numbers as "
                     "int/float arguments, or raise max_variants=")
        reads = GlobalReads.of(body, values)  # recorded before tracing reads them
        variant = Variant.of(compile_launch(self.request(values, tile_range, body, launch_index, reads),
                                            backends.get(self.kernel.settings.backend)), launch_index, reads,
                             body.__code__.co_freevars, values)
        if self.store is self.kernel.store:  # a real call, not a plan or a tuning run
            if settings.log_enabled("recompiles"):
                print(f"[tessera] compiling {self.kernel.fn.__name__} variant {total + 1} ({_recompile_reason(variants)})",
                      file=sys.stderr)
            if settings.get("print_code") or self.kernel.settings.print_output_code:
                print(f"# ---- {self.kernel.fn.__name__}: tile loop {launch_index}, variant {total + 1} "
                      f"({_recompile_reason(variants)}), {self.mode}, {self.config!r} ----\n"
                      f"{variant.compiled.lowered.source}", file=sys.stderr)
        self.store.variants.setdefault(key, variants).append(variant)
        return variant

    def request(self, values: list[Any], tile_range: TileRange, body: Callable[..., Any],
                launch_index: int, reads: GlobalReads | None | bool = True) -> LaunchRequest:
        """What the compiler needs for this launch (also `BoundKernel.to_ir`); `reads`: the
        globals the body reads, if already found (True: find them)."""
        settings_ = self.kernel.settings
        if reads is True:
            reads = GlobalReads.of(body, values)
        tensors = [(name, value) for name, value in flat_values(body.__code__.co_freevars, values)
                   if isinstance(value, torch.Tensor)]
        return LaunchRequest(
            kernel_name=self.kernel.fn.__name__, body=body, values=values, tile_range=tile_range,
            launch_index=launch_index, config=self.config, slots=self.slots, static_shapes=self.static_shapes,
            int64_indexing=any(needs_int64(tensor) for _, tensor in tensors),
            device=_launch_device(tensors, self.host),
            options=LoweringOptions(interpret=self.mode == "interpret", dot_precision=settings_.dot_precision,
                                    fp8_fast_accum=settings_.fp8_fast_accum, check_indices=self.check_indices),
            global_tensors=reads.tensors() if reads else ())

    def run_variant(self, variant: Variant, arguments: list[Any], grid: tuple[int, ...]) -> None:
        """Launch `variant` (or, planning, record the launch); the first launch compiles it."""
        if variant.compiled.ir.random_seeds:  # torch.rand_like & co.: fresh seeds from torch's generator
            arguments = [*arguments, *seed_arguments(variant.compiled.ir.random_seeds, arguments, self.host)]
        if variant.compiled.lowered.scratch:  # split-K's workspace: fresh buffers sized by this grid
            arguments = [*arguments, *scratch_arguments(variant.compiled.lowered.scratch, grid, arguments, self.host,
                                                        keep=self.recorder is None)]
        if self.recorder is not None:
            self._record(variant, arguments, grid)
            return
        if min(grid) <= 0 or self.fake:
            return
        variant.loaded.launch(grid, arguments)

    def _record(self, variant: Variant, arguments: list[Any], grid: tuple[int, ...]) -> None:
        self.launch_dims[variant.launch_index] = variant.launch_ndim
        self.loopable_rows[variant.launch_index] = variant.loopable_row
        self.whole_rows[variant.launch_index] = whole_row_length(variant.compiled.ir, held_whole_axes(variant.compiled.ir))
        self.whole_elements[variant.launch_index] = variant.compiled.whole_elements
        used = {*self.launch_tunables.get(variant.launch_index, ()), *(dim.index for dim in variant.tunables)}
        self.launch_tunables[variant.launch_index] = tuple(sorted(used))
        self.launch_sources[variant.launch_index] = variant.path
        self.carried_rows[variant.launch_index] = carried_row_elements(variant.compiled.ir)
        self.score_tiles[variant.launch_index] = loop_score_tiles(variant.compiled.ir)
        self.split_reductions[variant.launch_index] = split_reduction(variant.compiled.ir) is not None
        self.pipelined_loads[variant.launch_index] = variant.compiled.pipelined_loads
        self.unit_dims[variant.launch_index] = tuple(
            position for position, dim in enumerate(variant.compiled.ir.grid) if dim.step == 1)
        for dim in variant.tunables:  # only plans report tunables
            known = self.tunables.get(dim.index)
            if known is None:
                self.tunables[dim.index] = dim
                continue
            # the trace knows what an hl.register_block_size slot tiles ("register" is only the host's view)
            role = dim.role if known.role == "register" else known.role
            self.tunables[dim.index] = dataclasses.replace(
                known, extent=max(known.extent, dim.extent), min_block=max(known.min_block, dim.min_block), role=role,
                registered=known.registered or dim.registered)
        launch_options = variant.compiled.lowered.launch_options
        self.recorder.append(LaunchRecord(variant.path, variant.loaded.function_name, tuple(arguments), grid,
                                          int(launch_options.get("num_warps", 4)),
                                          int(launch_options.get("num_stages", 2))))


def seed_arguments(count: int, arguments: list[Any], host: Any) -> list[torch.Tensor]:
    """The trailing seed arguments of a launch with `count` implicitly seeded random calls: one
    draw of `count` seeds on the launch's device (as eager mode draws them, rng.LaunchSeeds)."""
    device = next((a.device for a in arguments if isinstance(a, torch.Tensor)),
                  host.device if host is not None else torch.device("cpu"))
    seeds = draw_seeds(count, device)
    return [seeds[i:i + 1] for i in range(count)]




def _refuse_overlapping_outputs(kernel_name: str, variant: Variant, values: list[Any], names: tuple[str, ...]) -> None:
    """Refuse a launch storing into a tensor whose elements share memory (overlap.py). On the
    keyed path only: a remembered launch repeats a decision that passed this check."""
    flat = flat_values(names, values)
    for position in variant.stored_values:
        name, tensor = flat[position]
        if isinstance(tensor, torch.Tensor) and overlaps_itself(tensor):
            raise exc.KernelArgumentError(
                f"{kernel_name}: this tile loop stores into {name!r}, of size {tuple(tensor.shape)} and strides "
                f"{tuple(tensor.stride())} whose elements share memory (e.g. made by expand()): "
                "the stores would race", location=variant.compiled.location or user_location(),
                hint="store into a tensor that owns its memory (torch.empty(...), or .clone() / .contiguous() "
                     "the expanded one first); torch refuses in-place writes into it too")


def _recompile_reason(variants: list[Variant]) -> str:
    """Why a launch with an existing key compiles again (for TESSERA_LOG=recompiles)."""
    if not variants:
        return "first compile"
    changed = variants[-1].global_reads.changed() if variants[-1].global_reads is not None else None
    if changed is not None:
        return f"module global {changed!r} changed since it was traced"
    return "guards failed: " + "; ".join(variants[-1].guard_text)


class IRRecorder(CompiledRunner):
    """Runs a call's host code and records each launch's IR (after the passes) instead of
    compiling or launching it: what `BoundKernel.to_ir` shows. Nothing is lowered or loaded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.irs: list[KernelIR] = []

    def launch(self, tile_range: TileRange, body: Callable[..., Any], launch_index: int = 0) -> None:
        values = [cell.cell_contents for cell in body.__closure__ or ()]
        self.irs.append(to_ir(self.request(values, tile_range, body, launch_index)))


def launch_helper(tile_range: Any, body: Callable[..., Any], launch_index: int) -> None:
    """What a rewritten top-level tile loop calls."""
    if not isinstance(tile_range, TileRange):
        raise exc.UnsupportedSyntaxError("a tile loop must iterate hl.tile(...) or hl.grid(...)", location=user_location())
    interpreter.active().runner.launch(tile_range, body, launch_index)  # the host interpreter of this call


class _HostInterpreter(EagerInterpreter):
    """Runs the host code between launches; notes `hl.register_block_size` slots as tunables."""

    def __init__(self, slots: BlockSlotTable | LazySlotTable, config: Config, device: torch.device,
                 runner: CompiledRunner) -> None:
        super().__init__(slots, config, device)  # type: ignore[arg-type]  (a LazySlotTable acts as one)
        self.runner = runner
        self.pinned: list[tuple[torch.Tensor, Any]] = []  # (tensor, its marks before this call)

    def pin_dims(self, tensor: torch.Tensor, dims: tuple[int, ...]) -> None:
        """`hl.specialize(x.size(d))` in the host code: x's dim d is a constant for this call's
        launches, as `tessera.mark_static` makes it (the launches' keys and traces read the mark);
        `unpin` gives the tensor its own marks back when the call ends."""
        before = getattr(tensor, STATIC_DIMS_ATTRIBUTE, None)
        if not set(dims) <= set(before or ()):
            self.pinned.append((tensor, before))
            setattr(tensor, STATIC_DIMS_ATTRIBUTE, tuple(sorted({*(before or ()), *dims})))

    def unpin(self) -> None:
        while self.pinned:
            tensor, before = self.pinned.pop()  # newest first: the first entry holds the user's own marks
            if before is None:
                delattr(tensor, STATIC_DIMS_ATTRIBUTE)
            else:
                setattr(tensor, STATIC_DIMS_ATTRIBUTE, before)

    def block_sizes(self, site: Any, count: int, bounds: list[tuple[int, int | None]]) -> list[int]:
        chosen = super().block_sizes(site, count, bounds)
        first = self.slots.first_slot(site, count)
        for offset, (low, high) in enumerate(bounds):
            minimum = 1 << max(int(low) - 1, 0).bit_length()
            self.runner.tunables.setdefault(first + offset, TunableDim(first + offset, int(high or low), minimum, "register",
                                                                       registered=True))
        return chosen

    def tunable(self, name: str, fragment: Any) -> Any:
        self.runner.user_tunables.setdefault(name, fragment)  # a plan reports it: the tuner searches it
        return super().tunable(name, fragment)

    def iterate_tiles(self, tile_range: TileRange) -> Iterator[Any]:
        # the kernel's own tile loops became launches; one still iterated on the host is in a
        # function the kernel calls, which the frontend never saw: its tiles would index host
        # tensors as plain ints (a silent wrong result), so it is refused
        raise exc.UnsupportedOperationError(
            "an hl.tile / hl.grid loop in a function the kernel calls: only the loops written in the "
            "kernel function's own body become kernels", location=tile_range.location,
            hint="move the loop into the @tessera.kernel function (a helper may hold the loop body), "
                 "or run the kernel with mode='eager'")

    iterate_grid = iterate_tiles


def run_compiled(kernel: Any, mode: str, args: tuple, kwargs: dict, config: Config, device: torch.device,
                 runner: CompiledRunner | None = None, stamp: tuple[Any, ...] | None = None,
                 recording: list[Any] | None = None) -> Any:
    """Run the kernel's host code; each top-level tile loop launches a cached Triton kernel.
    `stamp`: `settings.call_stamp()` as the caller took it before deciding `mode` and `config`
    (None: taken now). `recording`: a list that gets, per launch, (its remembered decision, its
    captured values, their names), or None for a launch that took the keyed path (host_replay.py)."""
    if runner is not None:  # a BoundKernel's planning or timing runner
        _check_device(mode, device)
        runner.fake = fake_mode_active()  # (a kernel's own call on fake tensors is a custom op: torch_library.py)
        return _run_host_code(kernel, _HostInterpreter(runner.slots, config, device, runner), args, kwargs)
    if stamp is None:
        stamp = settings.call_stamp()
    runner = take_runner(kernel, mode, config, device, stamp)
    runner.recording = recording
    try:
        return _run_host_code(kernel, runner.host, args, kwargs)
    finally:
        runner.recording = None
        give_back_runner(kernel, runner)


def take_runner(kernel: Any, mode: str, config: Config, device: torch.device, stamp: tuple[Any, ...]) -> CompiledRunner:
    """A runner for one call: the kernel's idle runner when it has the call's mode, Config and
    device and was taken under the same settings stamp (so its check_indices holds), else a
    spare one from kernel.spare_runners, else a new one (building one costs about 2 us). A
    runner is taken out while in use (list.pop and dict.pop are atomic), so a nested or
    concurrent call gets its own; `give_back_runner` returns it."""
    try:
        runner = kernel.idle_runners.pop()
    except IndexError:
        runner = None
    if (runner is not None and runner.config is config and runner.mode == mode and runner.host.device == device
            and (runner.stamp is stamp or runner.stamp == stamp)):
        _restart(runner)
    else:
        if runner is not None:
            _keep_spare(kernel, runner)
        runner = _spare_runner(kernel, mode, config, device, stamp)
        runner.stamp = stamp
    return runner


def give_back_runner(kernel: Any, runner: CompiledRunner) -> None:
    """End a call's use of a runner from `take_runner`: it becomes the kernel's idle one."""
    while kernel.idle_runners:  # a nested call's runner went back first
        try:
            _keep_spare(kernel, kernel.idle_runners.pop())
        except IndexError:
            break
    kernel.idle_runners.append(runner)


def _keep_spare(kernel: Any, runner: CompiledRunner) -> None:
    kernel.spare_runners[(runner.mode, runner.config_key, runner.host.device, runner.check_indices)] = runner


def _check_device(mode: str, device: torch.device) -> None:
    kind = device_type(device)
    if kind == "meta":
        raise exc.KernelArgumentError("the kernel's tensors are meta tensors, which have no data to compute on",
                                      location=user_location(), hint="pass tensors on the CPU or a GPU")
    if mode == "compiled" and kind != "cuda":
        raise exc.TesseraError(f"mode 'compiled' needs CUDA tensors, got tensors on {device}",
                               location=user_location(), hint="use mode='interpret' for CPU tensors")
    if mode == "interpret" and kind != "cpu":
        raise exc.TesseraError(f"mode 'interpret' runs on CPU tensors, got tensors on {device}",
                               location=user_location(), hint="use mode='compiled' for CUDA tensors")


def _spare_runner(kernel: Any, mode: str, config: Config, device: torch.device,
                  stamp: tuple[Any, ...]) -> CompiledRunner:
    """The kernel's spare runner for this mode, Config, device and TESSERA_CHECK_INDICES,
    restarted; else a new one."""
    _check_device(mode, device)
    check_indices = bool(settings.get_under(stamp, "check_indices"))
    runner = kernel.spare_runners.pop((mode, config_key(config), device, check_indices), None)
    if runner is None:
        runner = CompiledRunner(kernel, mode, config, check_indices=check_indices)
        runner.host = _HostInterpreter(runner.slots, config, device, runner)
    else:
        _restart(runner)
    return runner


def _restart(runner: CompiledRunner) -> None:
    """Make a spare runner and its host interpreter serve a new call: nothing of the last call stays."""
    if runner.store is not runner.kernel.store:  # kernel.reset() replaced it
        runner.store = runner.kernel.store
        runner.memo = runner.store.memo_for(runner.mode, runner.config_key, runner.check_indices)
    if runner.slots._table is not None:  # type: ignore[union-attr]  (spare runners make their own LazySlotTable)
        runner.slots.reset()  # type: ignore[union-attr]
    if runner.tunables:
        runner.tunables = {}
    if runner.user_tunables:
        runner.user_tunables = {}
    runner.host.loop_depth = 0


def _run_host_code(kernel: Any, host: _HostInterpreter, args: tuple, kwargs: dict) -> Any:
    """The kernel's host code, with `host` (which holds this call's runner) as the active interpreter."""
    function = (kernel._rewritten or kernel.rewritten()).function
    fn = kernel.fn
    if function.__defaults__ is not fn.__defaults__ or function.__kwdefaults__ is not fn.__kwdefaults__:
        # defaults given to the kernel's function after it was rewritten: the call uses them, as eager mode does
        function.__defaults__, function.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    interpreter.push(host)  # a plain push/pop: interpreter.activate builds a generator per call
    try:
        return function(*args, **kwargs)
    finally:
        interpreter.pop()
        if host.pinned:
            host.unpin()


def _launch_device(tensors: list[tuple[str, torch.Tensor]], host: Any) -> torch.device:
    """The device a launch runs on: that of its (named) tensors (`hl.zeros(device=x.device)` must
    name it). A tensor the tile loop reads on another device (host code's `torch.empty(n)` without
    `device=` beside CUDA inputs) is refused here: the GPU cannot read host memory (it was an
    internal error). 0-d tensors are left out of the check, as torch lets a CPU scalar join CUDA ones."""
    shaped = [(name, tensor) for name, tensor in tensors if tensor.dim() > 0]
    if not shaped:
        return tensors[0][1].device if tensors else host.device if host is not None else torch.device("cpu")
    first_name, device = shaped[0][0], shaped[0][1].device
    for name, tensor in shaped[1:]:
        if tensor.device != device:
            raise exc.DeviceMismatchError(
                f"the tile loop reads `{name}` on {tensor.device} and `{first_name}` on {device}",
                hint=f"make `{name}` on the kernel's device (e.g. torch.empty(..., device={first_name}.device))")
    return device
