"""The Triton backend: `base.Backend` for Triton on NVIDIA GPUs, and Triton's CPU interpreter.

    backend = TritonBackend()
    lowered = backend.lower(ir, config, LoweringOptions(interpret=False))
    loaded = backend.load(lowered, options)          # writes the source under the cache dir, imports it
    loaded.launch((programs,), [out, x, y, n])
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from tessera import exc
from tessera.backends.base import LoadedKernel, LoweredKernel, LoweringOptions
from tessera.backends.source_text import refuse_unlowered, table_lowers
from tessera.backends.triton import interpreter_patching
from tessera.backends.triton.codegen import lower_kernel
from tessera.backends.triton.launcher import TritonLauncher
from tessera.backends.triton.lowering import ELEMENTWISE_TEMPLATES, LOWERINGS, REDUCTION_FUNCTIONS, SCAN_FUNCTIONS
from tessera.backends.triton.modules import (compile_error, error_location, import_generated, interpreting_environment,
                                              write_generated)
from tessera.backends.triton.tuning import TritonTuning
from tessera.config import Config
from tessera.ir.graph import AxisKind, KernelIR, Op, walk
from tessera.ir.unit_tiles import drop_unit_launch_tiles
from tessera.location import SourceLocation

_INTERPRETER_LOCK = threading.Lock()  # one interpreted launch at a time per process


class TritonKernel:
    """A generated `@triton.jit` kernel in its file, imported on its first launch.

    Importing waits for the first launch so that planning (writing sources for the autotuner's
    workers) never imports Triton: that would fix the process's interpreter mode. The first
    launch goes through `JITFunction.run` (it compiles); in compiled mode later ones go straight
    to the binary through `TritonLauncher`. The interpreter keeps the running grid in globals, so
    interpreted launches take a process-wide lock.
    """

    def __init__(self, path: str, lowered: LoweredKernel, interpret: bool) -> None:
        self.function_name = lowered.name
        self.path = path
        self.lowered = lowered
        self.interpret = interpret
        self.num_warps = int(lowered.launch_options["num_warps"])
        self.num_stages = int(lowered.launch_options["num_stages"])
        self.function: Any = None
        # compiled mode: repeat launches skip JITFunction.run (the variant's key already fixes
        # each tensor's dtype and 16-byte alignment, so the launcher need not read them)
        self.launcher: TritonLauncher | None = None
        self.launched = False

    def _import(self) -> None:
        self.function = import_generated(self.path, self.function_name, self.lowered.source, self.interpret)
        if not self.interpret:
            self.launcher = TritonLauncher(self.function, self.num_warps, self.num_stages, key_pointers=False)

    def launch(self, grid: tuple[int, ...], arguments: list[Any]) -> None:
        if self.lowered.index_checks:
            self._launch_checked(grid, arguments)
        else:
            self._launch(grid, arguments)

    def direct_launch(self, grid: tuple[int, ...], arguments: list[Any], tensor_slots: tuple[tuple[int, int], ...],
                      pointers: bool = False) -> Callable[[list[Any]], bool] | None:
        """A function that launches this exact launch again (see `TritonLauncher.direct`), for a
        caller that fixes every non-tensor argument; None in interpret mode, with index checks
        (each launch needs its flags tensor), or before the first launch."""
        if self.launcher is None or not self.launched or self.lowered.index_checks:
            return None
        return self.launcher.direct(grid, arguments, tensor_slots, pointers)

    def _launch(self, grid: tuple[int, ...], arguments: list[Any]) -> None:
        if self.launched and self.launcher is not None:  # the hit path
            self.launcher.launch(grid, arguments)
            return
        try:  # the first launch imports and compiles; the interpreter runs Python: all can fail in our code
            if self.function is None:
                self._import()
            if self.launcher is not None:  # goes through JITFunction.run and keeps the binary
                self.launcher.launch(grid, arguments)
            else:
                with _INTERPRETER_LOCK, interpreter_patching.unsanitized(), interpreting_environment():
                    self.function[grid](*arguments, num_warps=self.num_warps, num_stages=self.num_stages)
        except exc.TesseraError:
            raise
        except Exception as error:
            if interpreter_patching.conflicting_stores(error):
                raise exc.DuplicateStoreIndicesError(
                    "a store writes different values to one element from several lanes: on the GPU which lane wins "
                    "is undefined", location=error_location(error, self.path, self.lowered.source, self.function_name,
                                                            self.lowered.locations, self.lowered.location),
                    hint="leave all but one of those lanes out of the store (a where() that writes the old value "
                         "back still writes), or combine them with hl.atomic_add / atomic_max") from None
            raise compile_error(error, self.path, self.lowered.source, self.function_name, self.lowered.locations,
                                self.lowered.location) from error
        self.launched = True

    def _launch_checked(self, grid: tuple[int, ...], arguments: list[Any]) -> None:
        """A launch with TESSERA_CHECK_INDICES: one more argument, a flag per checked access, read
        back after the launch (a device sync) and reported at the first flagged access's line."""
        device = next((a.device for a in arguments if isinstance(a, torch.Tensor)), torch.device("cpu"))
        checks = self.lowered.index_checks
        flags = torch.zeros(len(checks), dtype=torch.int32, device=device)
        self._launch(grid, [*arguments, flags])
        flagged = flags.nonzero()
        if flagged.numel():
            raise exc.IndexingError(
                "an index tensor held values outside the tensor's dimension in lanes that are not masked "
                "(found by TESSERA_CHECK_INDICES)", location=checks[int(flagged[0, 0])],
                hint="mask those lanes with extra_mask=..., or clamp the indices")


class TritonBackend(TritonTuning):
    """Lowers `KernelIR` to Triton source; runs it compiled (CUDA) or interpreted (CPU)."""

    name = "triton"
    title = "Triton"
    supported_ops = frozenset(Op)

    def lowers(self, op: Op, fn: str | None = None) -> bool:
        # a user combine function (hl.reduce, hl.associative_scan) is a @triton.jit helper
        return table_lowers(op, fn, LOWERINGS, ELEMENTWISE_TEMPLATES, {*REDUCTION_FUNCTIONS, "combine"},
                            {*SCAN_FUNCTIONS, "combine"})

    def check(self, ir: KernelIR, options: LoweringOptions) -> None:
        """What this backend refuses: an op without a lowering; hl.inline_asm_elementwise interpreted."""
        refuse_unlowered(self, ir.body, "run this kernel with mode='eager', or use another op")
        for node in walk(ir.body):
            if options.interpret and node.op is Op.INLINE_ASM:
                raise exc.UnsupportedOperationError(
                    "hl.inline_asm_elementwise runs only on the GPU: Triton's CPU interpreter cannot execute PTX",
                    location=node.location, hint="run this kernel on CUDA tensors in compiled mode")
            if not options.interpret and node.op is Op.BREAKPOINT:
                raise exc.BreakpointInDeviceLoopRequiresInterpret(
                    "breakpoint() in a tile loop stops in Python's debugger, which a kernel compiled for the GPU "
                    "has no place for", location=node.location,
                    hint="run the kernel with mode='interpret' (each program stops) or mode='eager' (the tile "
                         "loop is Python)")

    def lower(self, ir: KernelIR, config: Config, options: LoweringOptions) -> LoweredKernel:
        """The backend's own pass (one-lane launch tiles out of every value: Triton's dots and
        layouts want 2-D blocks, ir/unit_tiles.py), then the source."""
        return lower_kernel(drop_unit_launch_tiles(ir), config, options)

    def load(self, lowered: LoweredKernel, options: LoweringOptions) -> LoadedKernel:
        return TritonKernel(write_generated(lowered.name, lowered.source, options.interpret), lowered, options.interpret)

    def compile_error(self, error: BaseException, lowered: LoweredKernel, loaded: LoadedKernel,
                      fallback: SourceLocation | None) -> Exception:
        return compile_error(error, loaded.path, lowered.source, loaded.function_name, lowered.locations, fallback)
