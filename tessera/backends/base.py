"""What a backend must provide: the boundary between the compiler and a code generator.

The compiler hands a backend a finished `KernelIR` (traced, passes applied) and a `Config`; the
backend checks what it supports, lowers the IR to source, loads that source into something
callable, and launches it. The runtime and the autotuner talk to backends only through this
protocol, so a second backend is one more implementation of it, not a fork of the compiler.

    backend = backends.get("triton")
    backend.check(ir, options)                     # UnsupportedOperationError at the user's line
    lowered = backend.lower(ir, config, options)   # source text + what the host needs to launch it
    loaded = backend.load(lowered, options)        # the callable kernel
    loaded.launch(grid, arguments)                 # run it
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Protocol

import sympy

from tessera.config import Config
from tessera.ir.graph import KernelIR, Op

if TYPE_CHECKING:
    from tessera.location import SourceLocation
    from collections.abc import Iterable, Sequence

    import torch

    from tessera.backends.candidates import CompileLaunch, RunLaunch
    from tessera.backends.config_space import ConfigSpace, KernelFacts


@dataclasses.dataclass(frozen=True)
class LoweringOptions:
    """How to lower, besides the Config: the mode and the kernel settings a backend reads.

    `interpret` is True when the code runs on the CPU (Triton's interpreter, Pallas's
    `interpret=True`); `dot_precision` is the kernel's `dot_precision=` setting, `fp8_fast_accum`
    its `fp8_fast_accum=` (fp8 products summed in the tensor cores' reduced precision).
    """

    interpret: bool
    dot_precision: str = "tf32"
    fp8_fast_accum: bool = False
    check_indices: bool = False  # TESSERA_CHECK_INDICES: report out-of-range index tensors


@dataclasses.dataclass(frozen=True)
class ScratchBuffer:
    """A device buffer the host passes to each launch after the kernel's own arguments: `per_program`
    elements of `dtype` for each program of the grid, filled with zeros when `zeroed` (else left
    unwritten). E.g. split-K's partial sums and arrival counters (ir/split_reduction.py)."""

    dtype: torch.dtype
    per_program: int
    zeroed: bool = False


@dataclasses.dataclass(frozen=True)
class LoweredKernel:
    """A lowered launch: source text plus what the host needs to run it.

    `guards` are conditions the generated code relies on beyond the IR's own (a layout the chosen
    Config needs, e.g. TMA's 16-byte strides): the runtime checks them with the IR's guards.
    `grid` holds the launch grid's sizes as expressions over the IR's host symbols.
    `locations` maps 1-based lines of `source` to the kernel line that produced them.
    """

    name: str
    source: str
    grid: tuple[sympy.Expr, ...]
    guards: tuple[tuple[sympy.Basic, str], ...] = ()
    locations: dict[int, SourceLocation] = dataclasses.field(default_factory=dict)
    launch_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # e.g. num_warps
    location: SourceLocation | None = None  # the tile loop's line, for errors no generated line explains
    # with `check_indices`: the kernel takes one more argument, an int32 flag per checked access
    # (set on the device when an unmasked lane's index was out of range); the access's line
    index_checks: tuple[SourceLocation | None, ...] = ()
    scratch: tuple[ScratchBuffer, ...] = ()  # buffers the host allocates for each launch (ScratchBuffer)


class LoadedKernel(Protocol):
    """A lowered kernel made callable: `launch(grid, arguments)` runs it once."""

    path: str              # where the source lives (errors and `to_code` read it)
    function_name: str

    def launch(self, grid: tuple[int, ...], arguments: list[Any]) -> None:
        """Run the kernel once.

        A loaded kernel may also offer `direct_launch(grid, arguments, tensor_slots)`: a function
        `f(values) -> bool` that repeats this launch with the tensors taken from `values` at the
        slots' indexes and every other argument unchanged, returning False (nothing launched)
        when it cannot (the caller then calls `launch`); or None. The runtime asks for one when
        it has proved the non-tensor arguments fixed (exact_facts.py). With `pointers=True` the
        values at those indexes are the tensors' data pointers, which the caller has checked lie
        on the device the launch's tensors are on now (fast_checks.py); None where that cannot be.
        """


class Backend(Protocol):
    """One code generator. `tessera.backends.get(name)` returns the registered instance."""

    name: str
    supported_ops: frozenset[Op]

    def lowers(self, op: Op, fn: str | None = None) -> bool:
        """Whether a lowering exists for `op` (and, for elementwise ops and reductions, function `fn`)."""

    def check(self, ir: KernelIR, options: LoweringOptions) -> None:
        """Raise `UnsupportedOperationError` (at the node's line) for what this backend cannot run."""

    def lower(self, ir: KernelIR, config: Config, options: LoweringOptions) -> LoweredKernel:
        """The IR under `config` as source text, deterministic for equal inputs."""

    def load(self, lowered: LoweredKernel, options: LoweringOptions) -> LoadedKernel:
        """Make the lowered source callable: write it where it is loaded from (a backend may defer the
        import and compile to the first launch, so that planning stays cheap and side-effect free)."""

    def compile_error(self, error: BaseException, lowered: LoweredKernel, loaded: LoadedKernel,
                      fallback: SourceLocation | None) -> Exception:
        """A failure of the backend's compiler on generated code, as a located TesseraError."""

    # -- tuning (used by tessera/autotune)

    def config_space(self, facts: KernelFacts, enabled: Iterable[str] | None = None) -> ConfigSpace:
        """The Config keys this backend tunes for a call with these facts, each with its choices
        (`enabled`: only these keys)."""

    def heuristic_config(self, space: ConfigSpace) -> Config:
        """A good first point of `space`: what an untuned call runs and where a search starts."""

    def read_op_mix(self, facts: KernelFacts, sources: Iterable[str]) -> KernelFacts:
        """`facts` with `uses_dot` / `uses_reduction` read off this backend's generated sources."""

    def prepare_worker(self, interpret: bool) -> None:
        """First step in a fresh tuning worker process, before anything else of this backend runs
        there (e.g. choose Triton's interpreter, which is fixed when triton is imported)."""

    def warm_up_driver(self) -> None:
        """Worker setup, after CUDA is up: load what a first compile or launch would (best effort)."""

    def compile_candidate(self, launches: Sequence[CompileLaunch], interpret: bool) -> float:
        """Compile a candidate's launches without running them (interpret: only load them); seconds."""

    def candidate_runner(self, launches: Sequence[RunLaunch]) -> Callable[[], None]:
        """One call that runs a candidate's launches in order (what the bench worker checks and times)."""

    def warm_up_compiler(self) -> str:
        """Pay a process's first-compile costs with a tiny kernel; says how long the parts took."""

    def warm_up_launch(self, device: torch.device) -> str:
        """Pay a process's first-launch costs with a tiny kernel on `device`; says how long it took."""


BackendFactory = Callable[[], Backend]
