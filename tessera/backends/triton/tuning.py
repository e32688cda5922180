"""The Triton backend's part in tuning: its config space, its heuristics, and its worker steps.

`TritonTuning` is a mixin of the Triton backend (`class TritonBackend(TritonTuning)`, backend.py):
the methods below are the tuning half of the `Backend` protocol (backends/base.py), which the
autotuner calls through `tessera.backends.get("triton")` and never imports Triton itself. The
knowledge lives in three modules beside this one: space.py (keys and choices), heuristics.py
(the first Config) and worker_support.py (what a worker process does with Triton).

Importing this module does not import triton (worker_support imports it inside its functions):
a worker process must choose Triton's interpreter mode in `prepare_worker` before triton loads.

>>> backend = tessera.backends.get("triton")                  # doctest: +SKIP
>>> space = backend.config_space(facts)                        # doctest: +SKIP
>>> backend.heuristic_config(space)                            # doctest: +SKIP
Config(block_sizes=[1], num_warps=8, num_stages=1, ...)
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from tessera.backends.candidates import CompileLaunch, RunLaunch
from tessera.backends.config_space import ConfigSpace, KernelFacts
from tessera.backends.triton import heuristics, worker_support
from tessera.backends.triton import space as triton_space
from tessera.config import Config


class TritonTuning:
    """The tuning methods of the Triton backend (see the module docstring)."""

    # -- the space and the first point (in the tuning process, and for untuned calls) ---------

    def config_space(self, facts: KernelFacts, enabled: Iterable[str] | None = None) -> ConfigSpace:
        """The tuning space of a call with these facts: every key Triton honours (`enabled`: a subset)."""
        return triton_space.config_space(facts, triton_space.ENABLED_KEYS if enabled is None else enabled)

    def heuristic_config(self, space: ConfigSpace) -> Config:
        """The heuristic point of `space` (every axis set): what an untuned call runs, where a search starts."""
        return heuristics.heuristic_config(space)

    def read_op_mix(self, facts: KernelFacts, sources: Iterable[str]) -> KernelFacts:
        """`facts` with the op mix (uses_dot, uses_reduction) read off generated Triton sources."""
        return triton_space.read_op_mix(facts, sources)

    # -- in a worker process --------------------------------------------------------------------

    def prepare_worker(self, interpret: bool) -> None:
        """First step of a fresh worker: import Triton with its interpreter or without, like the parent."""
        worker_support.import_triton(interpret)

    def warm_up_driver(self) -> None:
        """Load the GPU driver utilities and read the GPU's target (worker setup, after CUDA is up)."""
        worker_support.warm_driver()

    def compile_candidate(self, launches: Sequence[CompileLaunch], interpret: bool) -> float:
        """Compile a candidate's launches without running them (interpret: only import); seconds taken."""
        return worker_support.import_launches(launches) if interpret else worker_support.compile_launches(launches)

    def candidate_runner(self, launches: Sequence[RunLaunch]) -> Callable[[], None]:
        """One call that launches a candidate's kernels in order (what the bench worker checks and times)."""
        return worker_support.candidate_runner(launches)

    def warm_up_compiler(self) -> str:
        """Compile a tiny kernel as a candidate compiles (a process's first compile is slow); says how long."""
        return worker_support.warm_up_compiler()

    def warm_up_launch(self, device: torch.device) -> str:
        """Compile and launch a tiny kernel on `device` (a process's first launch is slow); says how long."""
        return worker_support.launch_warm_up_kernel(device)


__all__ = ["TritonTuning"]
