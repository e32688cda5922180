"""The one compile pipeline: a launch's captured values -> KernelIR -> passes -> backend artifact.

    launch = compile_launch(request, backend)      # what the runtime asks for on a cache miss
    launch.ir                                      # the IR after the passes (`print(launch.ir)`)
    launch.loaded.launch(grid, arguments)          # what the runtime runs

The runtime only dispatches: it keys calls, checks guards and launches. Everything that turns a
tile-loop body into code is here and below (trace/, ir/passes.py, the backend).
"""
from __future__ import annotations

import dataclasses
import math
import types
import warnings
from typing import Any, Callable

import sympy
import torch

from tessera import exc, settings
from tessera.backends.base import Backend, LoadedKernel, LoweredKernel, LoweringOptions
from tessera.config import Config
from tessera.ir.graph import AxisKind, KernelIR, Op, walk, walk_blocks
from tessera.ir.loop_split import split_axis_names
from tessera.ir.passes import run_passes
from tessera.ir.rolling import why_not_loopable
from tessera.ir.tile_range import TileRange
from tessera.ir.tunables import LoadedTile, TunableDim
from tessera.language.constexpr import BlockSizeInt, SpecializedInt
from tessera.language.operands import check_dtype
from tessera.location import SourceLocation, user_location
from tessera.marking import static_dims
from tessera.trace.block_sizes import BlockSlots
from tessera.trace.proxy import TensorProxy
from tessera.trace.symbols import SymbolTable
from tessera.trace.tracer import Tracer

# names generated code uses for itself; a kernel parameter with one of them is renamed
_RESERVED = {"tl", "triton", "libdevice", "pid", "min", "max", "range", "float", "int"}


def compiled_in(kind: str, value: Any, static_shapes: bool) -> bool:
    """Whether a loop bound is a constant of the generated code (else a kernel argument)."""
    if isinstance(value, SpecializedInt) or (static_shapes and isinstance(value, int)):
        return True
    return kind == "begin" and isinstance(value, int) and value == 0


def captured_cells(function: Any) -> list[tuple[str, Any]] | None:
    """(name, value) of the filled closure cells of a plain Python function, in order; None for
    anything else. A helper the tile loop calls (`epilogue(acc, tile)`) may capture tensors of
    the code that made it: each becomes a kernel parameter of its own (`LaunchBinding`), and its
    key and argument (`call_keys.launch_inputs`) are made in the same order."""
    if type(function) is not types.FunctionType or not function.__closure__:
        return None
    cells = []
    for name, cell in zip(function.__code__.co_freevars, function.__closure__):
        try:
            cells.append((name, cell.cell_contents))
        except ValueError:  # an empty cell (a name bound later): reading it fails as in Python
            continue
    return cells


def flat_values(names: tuple[str, ...], values: list[Any]) -> list[tuple[str, Any]]:
    """(parameter name, value) of a launch's captured values with closures opened: the tensors a
    helper closure captures are named `<closure>__<name>`, as `LaunchBinding` names them (what
    the stores of a variant are matched against)."""
    flat: list[tuple[str, Any]] = []
    for name, value in zip(names, values):
        cells = captured_cells(value)
        if cells is not None:
            inner = [(f"{name}__{cell_name}", cell) for cell_name, cell in cells if _is_parameter_source(cell)]
        elif holds_tensors(value):
            inner = [(f"{name}__{position}", item) for position, item in enumerate(value) if _is_parameter_source(item)]
        else:
            flat.append((parameter_name(name), value))
            continue
        flat += flat_values(tuple(n for n, _ in inner), [v for _, v in inner])
    return flat


def holds_tensors(value: Any) -> bool:
    """A tuple or list with a tensor in it (or a closure, or a tuple or list, holding one): its
    tensors become kernel parameters `<name>__<position>`, its other items are compiled in."""
    return isinstance(value, (list, tuple)) and any(_is_parameter_source(item) for item in value)


def _is_parameter_source(value: Any) -> bool:
    """A captured value that becomes kernel parameters: a tensor, or a closure, tuple or list holding one."""
    return isinstance(value, torch.Tensor) or captured_cells(value) is not None or holds_tensors(value)


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
            refuse_unreadable(name, value)
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
            # uint64 holds data pointers (hl.stacktensor_like): traced as int64, the same bits
            dtype = torch.int64 if value.dtype is torch.uint64 else value.dtype
            return TensorProxy(name, dtype, sizes, strides, value.device,
                               aligned16=_aligned16(value))
        if isinstance(value, BlockSizeInt):
            return value  # still a block size inside the kernel (hl.zeros([tile, block]))
        if isinstance(value, SpecializedInt) or (static_shapes and isinstance(value, int) and not isinstance(value, bool)):
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return self._symbol(name, torch.int64, value)
        if isinstance(value, float):
            return self._symbol(name, torch.float32, value)
        if captured_cells(value) is not None:
            return self._bind_closure(name, value, static_shapes)
        if holds_tensors(value):
            items = [self._bind(f"{name}__{position}", item, static_shapes) if _is_parameter_source(item) else item
                     for position, item in enumerate(value)]
            return type(value)(items) if type(value) in (list, tuple) else type(value)(*items)  # a namedtuple
        return value

    def bind_globals(self, tensors: tuple[tuple[str, torch.Tensor], ...]) -> dict[int, TensorProxy]:
        """Parameters for the module-global tensors the body reads (after every other parameter,
        each with its sizes and strides compiled in: the variant serves only while the global is
        that very tensor with that layout, see global_reads.py); their proxies by tensor id."""
        proxies: dict[int, TensorProxy] = {}
        for name, tensor in tensors:
            symbols = len(self.argument_symbols)
            proxies[id(tensor)] = self._bind(_safe_name(f"global__{name}"), tensor, static_shapes=True)
            del self.argument_symbols[symbols:]  # guards and grids are functions of the launch's own arguments
        return proxies

    def _bind_closure(self, name: str, function: types.FunctionType, static_shapes: bool) -> types.FunctionType:
        """The function again, with the tensors it captures (and closures holding some) bound as
        parameters `<name>__<captured name>`; other captured values stay as they are (compiled in)."""
        cells = list(function.__closure__ or ())
        for position, cell_name in enumerate(function.__code__.co_freevars):
            try:
                value = cells[position].cell_contents
            except ValueError:
                continue
            if _is_parameter_source(value):
                cells[position] = types.CellType(self._bind(f"{name}__{cell_name}", value, static_shapes))
        rebuilt = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                                     function.__defaults__, tuple(cells))
        rebuilt.__kwdefaults__ = function.__kwdefaults__
        return rebuilt

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


def _aligned16(tensor: torch.Tensor) -> bool:
    """Whether the tensor's pointer is 16-byte aligned; a fake tensor (torch.compile asks which
    tensors a kernel stores into, runtime/torch_library.py) has none: its trace is only read."""
    if type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter:
        return tensor.data_ptr() % 16 == 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tensor.data_ptr() % 16 == 0
    except RuntimeError:
        return True


def parameter_name(name: str) -> str:
    """The name a captured value's parameter has in the IR and generated code."""
    return _safe_name(name)


def refuse_unreadable(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor argument whose memory does not hold its values as the kernel would read them.

    A negative-bit view (`z.conj().imag`, `torch._neg_view(x)`) stores -values: a kernel would read
    and write them unnegated. Unsupported dtypes (complex, fp8, uint16/32/64) have no Triton type
    here. Eager mode runs torch itself and needs neither check.
    """
    if tensor.dtype is not torch.uint64:  # data pointers (hl.stacktensor_like), read as int64
        check_dtype(tensor.dtype, f"argument {name}")
    if tensor.is_neg() or tensor.is_conj():
        raise exc.UnsupportedOperationError(
            f"argument {name} is a view with torch's lazy negation bit set (is_neg(), e.g. z.conj().imag): "
            "its memory holds the negated values, which a compiled kernel would read and write as they are",
            location=user_location(),
            hint=f"pass {name}.resolve_neg() (a copy; for an output, copy the result back yourself), "
                 "or run the kernel with mode='eager'")


def _safe_name(name: str) -> str:
    return f"{name}_" if name in _RESERVED or name.startswith(("idx_", "mask_", "offset_", "v")) else name


@dataclasses.dataclass(frozen=True)
class LaunchRequest:
    """Everything a launch's compile depends on (the runtime keys its variants by the same facts)."""

    kernel_name: str
    body: Callable[..., Any]            # the rewritten loop body; its closure holds `values`
    values: list[Any]
    tile_range: TileRange
    launch_index: int                   # which top-level tile loop (source order)
    config: Config
    slots: BlockSlots
    static_shapes: bool
    int64_indexing: bool
    device: torch.device
    options: LoweringOptions
    # module-global tensors the body reads (name, tensor): trailing kernel arguments (global_reads.py)
    global_tensors: tuple[tuple[str, torch.Tensor], ...] = ()


@dataclasses.dataclass(frozen=True)
class CompiledLaunch:
    """One compiled variant: its IR, the backend's artifact, and what the host needs per call.

    `guard` and `grid` are plain functions of the kernel's argument list (tensors ignored).
    """

    ir: KernelIR
    lowered: LoweredKernel
    loaded: LoadedKernel
    guard: Callable[..., bool]
    grid: Callable[..., tuple[int, ...]]
    guard_text: tuple[str, ...]
    tunables: tuple[TunableDim, ...]
    loopable_row: int               # length of the whole row reduction_loops may chunk (0: none)
    location: SourceLocation | None
    whole_elements: int = 1         # elements of one program's whole dims (x[tile, :]), padded to powers of two
    pipelined_loads: tuple[tuple[LoadedTile, ...], ...] = ()  # per product loop: its loads (pipelined_loads())


def trace(request: LaunchRequest) -> tuple[KernelIR, LaunchBinding, Tracer]:
    """The launch's body traced on proxies of its values, before any pass."""
    binding = LaunchBinding(request.body.__code__.co_freevars, request.values, request.tile_range,
                            request.static_shapes)
    lifted = binding.bind_globals(request.global_tensors)
    tracer = Tracer(binding.symbols, request.slots, request.config, request.launch_index,
                    request.int64_indexing, request.device)
    tracer.lifted = lifted
    ir = tracer.trace_launch(request.kernel_name, tuple(binding.parameters), binding.range, request.body,
                             binding.proxies)
    return ir, binding, tracer


def to_ir(request: LaunchRequest) -> KernelIR:
    """The IR a backend would lower for this launch (after the passes)."""
    ir, _, _ = trace(request)
    return run_passes(ir)


def compile_launch(request: LaunchRequest, backend: Backend) -> CompiledLaunch:
    """Trace, run the passes, and have `backend` check, lower and load the result."""
    ir, binding, tracer = trace(request)
    ir = run_passes(ir, log=settings.log_enabled("ir"))
    location = user_location()
    try:
        backend.check(ir, request.options)
        lowered = backend.lower(ir, request.config, request.options)
    except exc.TesseraError as error:
        raise error.with_location(location)
    loaded = backend.load(lowered, request.options)
    guards = ir.guards + lowered.guards
    order = binding.argument_symbols
    return CompiledLaunch(
        ir=ir, lowered=lowered, loaded=loaded, guard=guard_function(order, guards), grid=grid_function(order, lowered.grid),
        guard_text=tuple(reason for _, reason in guards), tunables=tuple(tracer.tunable_dims(split_axis_names(ir))),
        loopable_row=loopable_row_length(ir), location=location, whole_elements=whole_elements(ir),
        pipelined_loads=pipelined_loads(ir, {axis.name: index for index, axis, _ in tracer.tunable_axes()}))


def pipelined_loads(ir: KernelIR, slot_of: dict[str, int]) -> tuple[tuple[LoadedTile, ...], ...]:
    """Per innermost loop of `ir` that computes a product (Triton software-pipelines those by
    itself, keeping `num_stages` copies of each load's tile in shared memory), the tiles its
    loads bring in per iteration; `slot_of` maps a tunable axis's name to its block_sizes entry.
    Loops without a product are pipelined only as backends/triton/loop_stages.py allows."""
    loops = []
    for node in walk(ir.body):
        if node.op is not Op.LOOP:
            continue
        body = [inner for block in node.blocks for inner in walk(block)]
        if any(inner.op is Op.LOOP for inner in body) or not any(inner.op is Op.DOT for inner in body):
            continue
        tiles = []
        for load in (inner for inner in body if inner.op is Op.LOAD):
            fixed, slots = 1, []
            for axis in load.shape:
                if axis.name in slot_of:
                    slots.append(slot_of[axis.name])
                else:
                    fixed *= axis.block
            tiles.append(LoadedTile(load.params["tensor"].dtype.itemsize, fixed, tuple(slots)))
        if tiles:
            loops.append(tuple(tiles))
    return tuple(loops)


def whole_elements(ir: KernelIR) -> int:
    """The most elements one value of the kernel holds along whole dims (`x[tile, :]`, `w[:, :]`),
    each padded to a power of two as its block is: what the heuristics size a program by."""
    padded: dict[Any, int] = {}
    for axis in held_whole_axes(ir):
        try:
            length = int(sympy.sympify(axis.end).xreplace(dict(ir.example)))
        except (TypeError, ValueError):
            continue
        padded[axis] = 1 << max(length - 1, 0).bit_length()
    if not padded:
        return 1
    return max((math.prod(padded.get(axis, 1) for axis in node.shape) for node in walk(ir.body)), default=1)


def loopable_row_length(ir: KernelIR) -> int:
    """The length of the launch's first whole row if `reduction_loops` could chunk it, else 0
    (no whole row, or its uses cannot be split into passes: see ir/rolling.py)."""
    if not ir.whole_axes or why_not_loopable(ir.body, {ir.whole_axes[0]}) is not None:
        return 0
    return whole_row_length(ir)


def whole_row_length(ir: KernelIR, axes: tuple[Any, ...] | None = None) -> int:
    """The length of the launch's first whole row in the traced call (0: none), e.g. attention's
    head_dim; of the first of `axes` (whole axes too) when given."""
    axes = ir.whole_axes if axes is None else axes
    if not axes:
        return 0
    try:
        return int(sympy.sympify(axes[0].end).xreplace(dict(ir.example)))
    except (TypeError, ValueError):
        return 0


def held_whole_axes(ir: KernelIR) -> tuple[Any, ...]:
    """The whole axes that size a program's tiles for the heuristics: all but those only ever
    summed over by a product (its K: `x[t, 2*k0 : 2*k0 + 2*bk] @ w[tile_k, tile_n]` in Helion's
    int4_gemm, a window whose length follows a block size) inside a loop. Counted as a whole row, such a K made
    a plain GEMM look like one holding a row (M block cut to 16, 25x slower than torch.compile).
    In a kernel with products, whole axes shorter than a product's dims (16) are left out too:
    a stacked pair (int4_gemm's nibbles, `torch.stack([lo, hi], dim=1)`) folded into K."""
    dots = [node for node in walk(ir.body) if node.op is Op.DOT]
    if not dots:
        return ir.whole_axes
    # a K summed per iteration of a loop is one chunk of the operands (a product at the top holds
    # its whole K operands at once: `x[t, :] @ w[:, :]`, whose size the heuristics must see)
    looped = [node for loop in walk(ir.body) if loop.op is Op.LOOP
              for block in loop.blocks for node in walk(block) if node.op is Op.DOT]
    summed = {node.params.get("k_axis") for node in looped}
    produced = {axis for node in dots for axis in node.shape}
    return tuple(axis for axis in ir.whole_axes
                 if (axis not in summed or axis in produced) and not (axis.block < 16 and axis not in produced))


def carried_row_elements(ir: KernelIR) -> int:
    """The most whole-dim elements per row that one inner loop of the launch carries from
    iteration to iteration: attention's accumulator holds head_dim, its backward's dk and dv
    twice that (0: no loop carries a whole row). The heuristics size row blocks by it."""
    most = 0
    for node in ir.nodes():
        if node.op is Op.LOOP:
            rows = [math.prod(a.block for a in value.shape if a.kind is AxisKind.WHOLE)
                    for value in node.params["carried"] if any(a.kind is AxisKind.WHOLE for a in value.shape)]
            most = max(most, sum(rows))
    return most


def loop_score_tiles(ir: KernelIR) -> int:
    """The most products from zero that one inner loop of the launch computes per iteration over
    its own tile (not a whole row): attention's scores (1), its backward's dq loop's scores and
    dP (2). Each is an fp32 rows x block tile live beside the carried accumulators, so the
    heuristics size row blocks by it too (0: no such loop)."""
    most = 0
    for loop in ir.nodes():
        if loop.op is Op.LOOP:
            fresh = [node for node in walk_blocks(loop.blocks) if node.op is Op.DOT and node.inputs[2] is None
                     and not any(axis.kind is AxisKind.WHOLE for axis in node.shape)]
            most = max(most, len(fresh))
    return most


def guard_function(order: list[sympy.Symbol], guards: tuple[tuple[sympy.Basic, str], ...]) -> Callable[..., bool]:
    """A plain Python function of the symbol values that is True when every guard holds."""
    if not guards:
        return _always_true
    return sympy.lambdify(order, sympy.And(*(condition for condition, _ in guards)), modules="math")


def _always_true(*_: Any) -> bool:
    return True


_AS_INT = sympy.Function("_tessera_as_int")  # printed as a call of int() by grid_function


def grid_function(parameters: list[sympy.Symbol], sizes: tuple[Any, ...]) -> Callable[..., tuple[int, ...]]:
    """The grid as one generated function of the kernel arguments, each size an int of at least 0.

    The int() and max() are part of the generated expression rather than a wrapper around it:
    the grid is computed on every call.
    """
    clamped = tuple(sympy.Max(0, _AS_INT(sympy.sympify(size))) for size in sizes)
    return sympy.lambdify(parameters, clamped, modules=[{"_tessera_as_int": int}, "math"])
