"""The Pallas backend: `base.Backend` for JAX Pallas, run by Pallas's interpreter on the CPU.

    backend = PallasBackend()
    lowered = backend.lower(ir, config, LoweringOptions(interpret=True))   # passes, checks, source
    loaded = backend.load(lowered, options)       # writes the source; imports jax at first launch
    loaded.launch((programs,), [out, x, y, n])    # torch tensors in, results copied into `out`
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Iterable, Sequence

import torch

from tessera import exc, settings
from tessera.backends.base import LoadedKernel, LoweredKernel, LoweringOptions
from tessera.backends.candidates import CompileLaunch, RunLaunch
from tessera.backends.config_space import ConfigSpace, KernelFacts
from tessera.backends.pallas.codegen import lower_kernel
from tessera.backends.pallas.emitter import JAX_DTYPES
from tessera.backends.pallas.layout import check_tpu_layout
from tessera.backends.pallas.lowering import ATOMICS, ELEMENTWISE_TEMPLATES, LOWERINGS, REDUCTION_FUNCTIONS
from tessera.backends.pallas.prebroadcast import pre_broadcast
from tessera.backends.source_text import refuse_unlowered, table_lowers
# the Triton backend's generic parts, none of which imports triton: its block-size space and
# heuristics (Pallas tunes block_sizes only) and the generated-file helpers
from tessera.backends.triton import heuristics
from tessera.backends.triton import space as triton_space
from tessera.backends.triton.modules import compile_error, ensure_source_file, load_module_function, source_digest
from tessera.config import Config
from tessera.ir.graph import KernelIR, Op, walk
from tessera.location import SourceLocation

# Config keys the Pallas lowering honours (the rest are Triton's: num_warps, indexing, ...)
TUNED_KEYS = frozenset({"block_sizes"})


# launches recorded while `recorded_launches()` is active (tpu_export.py lowers them for TPU)
_RECORDERS: list[list[tuple["PallasKernel", tuple[int, ...], list[Any]]]] = []


class PallasKernel:
    """A generated Pallas module in its file; jax is imported and the module run at the first launch."""

    def __init__(self, path: str, lowered: LoweredKernel) -> None:
        self.path = path
        self.function_name = lowered.name
        self.lowered = lowered
        self.runner: Any = None
        self.flat: PallasKernel | None = None  # the flat form an 'auto' blocked kernel carries (codegen.py)

    def _import(self) -> None:
        from tessera.backends.pallas.runner import PallasRunner  # jax loads here, never while planning
        launch = load_module_function(self.path, "launch", self.lowered.source, "tessera_pallas_")
        module = launch.__globals__
        self.runner = PallasRunner(launch, module["TENSORS"], module["WRITTEN"], module["SCALAR_DTYPES"],
                                   module.get("LAYOUTS"), self.lowered.location)

    def launch(self, grid: tuple[int, ...], arguments: list[Any]) -> None:
        try:
            if self.runner is None:
                self._import()
            flat = self.lowered.launch_options.get("flat")
            if flat is not None and not self.runner.layouts_match(arguments):
                if self.flat is None:
                    self.flat = PallasKernel(self.path.removesuffix(".py") + "_flat.py", flat)
                    ensure_source_file(self.flat.path, flat.source)
                self.flat.launch(grid, arguments)
                return
            self.runner(grid, arguments)
            for recorder in _RECORDERS:
                recorder.append((self, tuple(int(g) for g in grid), list(arguments)))
        except exc.TesseraError:
            raise
        except Exception as error:
            raise compile_error(error, self.path, self.lowered.source, self.function_name, self.lowered.locations,
                                self.lowered.location) from error


class PallasBackend:
    """Lowers `KernelIR` to a `pl.pallas_call`; runs it with Pallas's interpreter on CPU tensors."""

    name = "pallas"
    title = "Pallas"
    supported_ops = frozenset(LOWERINGS)

    def lowers(self, op: Op, fn: str | None = None) -> bool:
        return table_lowers(op, fn, LOWERINGS, ELEMENTWISE_TEMPLATES, REDUCTION_FUNCTIONS)

    def check(self, ir: KernelIR, options: LoweringOptions) -> None:
        """What this backend refuses, at the kernel line: an op, function, atomic or dtype it has
        no lowering for, Triton's chunked rows (`reduction_loops`), and compiled mode (no TPU here)."""
        if not options.interpret:
            raise exc.UnsupportedOperationError(
                "the Pallas backend runs in interpret mode only (Pallas's interpreter on CPU tensors): "
                "compiled mode needs a TPU, which Tessera has not been run on", location=ir.location,
                hint="pass CPU tensors (interpret mode), or use backend='triton' for CUDA tensors")
        refuse_unlowered(self, ir.body, "run this kernel with backend='triton' or mode='eager'")
        for node in walk(ir.body):
            if node.op in (Op.LOAD, Op.STORE) and node.params.get("stacked") is not None:
                raise exc.UnsupportedOperationError(
                    "the Pallas backend has no pointer-valued accesses (hl.stacktensor_like)", location=node.location,
                    hint="use backend='triton' or mode='eager'")
            atomic = node.params.get("atomic") if node.op is Op.STORE else None
            if atomic and atomic not in ATOMICS:
                raise exc.UnsupportedOperationError(
                    f"the Pallas backend has no lowering for atomic_{atomic}", location=node.location,
                    hint=f"Pallas lowers atomic_{', atomic_'.join(ATOMICS)}; or use backend='triton'")
            if node.dtype is not None and node.dtype not in JAX_DTYPES:
                raise exc.UnsupportedOperationError(
                    f"the Pallas backend has no {node.dtype} values", location=node.location,
                    hint=f"use one of {', '.join(str(d).removeprefix('torch.') for d in JAX_DTYPES)}")
        if ir.row_schedule is not None:
            raise exc.UnsupportedOperationError(
                "the Pallas backend processes a whole row as one block: chunked rows (reduction_loops) are "
                "Triton's", location=ir.location, hint="drop reduction_loops from the Config, or use backend='triton'")

    def lower(self, ir: KernelIR, config: Config, options: LoweringOptions) -> LoweredKernel:
        """The backend's own passes (pre-broadcast), the TPU layout check, then the source."""
        if config.get("pallas_pre_broadcast", True):
            ir = pre_broadcast(ir)
        if config.get("pallas_tpu_layout_check", False):
            check_tpu_layout(ir, config)
        return lower_kernel(ir, config, options)

    def load(self, lowered: LoweredKernel, options: LoweringOptions) -> LoadedKernel:
        module_name = f"{lowered.name}_{source_digest(lowered.source)}_pallas"
        path = os.path.join(settings.cache_dir(), "tessera_generated", f"{module_name}.py")
        ensure_source_file(path, lowered.source)
        return PallasKernel(path, lowered)

    def compile_error(self, error: BaseException, lowered: LoweredKernel, loaded: LoadedKernel,
                      fallback: SourceLocation | None) -> Exception:
        return compile_error(error, loaded.path, lowered.source, loaded.function_name, lowered.locations, fallback)

    # -- tuning: block sizes only; timings of the CPU interpreter say nothing about a TPU --------

    def config_space(self, facts: KernelFacts, enabled: Iterable[str] | None = None) -> ConfigSpace:
        keys = TUNED_KEYS if enabled is None else TUNED_KEYS & set(enabled)
        return triton_space.config_space(facts, keys)

    def heuristic_config(self, space: ConfigSpace) -> Config:
        return heuristics.heuristic_config(space)

    def read_op_mix(self, facts: KernelFacts, sources: Iterable[str]) -> KernelFacts:
        return triton_space.read_op_mix(facts, sources)

    def prepare_worker(self, interpret: bool) -> None:
        """Nothing to choose before jax loads (it runs on the CPU either way)."""

    def warm_up_driver(self) -> None:
        """No driver: Pallas's interpreter runs on the CPU."""

    def compile_candidate(self, launches: Sequence[CompileLaunch], interpret: bool) -> float:
        start = time.perf_counter()
        for launch in launches:
            with open(launch.source_path, encoding="utf-8") as handle:
                compile(handle.read(), launch.source_path, "exec")
        return time.perf_counter() - start

    def candidate_runner(self, launches: Sequence[RunLaunch]) -> Callable[[], None]:
        kernels = []
        for launch in launches:
            with open(launch.source_path, encoding="utf-8") as handle:
                source = handle.read()
            lowered = LoweredKernel(launch.function_name, source, ())
            kernels.append(PallasKernel(launch.source_path, lowered))

        def run() -> None:
            for kernel, launch in zip(kernels, launches):
                if math.prod(launch.grid) > 0:
                    kernel.launch(launch.grid, list(launch.arguments))
        return run

    def warm_up_compiler(self) -> str:
        return "pallas: nothing to warm up"

    def warm_up_launch(self, device: torch.device) -> str:
        return "pallas: nothing to warm up"
