"""Compiled and interpreted modes: each top-level tile loop becomes a cached Triton kernel.

At a launch the captured host values are turned into a key (dtypes, ranks, unit strides,
int64 need, constants); the variants under that key are tried in order and the first whose
guards hold runs. A miss traces the loop body, generates Triton source, writes it to a file
under the cache directory and imports it (Triton reads kernel source from files).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import math
import os
import sys
import traceback
from typing import Any, Callable

import sympy
import torch

from tessera import exc, settings
from tessera.backends.triton.program_ids import host_grid, mapping_for, program_count_exprs
from tessera.config import Config
from tessera.frontend.block_slots import BlockSlotTable
from tessera.frontend.location import user_location
from tessera.language.constexpr import SpecializedInt
from tessera.language.tile import TileRange
from tessera.runtime import eager_state, interpreter
from tessera.runtime.eager import EagerInterpreter
from tessera.runtime.marking import static_dims
from tessera.runtime.plan import LaunchRecord, TunableDim
from tessera.trace.proxy import TensorProxy
from tessera.trace.symbols import SymbolTable
from tessera.trace.tracer import Tracer

_INT32_LIMIT = 2 ** 31 - 1
_RESERVED = {"tl", "triton", "libdevice", "pid", "min", "max", "range", "float", "int"}


@dataclasses.dataclass
class Variant:
    """One compiled kernel: its guard check, argument builder, grid and Triton function."""

    guard: Callable[..., bool]
    symbols: list[sympy.Symbol]
    function: Any
    grid: Callable[..., int]
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


def _needs_int64(tensor: torch.Tensor) -> bool:
    numel = tensor.numel()
    if numel == 0:
        return False
    if numel > _INT32_LIMIT:
        return True
    reach = 0
    for size, stride in zip(tensor.shape, tensor.stride()):
        reach += (size - 1) * abs(stride)
    return reach > _INT32_LIMIT


def value_key(value: Any, static_shapes: bool) -> Any:
    """The part of the cache key one captured value contributes (see README, 'Cache key')."""
    if isinstance(value, torch.Tensor):
        # shape and stride are read once as tuples: each value.size(d) is a call into torch
        strides = value.stride()
        pinned = tuple(range(len(strides))) if static_shapes else static_dims(value)
        return ("tensor", value.dtype, len(strides), tuple([s == 1 for s in strides]), _needs_int64(value),
                tuple([(d, value.shape[d], strides[d]) for d in pinned]) if pinned else (),
                value.data_ptr() & 15 == 0)
    if isinstance(value, SpecializedInt):
        return ("const", int(value))
    if isinstance(value, bool) or value is None or isinstance(value, (str, torch.dtype)):
        return ("const", value)
    if isinstance(value, int):
        return ("int", static_shapes and value)
    if isinstance(value, float):
        return ("float",)
    try:
        hash(value)
        return ("const", value)
    except TypeError:
        return ("object", id(value))


class LaunchBinding:
    """Proxies and symbols for one launch's captured values, and their values for this call."""

    def __init__(self, names: tuple[str, ...], values: list[Any], tile_range: TileRange, static_shapes: bool) -> None:
        self.symbols = SymbolTable()
        self.parameters: list[str] = []
        self.arguments: list[Any] = []   # per parameter, a getter of its value from `values`
        self.proxies: list[Any] = []
        self.symbol_order: list[sympy.Symbol] = []
        for name, value in zip(names, values):
            self.proxies.append(self._bind(_safe_name(name), value, static_shapes))
        self.range = self._bind_range(tile_range, static_shapes)

    def _symbol(self, name: str, dtype: torch.dtype, value: Any) -> sympy.Symbol:
        symbol = self.symbols.new(name, dtype, value)
        self.symbol_order.append(symbol)
        self.parameters.append(name)
        return symbol

    def _bind(self, name: str, value: Any, static_shapes: bool) -> Any:
        if isinstance(value, torch.Tensor):
            self.parameters.append(name)
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
            if _compiled_in(kind, value, static_shapes):
                return int(value)
            if isinstance(value, torch.Tensor):
                # a host tensor bound (`hl.tile(0, lengths.amax())`): int() reads it back, a device
                # sync (once per call, in _argument_values); it then is an ordinary runtime int
                value = int(value)
            return self._symbol(f"{kind}_{dim}", torch.int64, int(value))
        begins = [bound("begin", d, b) for d, b in enumerate(tile_range.begins)]
        ends = [bound("end", d, e) for d, e in enumerate(tile_range.ends)]
        return dataclasses.replace(tile_range, begins=begins, ends=ends)


def _safe_name(name: str) -> str:
    return f"{name}_" if name in _RESERVED or name.startswith(("idx_", "mask_", "offset_", "v")) else name


def _argument_values(names: tuple[str, ...], values: list[Any], tile_range: TileRange, static_shapes: bool) -> list[Any]:
    """Kernel arguments in parameter order, and the symbol values, built without tracing."""
    result: list[Any] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            result.append(value)
            if static_shapes:
                continue
            pinned = static_dims(value)
            sizes, strides = value.shape, value.stride()
            if not pinned:
                result.extend(sizes)
                result.extend([s for s in strides if s != 1])
                continue
            result.extend([s for d, s in enumerate(sizes) if d not in pinned])
            result.extend([s for d, s in enumerate(strides) if d not in pinned and s != 1])
        elif isinstance(value, bool) or isinstance(value, SpecializedInt):
            continue
        elif isinstance(value, int):
            if not static_shapes:
                result.append(value)
        elif isinstance(value, float):
            result.append(value)
    result.extend(int(b) for b in tile_range.begins if not _compiled_in("begin", b, static_shapes))
    # int() of a tensor-valued bound (`hl.tile(0, lengths.amax())`) syncs with the device: the grid
    # size must be known on the host to launch
    result.extend(int(e) for e in tile_range.ends if not _compiled_in("end", e, static_shapes))
    return result


def _compiled_in(kind: str, value: Any, static_shapes: bool) -> bool:
    """Whether a loop bound is a constant of the generated code (else a kernel argument)."""
    if isinstance(value, SpecializedInt) or (static_shapes and isinstance(value, int)):
        return True
    return kind == "begin" and isinstance(value, int) and value == 0


def _range_key(tile_range: TileRange, static_shapes: bool) -> tuple:
    def part(kind: str, value: Any) -> Any:
        return int(value) if _compiled_in(kind, value, static_shapes) else None
    return (tile_range.is_grid, tile_range.multi_dim, tuple(tile_range.block_sizes),
            tuple(part("begin", b) for b in tile_range.begins), tuple(part("end", e) for e in tile_range.ends),
            tile_range.site)


@dataclasses.dataclass
class VariantStore:
    """Compiled variants by launch key, with hit/miss counts (one per kernel, one per tuning run)."""

    variants: dict[tuple, list[Variant]] = dataclasses.field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def count(self) -> int:
        return sum(len(v) for v in self.variants.values())


class CompiledRunner:
    """Runs the launches of one kernel call in interpret or compiled mode.

    With a `recorder` list, launches are recorded as `LaunchRecord`s instead of run (see plan.py).
    """

    def __init__(self, kernel: Any, mode: str, config: Config, slots: BlockSlotTable,
                 store: VariantStore | None = None, recorder: list[LaunchRecord] | None = None) -> None:
        self.kernel = kernel
        self.mode = mode
        self.config = config
        self.slots = slots
        self.store = store if store is not None else kernel.store
        self.recorder = recorder
        self.tunables: dict[int, TunableDim] = {}
        self.launch_dims: dict[int, int] = {}
        self.loopable_rows: dict[int, int] = {}

    def launch(self, tile_range: TileRange, body: Callable[..., Any]) -> None:
        names = body.__code__.co_freevars
        values = [cell.cell_contents for cell in (body.__closure__ or ())]
        static_shapes = self.kernel.settings.static_shapes
        key = (body.__code__.co_firstlineno, self.mode, repr(self.config), _range_key(tile_range, static_shapes),
               tuple(value_key(v, static_shapes) for v in values))
        arguments = _argument_values(names, values, tile_range, static_shapes)
        variants = self.store.variants.setdefault(key, [])
        symbol_values = [a for a in arguments if not isinstance(a, torch.Tensor)]
        for variant in variants:
            if variant.guard(*symbol_values):
                self.store.hits += 1
                return self._run(variant, arguments, symbol_values)
        self.store.misses += 1
        variant = self._build(names, values, tile_range, body, static_shapes, _launch_index(body))
        total = self.store.count()
        if total >= self.kernel.settings.max_variants:
            raise exc.RecompileLimitError(
                f"{self.kernel.fn.__name__} compiled {total} variants, its max_variants limit",
                location=user_location(),
                hint="shapes or dtypes change on every call; pass sizes as runtime values (avoid static_shapes "
                     "/ hl.specialize on changing values) or raise max_variants=")
        if settings.log_enabled("recompiles") and self.store is self.kernel.store:  # not planning/tuning runs
            reason = "first compile" if not variants else "guards failed: " + "; ".join(variants[-1].guard_text)
            print(f"[tessera] compiling {self.kernel.fn.__name__} variant {total + 1} ({reason})", file=sys.stderr)
        variants.append(variant)
        self._run(variant, arguments, symbol_values)

    def _run(self, variant: Variant, arguments: list[Any], symbol_values: list[Any]) -> None:
        grid = variant.grid(*symbol_values)
        if self.recorder is not None:
            self.launch_dims[variant.launch_index] = variant.launch_ndim
            self.loopable_rows[variant.launch_index] = variant.loopable_row
            for dim in variant.tunables:  # only plans report tunables
                known = self.tunables.get(dim.index)
                if known is None or known.extent < dim.extent:
                    self.tunables[dim.index] = dim
            self.recorder.append(LaunchRecord(variant.path, variant.function.__name__, tuple(arguments),
                                              grid, variant.num_warps, variant.num_stages))
            return
        if min(grid) <= 0:
            return
        if variant.launched and variant.launcher is not None:
            variant.launcher.launch(grid, arguments)  # the hit path: no JITFunction.run
            return
        if variant.launched and self.mode == "compiled":
            variant.function[grid](*arguments, num_warps=variant.num_warps, num_stages=variant.num_stages)
            return
        try:  # the first launch compiles; the interpreter runs Python: both can fail in our code
            if variant.launcher is not None:  # goes through JITFunction.run and keeps the binary
                variant.launcher.launch(grid, arguments)
            else:
                variant.function[grid](*arguments, num_warps=variant.num_warps, num_stages=variant.num_stages)
        except exc.TesseraError:
            raise
        except Exception as error:
            raise _backend_error(error, variant) from error
        variant.launched = True

    def _build(self, names: tuple[str, ...], values: list[Any], tile_range: TileRange, body: Callable[..., Any],
               static_shapes: bool, launch_index: int) -> Variant:
        binding = LaunchBinding(names, values, tile_range, static_shapes)
        tracer = Tracer(binding.symbols, self.slots, self.config)
        tracer.dot_precision = "ieee" if self.mode == "interpret" else self.kernel.settings.dot_precision
        tracer.interpret = self.mode == "interpret"
        tracer.int64_indexing = any(_needs_int64(v) for v in values if isinstance(v, torch.Tensor))
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
        order = binding.symbol_order
        sizes = host_grid(mapping, program_count_exprs(tracer.grid_dims), _programs_cap(self.mode))
        grid = sympy.lambdify(order, sizes, modules="math")
        num_warps, num_stages = int(self.config.get("num_warps", 4)), int(self.config.get("num_stages", 2))
        launcher = None
        if self.mode == "compiled":
            from tessera.runtime.launcher import TritonLauncher
            # value_key already fixes each tensor's dtype and 16-byte alignment
            launcher = TritonLauncher(function, num_warps, num_stages, key_pointers=False)
        return Variant(
            guard=binding.symbols.guard_checker(order), symbols=order, function=function,
            grid=_int_result(grid), source=source, path=path,
            num_warps=num_warps, num_stages=num_stages,
            guard_text=[reason for _, reason in binding.symbols.guards],
            tunables=tracer.tunable_dims(), locations=locations, launch_location=user_location(),
            launcher=launcher, launch_index=launch_index, launch_ndim=len(tracer.grid_dims),
            loopable_row=tracer.loopable_row_length())


def _int_result(function: Callable[..., Any]) -> Callable[..., tuple[int, ...]]:
    def grid(*args: Any) -> tuple[int, ...]:
        return tuple(max(int(size), 0) for size in function(*args))
    return grid


def _backend_error(error: BaseException, variant: Variant) -> exc.TesseraError:
    """A Triton failure on generated code, pointed at the kernel line that produced it."""
    line = _generated_line(error, variant)
    location = variant.launch_location
    if line is not None:
        earlier = [number for number in variant.locations if number <= line]
        if earlier:
            location = variant.locations[max(earlier)]
    summary = str(error).strip().splitlines()
    text = summary[-1] if summary else type(error).__name__
    where = f"{variant.path}:{line}" if line is not None else variant.path
    return exc.BackendCompileError(
        f"{type(error).__name__}: {text[:300]}", location=location,
        hint=f"this is a Tessera bug; the generated source is {where}. Run the kernel with mode='eager' "
             "meanwhile, and please report it with that file")


def _generated_line(error: BaseException, variant: Variant) -> int | None:
    """The line of the generated file where Triton failed, from tracebacks or the error's AST node."""
    seen: BaseException | None = error
    while seen is not None:
        node = getattr(seen, "node", None)
        if node is not None and hasattr(node, "lineno") and getattr(seen, "src", None):
            # Triton numbers the lines of the function's own source, which starts at its `def`
            header = f"def {variant.function.__name__}("
            first = next(i for i, text in enumerate(variant.source.splitlines()) if text.startswith(header))
            return first + node.lineno
        lines = [lineno for frame, lineno in traceback.walk_tb(seen.__traceback__)
                 if frame.f_code.co_filename == variant.path]
        if lines:
            return lines[-1]
        seen = seen.__cause__ or seen.__context__
    return None


def _launch_index(body: Callable[..., Any]) -> int:
    """Which top-level tile loop (in source order) a rewritten body is: `_tessera_body_<n>`."""
    suffix = body.__name__.rsplit("_", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _programs_cap(mode: str) -> int:
    """Programs of a persistent kernel: one per SM (a few when interpreting)."""
    if mode == "interpret" or not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _ensure_triton(interpret: bool) -> None:
    """Import Triton in the process's mode: its interpreter is chosen once, at import time.

    Triton's own library (tl.sum, tl.cdiv, ...) is made of @triton.jit functions created when
    triton is imported, and the interpreter can only call interpreted ones; so a process runs
    either interpreted kernels (CPU tensors) or compiled ones (CUDA tensors), not both.
    """
    if "triton" not in sys.modules:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        import triton.language  # noqa: F401
    from triton.runtime.interpreter import InterpretedFunction
    import triton.language.standard as standard
    interpreted = isinstance(standard.cdiv, InterpretedFunction)
    if interpreted != interpret:
        wanted = "interpret" if interpret else "compiled"
        raise exc.TesseraError(
            f"mode {wanted!r} needs Triton imported {'with' if interpret else 'without'} its interpreter, "
            "but this process imported it the other way",
            hint="run interpret mode (CPU tensors) and compiled mode (CUDA tensors) in separate processes; "
                 "set TRITON_INTERPRET=1 before importing triton for interpret mode")


_allocator_set = False


def _ensure_descriptor_allocator() -> None:
    """Device-side TMA descriptors need scratch memory; Triton asks the host for it."""
    global _allocator_set
    if not _allocator_set:
        import triton

        def allocate(size: int, alignment: int, stream: Any) -> torch.Tensor:
            return torch.empty(size, dtype=torch.int8, device="cuda")
        triton.set_allocator(allocate)
        _allocator_set = True


def load_generated(name: str, source: str, interpret: bool) -> tuple[Any, str]:
    """Write generated source to a file and import it (Triton reads sources from files)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = os.path.join(settings.get("cache_dir"), "tessera_generated")
    os.makedirs(directory, exist_ok=True)
    module_name = f"{name}_{digest}_{'interp' if interpret else 'gpu'}"
    path = os.path.join(directory, f"{module_name}.py")
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as handle:
            handle.write(source)
        os.replace(temporary, path)
    _ensure_triton(interpret)
    if not interpret and "make_tensor_descriptor" in source:
        _ensure_descriptor_allocator()
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name), path


_runners: list[CompiledRunner] = []


def launch_helper(tile_range: Any, body: Callable[..., Any]) -> None:
    """What a rewritten top-level tile loop calls."""
    if not isinstance(tile_range, TileRange):
        raise exc.UnsupportedSyntaxError("a tile loop must iterate hl.tile(...) or hl.grid(...)", location=user_location())
    _runners[-1].launch(tile_range, body)


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

    def __init__(self, slots: BlockSlotTable, config: Config, device: torch.device, runner: CompiledRunner) -> None:
        super().__init__(slots, config, device)
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
    if mode == "compiled" and device.type != "cuda":
        raise exc.TesseraError(f"mode 'compiled' needs CUDA tensors, got tensors on {device}",
                               location=user_location(), hint="use mode='interpret' for CPU tensors")
    if mode == "interpret" and device.type != "cpu":
        raise exc.TesseraError(f"mode 'interpret' runs on CPU tensors, got tensors on {device}",
                               location=user_location(), hint="use mode='compiled' for CUDA tensors")
    if runner is None:
        runner = CompiledRunner(kernel, mode, config, kernel.block_slots())
    slots = runner.slots
    host = _HostInterpreter(slots, config, device, runner)
    _runners.append(runner)
    eager_state.push_device(device)
    interpreter.push(host)  # a plain push/pop: interpreter.activate builds a generator per call
    try:
        return kernel.rewritten().function(*args, **kwargs)
    finally:
        interpreter.pop()
        eager_state.pop_device()
        _runners.pop()
