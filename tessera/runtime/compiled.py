"""Compiled and interpreted modes: each top-level tile loop becomes a cached Triton kernel.

A launch whose exact facts repeat an earlier one's repeats its decision (exact_facts.py). Else the
captured host values are turned into a key (dtypes, ranks, unit strides, int64 need, constants);
the variants under that key (variants.py) are tried in order and the first whose guards hold
runs. A miss traces the loop body, generates Triton source, writes it to a file under the cache
directory and imports it (generated_modules.py).
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any, Callable

import sympy
import torch

from tessera import exc, settings
from tessera.backends.triton.program_ids import host_grid, mapping_for, program_count_exprs
from tessera.config import Config
from tessera.frontend.block_slots import BlockSlotTable
from tessera.location import user_location
from tessera.language.constexpr import SpecializedInt
from tessera.ir.tile_range import TileRange
from tessera.ir import interpreter
from tessera.runtime.call_keys import compiled_in, config_key, device_type, launch_inputs, needs_int64
from tessera.runtime.eager import EagerInterpreter
from tessera.runtime.exact_facts import launch_facts
from tessera.runtime.generated_modules import backend_error, load_generated
from tessera.runtime.marking import static_dims
from tessera.ir.tunables import TunableDim
from tessera.runtime.plan import LaunchRecord
from tessera.runtime.variants import RememberedLaunch, Variant, VariantStore
from tessera.trace.proxy import TensorProxy
from tessera.trace.symbols import SymbolTable
from tessera.trace.tracer import Tracer

_RESERVED = {"tl", "triton", "libdevice", "pid", "min", "max", "range", "float", "int"}


class LaunchBinding:
    """Proxies and symbols for one launch's captured values, and their values for this call.

    `argument_symbols` has one entry per kernel parameter: its symbol, or a placeholder for a
    tensor. Guards and grids are compiled as functions of them, so a launch passes its argument
    list straight through (`call_keys.launch_inputs`) without picking out the symbol values.
    """

    def __init__(self, names: tuple[str, ...], values: list[Any], tile_range: TileRange, static_shapes: bool) -> None:
        self.symbols = SymbolTable()
        self.parameters: list[str] = []
        self.argument_symbols: list[sympy.Symbol] = []
        self.proxies: list[Any] = []
        self.symbol_order: list[sympy.Symbol] = []
        for name, value in zip(names, values):
            self.proxies.append(self._bind(_safe_name(name), value, static_shapes))
        self.range = self._bind_range(tile_range, static_shapes)

    def _symbol(self, name: str, dtype: torch.dtype, value: Any) -> sympy.Symbol:
        symbol = self.symbols.new(name, dtype, value)
        self.symbol_order.append(symbol)
        self.parameters.append(name)
        self.argument_symbols.append(symbol)
        return symbol

    def _bind(self, name: str, value: Any, static_shapes: bool) -> Any:
        if isinstance(value, torch.Tensor):
            self.parameters.append(name)
            self.argument_symbols.append(sympy.Dummy(name))  # guards and grids ignore it
            pinned = set(range(value.dim())) if static_shapes else set(static_dims(value))
            sizes: list[Any] = []
            strides: list[Any] = []
            for d in range(value.dim()):
                sizes.append(sympy.Integer(value.size(d)) if d in pinned else self._symbol(f"{name}_size{d}", torch.int64, value.size(d)))
            for d in range(value.dim()):
                if d in pinned or value.stride(d) == 1:
                    strides.append(sympy.Integer(value.stride(d)))
                else:
                    strides.append(self._symbol(f"{name}_stride{d}", torch.int64, value.stride(d)))
            proxy = TensorProxy(name, value.dtype, sizes, strides, value.device)
            proxy.aligned16 = value.data_ptr() % 16 == 0  # type: ignore[attr-defined]  (TMA needs it; in the key)
            return proxy
        if isinstance(value, SpecializedInt) or (static_shapes and isinstance(value, int) and not isinstance(value, bool)):
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return self._symbol(name, torch.int64, value)
        if isinstance(value, float):
            return self._symbol(name, torch.float32, value)
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            raise exc.UnsupportedOperationError(
                f"a list of tensors ({name}) used inside a compiled tile loop", location=user_location(),
                hint="pass each tensor as its own argument, or run with mode='eager'")
        return value

    def _bind_range(self, tile_range: TileRange, static_shapes: bool) -> TileRange:
        def bound(kind: str, dim: int, value: Any) -> Any:
            if compiled_in(kind, value, static_shapes):
                return int(value)
            if isinstance(value, torch.Tensor):
                # a host tensor bound (`hl.tile(0, lengths.amax())`): int() reads it back, a device
                # sync (once per call, in call_keys.launch_inputs); it then is an ordinary runtime int
                value = int(value)
            return self._symbol(f"{kind}_{dim}", torch.int64, int(value))
        begins = [bound("begin", d, b) for d, b in enumerate(tile_range.begins)]
        ends = [bound("end", d, e) for d, e in enumerate(tile_range.ends)]
        return dataclasses.replace(tile_range, begins=begins, ends=ends)


def _safe_name(name: str) -> str:
    return f"{name}_" if name in _RESERVED or name.startswith(("idx_", "mask_", "offset_", "v")) else name


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
    `slots` defaults to a copy of the kernel's table made on first use.
    """

    def __init__(self, kernel: Any, mode: str, config: Config, slots: BlockSlotTable | LazySlotTable | None = None,
                 store: VariantStore | None = None, recorder: list[LaunchRecord] | None = None) -> None:
        self.kernel = kernel
        self.mode = mode
        self.config = config
        self.config_key = config_key(config)
        self.static_shapes: bool = kernel.settings.static_shapes
        self.slots = slots if slots is not None else LazySlotTable(kernel)
        self.store = store if store is not None else kernel.store
        self.memo = self.store.memo_for(mode, self.config_key)
        self.recorder = recorder
        self.tunables: dict[int, TunableDim] = {}
        self.host: Any = None  # the host interpreter of a kernel's spare runner (see run_compiled)
        self.launch_dims: dict[int, int] = {}
        self.loopable_rows: dict[int, int] = {}

    def launch(self, tile_range: TileRange, body: Callable[..., Any]) -> None:
        """Run one top-level tile loop: the first variant under its key whose guards hold, else a new one.

        A launch with the exact facts of an earlier one repeats its decision (exact_facts.py);
        otherwise the keyed path reads each captured value once (`launch_inputs`), hashes the key,
        checks the guards and launches: no tracing, no sympy.
        """
        values = [cell.cell_contents for cell in body.__closure__ or ()]
        # id: a code object hashes its bytecode; the kernel holds its loop bodies, so ids stay unique
        memo = self.memo
        facts = launch_facts(id(body.__code__), values, tile_range) if self.recorder is None and memo.wanted() else None
        if facts is not None:
            known = memo.lookup(facts)
            if known is not None:
                self.store.hits += 1
                return known.run(self, values)
        values_key, range_key, arguments = launch_inputs(values, tile_range, self.static_shapes)
        key = (body.__code__.co_firstlineno, self.mode, self.config_key, range_key, values_key)
        variants = self.store.variants.get(key)
        variant = next((v for v in variants if v.guard(*arguments)), None) if variants is not None else None
        if variant is None:
            variant = self._compile(key, variants or [], values, tile_range, body)
        else:
            self.store.hits += 1
        grid = variant.grid(*arguments)
        self.run_variant(variant, arguments, grid)
        if facts is not None:  # ran: the next launch with these facts repeats this decision
            self.memo.remember(facts, RememberedLaunch(variant, values, arguments, grid))

    def _compile(self, key: tuple, variants: list[Variant], values: list[Any], tile_range: TileRange,
                 body: Callable[..., Any]) -> Variant:
        """A miss: refuse past `max_variants`, else trace and compile a variant and log why."""
        self.store.misses += 1
        total = self.store.count()
        if total >= self.kernel.settings.max_variants:  # checked first: a refused variant is not compiled
            raise exc.RecompileLimitError(
                f"{self.kernel.fn.__name__} compiled {total} variants, its max_variants limit",
                location=user_location(),
                hint="shapes or dtypes change on every call; pass sizes as runtime values (avoid static_shapes "
                     "/ hl.specialize on changing values) or raise max_variants=")
        variant = self._build(body.__code__.co_freevars, values, tile_range, body, self.static_shapes,
                              _launch_index(body))
        if settings.log_enabled("recompiles") and self.store is self.kernel.store:  # not planning/tuning runs
            reason = "first compile" if not variants else "guards failed: " + "; ".join(variants[-1].guard_text)
            print(f"[tessera] compiling {self.kernel.fn.__name__} variant {total + 1} ({reason})", file=sys.stderr)
        self.store.variants.setdefault(key, variants).append(variant)
        return variant

    def run_variant(self, variant: Variant, arguments: list[Any], grid: tuple[int, ...],
                    remembered_binary: list[Any] | None = None) -> None:
        """Launch `variant` (or, planning, record the launch); the first launch compiles it.

        `remembered_binary` is a `RememberedLaunch`'s memory of the Triton binary its (fixed) int
        arguments select, for `TritonLauncher.launch_remembered`.
        """
        if self.recorder is not None:
            self.launch_dims[variant.launch_index] = variant.launch_ndim
            self.loopable_rows[variant.launch_index] = variant.loopable_row
            for dim in variant.tunables:  # only plans report tunables
                known = self.tunables.get(dim.index)
                if known is None:
                    self.tunables[dim.index] = dim
                    continue
                # the trace knows what an hl.register_block_size slot tiles ("register" is only the host's view)
                role = dim.role if known.role == "register" else known.role
                self.tunables[dim.index] = dataclasses.replace(
                    known, extent=max(known.extent, dim.extent), min_block=max(known.min_block, dim.min_block), role=role)
            self.recorder.append(LaunchRecord(variant.path, variant.function.__name__, tuple(arguments),
                                              grid, variant.num_warps, variant.num_stages))
            return
        if min(grid) <= 0:
            return
        if variant.launched and variant.launcher is not None:  # the hit path: no JITFunction.run
            if remembered_binary is None:
                variant.launcher.launch(grid, arguments)
            else:
                variant.launcher.launch_remembered(grid, arguments, remembered_binary)
            return
        if variant.launched and self.mode == "compiled":
            variant.function[grid](*arguments, num_warps=variant.num_warps, num_stages=variant.num_stages)
            return
        try:  # the first launch compiles; the interpreter runs Python: both can fail in our code
            if variant.launcher is not None:  # goes through JITFunction.run and keeps the binary
                variant.launcher.launch(grid, arguments)
            elif self.mode == "interpret":
                with _INTERPRETER_LOCK:  # Triton's interpreter keeps the running grid in globals
                    variant.function[grid](*arguments, num_warps=variant.num_warps, num_stages=variant.num_stages)
            else:
                variant.function[grid](*arguments, num_warps=variant.num_warps, num_stages=variant.num_stages)
        except exc.TesseraError:
            raise
        except Exception as error:
            raise backend_error(error, variant) from error
        variant.launched = True

    def _build(self, names: tuple[str, ...], values: list[Any], tile_range: TileRange, body: Callable[..., Any],
               static_shapes: bool, launch_index: int) -> Variant:
        binding = LaunchBinding(names, values, tile_range, static_shapes)
        tracer = Tracer(binding.symbols, self.slots, self.config)
        tracer.dot_precision = "ieee" if self.mode == "interpret" else self.kernel.settings.dot_precision
        tracer.interpret = self.mode == "interpret"
        tracer.int64_indexing = any(needs_int64(v) for v in values if isinstance(v, torch.Tensor))
        tracer.launch_index = launch_index  # picks this loop's entries of per-loop Config keys
        tracer.trace_launch(binding.range, body, binding.proxies)
        from tessera.backends.triton.codegen import generate_kernel
        name = f"{self.kernel.fn.__name__}_kernel"
        parameters = binding.parameters + []
        mapping = mapping_for(self.config, launch_index, len(tracer.grid_dims), user_location())
        source, locations = generate_kernel(name, parameters, tracer, tracer.grid_dims,
                                            [a for a in tracer.launch_axes if str(a.begin).startswith("offset_")], mapping)
        if settings.get("print_code") or settings.log_enabled("ir"):
            print(source, file=sys.stderr)
        function, path = load_generated(name, source, self.mode == "interpret")
        order = binding.argument_symbols
        sizes = host_grid(mapping, program_count_exprs(tracer.grid_dims), _programs_cap(self.mode))
        num_warps, num_stages = int(self.config.get("num_warps", 4)), int(self.config.get("num_stages", 2))
        launcher = None
        if self.mode == "compiled":
            from tessera.runtime.launcher import TritonLauncher
            # value_key already fixes each tensor's dtype and 16-byte alignment
            launcher = TritonLauncher(function, num_warps, num_stages, key_pointers=False)
        return Variant(
            guard=binding.symbols.guard_checker(order), symbols=binding.symbol_order, function=function,
            grid=_grid_function(order, sizes), source=source, path=path,
            num_warps=num_warps, num_stages=num_stages,
            guard_text=[reason for _, reason in binding.symbols.guards],
            tunables=tracer.tunable_dims(), locations=locations, launch_location=user_location(),
            launcher=launcher, launch_index=launch_index, launch_ndim=len(tracer.grid_dims),
            loopable_row=tracer.loopable_row_length())


_INTERPRETER_LOCK = threading.Lock()  # one interpreted launch at a time per process

_AS_INT = sympy.Function("_tessera_as_int")  # printed as a call of int() by _grid_function


def _grid_function(parameters: list[sympy.Symbol], sizes: list[Any]) -> Callable[..., tuple[int, ...]]:
    """The grid as one generated function of the kernel arguments, each size an int of at least 0.

    The int() and max() are part of the generated expression rather than a wrapper around it:
    the grid is computed on every call.
    """
    clamped = tuple(sympy.Max(0, _AS_INT(sympy.sympify(size))) for size in sizes)
    return sympy.lambdify(parameters, clamped, modules=[{"_tessera_as_int": int}, "math"])


def _launch_index(body: Callable[..., Any]) -> int:
    """Which top-level tile loop (in source order) a rewritten body is: `_tessera_body_<n>`."""
    suffix = body.__name__.rsplit("_", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _programs_cap(mode: str) -> int:
    """Programs of a persistent kernel: one per SM (a few when interpreting)."""
    if mode == "interpret" or not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def launch_helper(tile_range: Any, body: Callable[..., Any]) -> None:
    """What a rewritten top-level tile loop calls."""
    if not isinstance(tile_range, TileRange):
        raise exc.UnsupportedSyntaxError("a tile loop must iterate hl.tile(...) or hl.grid(...)", location=user_location())
    interpreter.active().runner.launch(tile_range, body)  # the host interpreter of this call


def device_loop_helper(tile_range: Any, body: Callable[..., Any], carried: tuple) -> tuple:
    """What a rewritten inner tile loop calls (only ever while tracing)."""
    from tessera.trace.tracer import current_tracer
    return current_tracer().device_loop(tile_range, body, carried)


def device_if_helper(condition: Any, then_body: Callable[..., tuple], else_body: Callable[..., tuple],
                     values: tuple) -> tuple:
    """What a rewritten `if` inside a tile loop calls: a host condition picks a branch in
    Python; a device (tile) condition becomes a predicated device branch."""
    from tessera.trace.proxy import TileValue
    from tessera.trace.tracer import current_tracer
    if isinstance(condition, TileValue):
        return current_tracer().device_if(condition, then_body, else_body, values)
    if isinstance(condition, sympy.Basic) and not isinstance(condition, (sympy.logic.boolalg.BooleanAtom, sympy.Number)):
        # a condition on runtime sizes (`if x.size(1) > 64:`): decided for this call, and the
        # variant is reused only for calls that decide it the same way
        tracer = current_tracer()
        symbols = tracer.symbols
        truth = condition if isinstance(condition, (sympy.Rel, sympy.logic.boolalg.Boolean)) else sympy.Ne(condition, 0)
        if truth.free_symbols - set(symbols.values):  # loaded values, loop variables: known only on the device
            return tracer.device_if(tracer.symbolic_value(truth), then_body, else_body, values)
        taken = bool(symbols.evaluate(truth))
        symbols.guard(truth if taken else sympy.Not(truth), f"host condition {condition} is {taken}")
        return then_body(*values) if taken else else_body(*values)
    return then_body(*values) if condition else else_body(*values)


class _HostInterpreter(EagerInterpreter):
    """Runs the host code between launches; notes `hl.register_block_size` slots as tunables."""

    def __init__(self, slots: BlockSlotTable | LazySlotTable, config: Config, device: torch.device,
                 runner: CompiledRunner) -> None:
        super().__init__(slots, config, device)  # type: ignore[arg-type]  (a LazySlotTable acts as one)
        self.runner = runner

    def block_sizes(self, site: Any, count: int, bounds: list[tuple[int, int | None]]) -> list[int]:
        chosen = super().block_sizes(site, count, bounds)
        first = self.slots.first_slot(site, count)
        for offset, (low, high) in enumerate(bounds):
            minimum = 1 << max(int(low) - 1, 0).bit_length()
            self.runner.tunables.setdefault(first + offset, TunableDim(first + offset, int(high or low), minimum, "register"))
        return chosen


def run_compiled(kernel: Any, mode: str, args: tuple, kwargs: dict, config: Config, device: torch.device,
                 runner: CompiledRunner | None = None) -> Any:
    """Run the kernel's host code; each top-level tile loop launches a cached Triton kernel."""
    if runner is not None:  # a BoundKernel's planning or timing runner
        _check_device(mode, device)
        return _run_host_code(kernel, _HostInterpreter(runner.slots, config, device, runner), args, kwargs)
    # A call takes the kernel's idle runner when it has the call's mode, Config and device, else
    # a spare one from kernel.spare_runners, else a new one (building one costs about 2 us). A
    # runner is taken out while in use (list.pop and dict.pop are atomic), so a nested or
    # concurrent call gets its own.
    try:
        runner = kernel.idle_runners.pop()
    except IndexError:
        runner = None
    if runner is not None and runner.config is config and runner.mode == mode and runner.host.device == device:
        _restart(runner)
    else:
        if runner is not None:
            _keep_spare(kernel, runner)
        runner = _spare_runner(kernel, mode, config, device)
    try:
        return _run_host_code(kernel, runner.host, args, kwargs)
    finally:
        while kernel.idle_runners:  # a nested call's runner went back first
            try:
                _keep_spare(kernel, kernel.idle_runners.pop())
            except IndexError:
                break
        kernel.idle_runners.append(runner)


def _keep_spare(kernel: Any, runner: CompiledRunner) -> None:
    kernel.spare_runners[(runner.mode, runner.config_key, runner.host.device)] = runner


def _check_device(mode: str, device: torch.device) -> None:
    kind = device_type(device)
    if mode == "compiled" and kind != "cuda":
        raise exc.TesseraError(f"mode 'compiled' needs CUDA tensors, got tensors on {device}",
                               location=user_location(), hint="use mode='interpret' for CPU tensors")
    if mode == "interpret" and kind != "cpu":
        raise exc.TesseraError(f"mode 'interpret' runs on CPU tensors, got tensors on {device}",
                               location=user_location(), hint="use mode='compiled' for CUDA tensors")


def _spare_runner(kernel: Any, mode: str, config: Config, device: torch.device) -> CompiledRunner:
    """The kernel's spare runner for this mode, Config and device, restarted; else a new one."""
    _check_device(mode, device)
    runner = kernel.spare_runners.pop((mode, config_key(config), device), None)
    if runner is None:
        runner = CompiledRunner(kernel, mode, config)
        runner.host = _HostInterpreter(runner.slots, config, device, runner)
    else:
        _restart(runner)
    return runner


def _restart(runner: CompiledRunner) -> None:
    """Make a spare runner and its host interpreter serve a new call: nothing of the last call stays."""
    if runner.store is not runner.kernel.store:  # kernel.reset() replaced it
        runner.store = runner.kernel.store
        runner.memo = runner.store.memo_for(runner.mode, runner.config_key)
    runner.slots.reset()  # type: ignore[union-attr]  (spare runners make their own LazySlotTable)
    if runner.tunables:
        runner.tunables = {}
    runner.host.loop_depth = 0


def _run_host_code(kernel: Any, host: _HostInterpreter, args: tuple, kwargs: dict) -> Any:
    """The kernel's host code, with `host` (which holds this call's runner) as the active interpreter."""
    interpreter.push(host)  # a plain push/pop: interpreter.activate builds a generator per call
    try:
        return (kernel._rewritten or kernel.rewritten()).function(*args, **kwargs)
    finally:
        interpreter.pop()
