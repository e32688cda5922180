"""The accuracy check of a kernel whose results host code finishes after its launches.

    grad_weight_blocks = torch.empty([num_blocks, n])     # host code
    for mb in hl.tile(m, block_size=m_block): ...         # the launch writes one partial row per block
    grad_weight = grad_weight_blocks.sum(dim=0)           # host code: finishes the result

A candidate's plan records the launches without running them, so `plan.result`'s `grad_weight`
was summed from unwritten memory and no replay of the launches ever writes it: comparing it
with the reference failed every candidate. Nor can the launches' own outputs be compared with
the reference's: the partial buffer is `[num_blocks, n]`, and `num_blocks` depends on the
candidate's block size.

So the check runs the host code after the replayed launches, which is what the user's call
does: the bench worker runs the candidate's launches once (`BenchTask.run_only`), writing into
the plan's tensors (shared with this process), then `finish_on_host` runs the kernel's host
code again here with a runner that, instead of launching, copies what the worker's launch wrote
into the fresh call's arguments (same Config, same inputs: the host code allocates the same
buffers in the same order). Its return value is the candidate's final result, compared with the
reference (eager, or the heuristic Config compiled) as every other result is. This costs one
host-code run per candidate (its launches hit the bound kernel's variants: no tracing, no
compiling) and no eager run; kernels whose results the launches write directly (nearly all)
keep the check inside the worker, untouched.

Limits: copies happen at each launch with the buffers' final contents, so host code *between*
two launches that reads an earlier launch's output sees the final contents (such kernels are
rare; see `KernelPlan.reads_results_on_host`); host code reading an input the kernel modifies
in place sees it modified.

>>> if finished_on_host(plan): result = finish_on_host(bound, plan)   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tessera.autotune.bench_worker import flatten_tensors
from tessera.compiler import flat_values
from tessera.runtime.compiled import CompiledRunner, run_compiled
from tessera.runtime.plan import KernelPlan, LaunchRecord
from tessera.runtime.planning_writes import SkipArgumentWrites, argument_storages


def _launch_storages(plan: KernelPlan) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in plan.tensors()}


def finished_on_host(plan: KernelPlan) -> bool:
    """Whether some result tensor of `plan` is not memory any launch touches (host code made it).

    >>> finished_on_host(layer_norm_bwd.bind(*inputs).plan(config))   # doctest: +SKIP
    True
    """
    touched = _launch_storages(plan)
    return any(t.numel() > 0 and t.untyped_storage().data_ptr() not in touched for t in flatten_tensors(plan.result))


@dataclasses.dataclass
class Finished:
    """What `finish_on_host` returns."""

    results: list[torch.Tensor]  # the kernel's final result, flattened
    stored: list[torch.Tensor]   # the plan's tensors its launches store into (each once)

    def outputs_outside(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """`stored` less what lies in `inputs`' storages (the tuning inputs, as uint8 tensors):
        the buffers host code allocated for the launches to write."""
        kept = {t.untyped_storage().data_ptr() for t in inputs}
        return [t for t in self.stored if t.untyped_storage().data_ptr() not in kept]


class _CopyingRunner(CompiledRunner):
    """Runs host code whose launches were already run elsewhere: at each launch it copies the
    recorded launch's tensor arguments (what the worker wrote) into this call's arguments."""

    def __init__(self, bound: Any, config: Any, launches: list[LaunchRecord]) -> None:
        # a recorder (unused) keeps launches off the exact-facts memo, which would skip run_variant
        super().__init__(bound.kernel, bound.mode, config, bound.kernel.block_slots(), store=bound._store,
                         recorder=[])
        self.launches = launches
        self.position = 0
        self.stored: dict[int, torch.Tensor] = {}
        self._values: list[Any] = []
        self.skipped = SkipArgumentWrites(set())  # the host's writes skipped until the first launch

    def launch(self, tile_range: Any, body: Any, launch_index: int = 0) -> None:
        values = [cell.cell_contents for cell in body.__closure__ or ()]
        self._values = [value for _, value in flat_values(body.__code__.co_freevars, values)]  # what `variant.stored_values` indexes
        super().launch(tile_range, body, launch_index)

    def run_variant(self, variant: Any, arguments: list[Any], grid: tuple[int, ...],
                    remembered_binary: list[Any] | None = None) -> None:
        self.skipped.storages.clear()  # from the first launch on, the host's writes are this call's
        if self.position >= len(self.launches):
            raise RuntimeError("the host code launched more kernels than its plan recorded")
        recorded = self.launches[self.position]
        self.position += 1
        if len(recorded.arguments) != len(arguments):
            raise RuntimeError("a launch's arguments differ from its plan's")
        stored = [self._values[p] for p in variant.stored_values
                  if p < len(self._values) and isinstance(self._values[p], torch.Tensor)]
        with torch.no_grad():
            for new, old in zip(arguments, recorded.arguments):
                if isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor) and \
                        any(_same_view(new, target) for target in stored):
                    self.stored.setdefault(id(old), old)
                if isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor) and not _same_view(new, old):
                    if new.shape != old.shape or new.dtype != old.dtype:
                        raise RuntimeError("a launch's tensors differ from its plan's")
                    new.copy_(old)


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)


def finish_on_host(bound: Any, plan: KernelPlan) -> Finished:
    """The kernel's final result (flattened) from what `plan`'s launches wrote: its host code run
    again on `bound`'s arguments, each launch replaced by copying the recorded launch's tensors;
    and which of the plan's tensors the launches store into."""
    runner = _CopyingRunner(bound, plan.config, plan.launches)
    # the host's writes into its arguments before the first launch are in the state the launches
    # started from (host_writes.py): applied again, `x.add_(1)` would count twice, `out.zero_()`
    # would erase what the launches wrote
    runner.skipped = SkipArgumentWrites(argument_storages((*bound.args, *bound.kwargs.values())))
    with runner.skipped:
        result = run_compiled(bound.kernel, bound.mode, bound.args, bound.kwargs, plan.config, bound.device, runner)
    if runner.position != len(plan.launches):
        raise RuntimeError("the host code launched fewer kernels than its plan recorded")
    return Finished(flatten_tensors(result), list(runner.stored.values()))


__all__ = ["Finished", "finish_on_host", "finished_on_host"]
