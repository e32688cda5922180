"""Tessera kernels inside `torch.compile`: each kernel becomes a `torch.library` custom op.

Dynamo is told to keep a kernel call whole in its graph (`torch.compiler.allow_in_graph`), so it
never traces the kernel's Python. Wherever the call then meets traced tensors (dynamo's fake
tensors, AOTAutograd's functional tensors), `Kernel.__call__` comes here: the call is flattened
into tensors, ints and floats, and made a call of one custom op per (kernel, argument structure),
registered on first use with

- a fake implementation that runs the kernel's host code with its tile loops skipped: the
  allocations and host arithmetic give the outputs' shapes, dtypes and strides;
- the tensors its tile loops store into (read from the traced IR) or its host code updates in
  place (their version counters move) declared as mutated, so functionalization sees the writes;
- a real implementation that calls the kernel as usual, on real tensors.

Importing `torch._dynamo` costs seconds, so kernels are announced to it only once something else
imported it (an import hook watches for it).
"""
from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import itertools
import sys
import threading
import weakref
from typing import Any, Callable

import torch

from tessera import backends, exc
from tessera.compiler import flat_values, to_ir
from tessera.ir.graph import Op
from tessera.location import user_location
from tessera.runtime.call_structure import CallResult, Leaf, flatten, rebuild, split_result, unflatten
from tessera.runtime.compiled import CompiledRunner, VariantStore, run_compiled
from tessera.runtime.kernel_settings import requested_mode

_LIBRARY_NAME = "tessera"
_library: torch.library.Library | None = None
_op_numbers = itertools.count()
_lock = threading.Lock()


# ---- which calls take the custom op -------------------------------------------------------------

_PLAIN_KINDS = frozenset({torch.nn.Parameter, int, float, bool, type(None), str, torch.dtype})


def is_traced_call(args: tuple, kwargs: dict) -> bool:
    """Whether a tensor argument is a tensor subclass (a fake, functional or proxy tensor of a
    compiler): such a call becomes a custom op call. Plain tensors and Parameters run directly."""
    for value in (*args, *kwargs.values()) if kwargs else args:  # on every call: the usual kinds first
        kind = value.__class__
        if kind is torch.Tensor or kind in _PLAIN_KINDS:
            continue
        if isinstance(value, torch.Tensor):
            return True
        if isinstance(value, (list, tuple, dict)) and \
                is_traced_call(tuple(value.values()) if isinstance(value, dict) else tuple(value), {}):
            return True
    return False


# ---- running the host code alone ----------------------------------------------------------------

class _HostOnlyRunner(CompiledRunner):
    """Runs a call's host code with every top-level tile loop skipped; with `stored` set, each
    skipped loop is traced first and the tensors its IR stores into are added to `stored`."""

    def __init__(self, kernel: Any, mode: str, stored: list[torch.Tensor] | None) -> None:
        super().__init__(kernel, mode, kernel.default_config(), kernel.block_slots(), store=VariantStore(), recorder=[])
        self.stored = stored

    def launch(self, tile_range: Any, body: Callable[..., Any], launch_index: int = 0) -> None:
        if self.stored is None:
            return
        values = [cell.cell_contents for cell in body.__closure__ or ()]
        ir = to_ir(self.request(values, tile_range, body, launch_index))
        names = {node.params["tensor"].name for node in ir.nodes() if node.op is Op.STORE}
        self.stored.extend(value for name, value in flat_values(body.__code__.co_freevars, values)
                           if name in names and isinstance(value, torch.Tensor))


def _run_host_code(kernel: Any, args: tuple, kwargs: dict, stored: list[torch.Tensor] | None = None) -> Any:
    device = _device_of(args, kwargs)
    mode = "compiled" if device.type == "cuda" else "interpret"
    runner = _HostOnlyRunner(kernel, mode, stored)
    try:
        return run_compiled(kernel, mode, args, kwargs, runner.config, device, runner)
    except exc.TesseraError:
        raise
    except Exception as error:  # e.g. host code reading tensor values (`.item()`, `int(t)`)
        raise exc.UnsupportedOperationError(
            f"{kernel.fn.__name__}: its host code could not run on torch.compile's fake tensors ({error})",
            location=user_location(),
            hint="host code must not read tensor values (.item(), int(t), t.tolist()); "
                 "call the kernel outside torch.compile, or read the values inside a tile loop") from error


def _device_of(args: tuple, kwargs: dict) -> torch.device:
    tensors: list[torch.Tensor] = []
    flatten((args, kwargs), tensors, [], [])
    return tensors[0].device if tensors else torch.device("cpu")


# ---- the custom ops -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class KernelOp:
    """One registered custom op: a kernel called with one argument structure."""

    name: str
    structure: Any
    mutated: tuple[int, ...]  # positions, among the call's tensors, of those the kernel writes
    result: CallResult  # how the kernel's return value is rebuilt from the op's outputs

    @property
    def overload(self) -> Any:
        return getattr(getattr(torch.ops, _LIBRARY_NAME), self.name).default


def call_as_custom_op(kernel: Any, args: tuple, kwargs: dict) -> Any:
    """`kernel(*args, **kwargs)` as a call of the kernel's custom op (registered on first use)."""
    tensors: list[torch.Tensor] = []
    ints: list[Any] = []
    floats: list[Any] = []
    structure = flatten((args, kwargs), tensors, ints, floats)
    op = kernel.torch_ops.get(structure)
    if op is None:
        op = _register(kernel, structure, tensors, ints, floats)
    fresh = op.overload(*tensors, *ints, *floats)
    return rebuild(op.result, [fresh] if isinstance(fresh, torch.Tensor) else list(fresh or ()), tensors)


def _register(kernel: Any, structure: Any, tensors: list[torch.Tensor], ints: list, floats: list) -> KernelOp:
    global _library
    stored: list[torch.Tensor] = []
    # once per structure, on the first traced call's tensors (dynamo's fake ones), or on
    # stand-ins of concrete sizes where sizes are symbolic (the trace needs ints): which tensors
    # the kernel writes and which inputs it returns as is do not change with sizes
    if any(_symbolic(tensor) for tensor in tensors) or not all(isinstance(i, int) for i in ints):
        tensors = [torch.empty_strided([_example_int(size) for size in tensor.shape],
                                       [_example_int(stride) for stride in tensor.stride()],
                                       dtype=tensor.dtype, device=tensor.device) for tensor in tensors]
        ints = [_example_int(value) for value in ints]
    args, kwargs = unflatten(structure, iter(tensors), iter(ints), iter(floats))
    versions = [tensor._version for tensor in tensors]
    result, _ = split_result(_run_host_code(kernel, tuple(args), dict(kwargs), stored), tensors)
    stored_ids = {id(tensor) for tensor in stored}
    mutated = tuple(position for position, tensor in enumerate(tensors)
                    if id(tensor) in stored_ids or tensor._version != versions[position])
    counts = [0, 0, 0]
    _count(structure, counts)
    with _lock:
        known = kernel.torch_ops.get(structure)
        if known is not None:
            return known
        name = f"{_safe(kernel.fn.__name__)}_{next(_op_numbers)}"
        parameters = [f"Tensor(a{i}!) t{i}" if i in mutated else f"Tensor t{i}" for i in range(counts[0])]
        parameters += [f"SymInt i{i}" for i in range(counts[1])] + [f"float f{i}" for i in range(counts[2])]
        if _library is None:
            _library = torch.library.Library(_LIBRARY_NAME, "FRAGMENT")
        # one `Tensor` return per fresh output: functionalization refuses a mutating op returning a list
        fresh_count = result.sources.count(None)
        returns = "Tensor" if fresh_count == 1 else f"({', '.join(['Tensor'] * fresh_count)})"
        _library.define(f"{name}({', '.join(parameters)}) -> {returns}")
        op = KernelOp(name, structure, mutated, result)
        _library.impl(name, _implementation(kernel, op, _run_kernel), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_LIBRARY_NAME}::{name}", _implementation(kernel, op, _run_host_code),
                                    lib=_library)
        kernel.torch_ops[structure] = op
    return op


def _symbolic(tensor: torch.Tensor) -> bool:
    return not all(isinstance(size, int) for size in (*tensor.shape, *tensor.stride()))


def _example_int(value: Any) -> int:
    """A concrete int for a (maybe symbolic) size: torch's hint for it where it has one, else 8."""
    if isinstance(value, int):
        return value
    hint = getattr(getattr(value, "node", None), "hint", None)
    return int(hint) if hint is not None else 8


def _count(structure: Any, counts: list[int]) -> None:
    if isinstance(structure, Leaf):
        index = ("tensor", "int", "float").index(structure.kind) if structure.kind != "constant" else None
        if index is not None:
            counts[index] += 1
        return
    for item in structure[1]:
        _count(item[1] if structure[0] is dict else item, counts)


def _implementation(kernel: Any, op: KernelOp, run: Callable[..., Any]) -> Callable[..., Any]:
    """The op's body: rebuild the call, `run` it, return the fresh output tensors."""
    counts = [0, 0, 0]
    _count(op.structure, counts)

    def implementation(*flat: Any) -> Any:
        tensors = list(flat[:counts[0]])
        ints, floats = flat[counts[0]:counts[0] + counts[1]], flat[counts[0] + counts[1]:]
        args, kwargs = unflatten(op.structure, iter(tensors), iter(ints), iter(floats))
        _, fresh = split_result(run(kernel, tuple(args), dict(kwargs)), tensors)
        if len(fresh) != op.result.sources.count(None):
            raise exc.TesseraError(
                f"{kernel.fn.__name__} returned {len(fresh)} new tensors inside torch.compile, where its first "
                f"traced call returned {op.result.sources.count(None)}", location=user_location(),
                hint="return the same number of new tensors (not inputs) for every call with these argument types")
        return fresh[0] if len(fresh) == 1 else (tuple(fresh) if fresh else None)

    return implementation


def _run_kernel(kernel: Any, args: tuple, kwargs: dict) -> Any:
    return kernel(*args, **kwargs)  # real (plain) tensors here: the usual dispatch


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"


# ---- telling dynamo -------------------------------------------------------------------------------

_waiting: weakref.WeakSet = weakref.WeakSet()
_hook_installed = False


def announce(kernel: Any) -> None:
    """Keep calls of `kernel` whole in dynamo's graphs: now if dynamo is loaded, else once it is."""
    global _hook_installed
    if "torch._dynamo" in sys.modules and hasattr(sys.modules["torch._dynamo"], "allow_in_graph"):
        torch.compiler.allow_in_graph(kernel)
        _announce_waiting()  # any left waiting (dynamo's import finished without the watcher's help)
        return
    _waiting.add(kernel)
    if not _hook_installed:
        _hook_installed = True
        sys.meta_path.insert(0, _DynamoWatcher())


def _announce_waiting() -> None:
    for kernel in list(_waiting):
        torch.compiler.allow_in_graph(kernel)
    _waiting.clear()


class _DynamoWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `torch._dynamo` is imported, runs its loader and then announces
    the kernels defined so far; then takes itself off the import path."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            # dynamo imports Triton, whose interpreter is chosen at import: choose it as this
            # process's kernels will run (the mode they ask for, TESSERA_MODE=interpret on a GPU
            # machine included; else interpreted without CUDA), not as dynamo would
            waiting = list(_waiting)
            try:
                interpret = _kernels_run_interpreted(waiting)
                for backend in {kernel.settings.backend for kernel in waiting}:
                    backends.get(backend).prepare_worker(interpret=interpret)
            except Exception:  # noqa: BLE001 - choosing Triton's mode early is a courtesy; dynamo must load
                pass
            try:
                execute(module)
            finally:  # the kernels are announced even if dynamo's own import fails and is retried later
                if hasattr(module, "allow_in_graph"):
                    _announce_waiting()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _kernels_run_interpreted(kernels: list[Any]) -> bool:
    """Whether these kernels' generated code will run in Triton's interpreter: a mode asked for
    (`mode=` or TESSERA_MODE) decides; without one, the device does (interpreted without CUDA)."""
    requested = {requested_mode(kernel.settings) for kernel in kernels} - {None, "eager"}
    if requested:
        return "interpret" in requested
    return not torch.cuda.is_available()


def custom_ops(kernel: Any) -> list[KernelOp]:
    """The custom ops registered for `kernel` so far (one per argument structure met in a compile)."""
    return list(kernel.torch_ops.values())
