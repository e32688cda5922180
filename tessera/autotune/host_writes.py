"""Tuning a kernel whose host code writes into its own arguments: `x.add_(1)` before the tile
loop, `out.mul_(3)` or a host `hl.store` after it.

A run tunes on copies of the call's tensors and checks each candidate by replaying its plan's
launches on them (reference.py, bench_worker.py). A plan records the launches with the host's
writes into the arguments skipped (runtime/planning_writes.py: planning must leave the tensors
alone), so the replayed launches read what the tensors held *before* those writes, and their
results lacked what the host code does after the launches: every candidate of such a kernel was
"wrong", and the kernel could not be tuned (a compiled call warned and ran the heuristic Config).

One run of the host code on the copies, before anything is planned (`record_host_writes`),
costs one host-code run with its launches recorded, not run, and settles both halves:
- writes before the first launch: the copies' state at the first launch becomes the state the
  bench worker restores before every run (`tuning_storages`), and the plans are made on it, so
  host values computed from the written tensors are what the call computes; the call's own
  state is kept for the reference, which runs the whole call (`call_storages`, reference.py);
- writes after the first launch: every candidate is checked as host-finished (host_finish.py:
  the host code runs again here on what the launches wrote; its writes before the first launch
  are skipped there, since the restored state holds them).
Replaying the host code per candidate instead would apply its writes once per run. The user's
tensors are never written: all of this happens on the copies.

>>> record_host_writes(bind_on_copies(kernel.bind(x, out)))   # doctest: +SKIP
HostWrites(before_launch=True, after_launch=False)
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tessera.runtime.compiled import CompiledRunner, run_compiled
from tessera.runtime.planning_writes import written_into


@dataclasses.dataclass
class HostWrites:
    """Whether the host code writes into its arguments before and after its first launch."""

    before_launch: bool = False
    after_launch: bool = False


class _WritesSeen(TorchDispatchMode):
    """Notes each aten op that writes into one of `storages`, before or after the first launch."""

    def __init__(self, storages: set[int]) -> None:
        super().__init__()
        self.storages = storages
        self.launched = False
        self.seen = HostWrites()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if written_into(func, args, kwargs, self.storages) is not None:
            if self.launched:
                self.seen.after_launch = True
            else:
                self.seen.before_launch = True
        return func(*args, **kwargs)


class _FirstLaunchSnapshot(CompiledRunner):
    """Records the launches (never runs them); at the first, clones the tuning copies' state."""

    def __init__(self, working: Any, watch: _WritesSeen) -> None:
        super().__init__(working.kernel, working.mode, working.kernel.default_config(), working.kernel.block_slots(),
                         store=working._store, recorder=[])
        self.working = working
        self.watch = watch
        self.snapshot: list[torch.Tensor] | None = None

    def launch(self, tile_range: Any, body: Any, launch_index: int = 0) -> None:
        if self.snapshot is None:
            with torch.no_grad():
                self.snapshot = [copy.clone() for copy, _ in self.working.tuning_storages]
            self.watch.launched = True
        super().launch(tile_range, body, launch_index)


def record_host_writes(working: Any) -> HostWrites:
    """Run `working`'s host code once on its tuning copies (bind_on_copies) and adapt the run to
    the host's writes into the arguments (see the module docstring); the copies are left in the
    state the candidates' launches start from. A host code that raises changes nothing (planning
    reports its error)."""
    storages = {copy.untyped_storage().data_ptr() for copy, _ in working.tuning_storages}
    watch = _WritesSeen(storages)
    runner = _FirstLaunchSnapshot(working, watch)
    try:
        with working.same_random_draws(), watch:
            run_compiled(working.kernel, working.mode, working.args, working.kwargs, runner.config, working.device,
                         runner)
    except Exception:  # noqa: BLE001 - the plans raise it again, located, as failed candidates
        watch.seen = HostWrites()
    if watch.seen.before_launch and runner.snapshot is not None:
        working.call_storages = list(working.tuning_storages)
        working.tuning_storages = [(copy, state) for (copy, _), state in zip(working.tuning_storages, runner.snapshot)]
    working.host_writes_after_launch = watch.seen.after_launch
    with torch.no_grad():
        for copy, state in working.tuning_storages:
            copy.copy_(state)
    return watch.seen


__all__ = ["HostWrites", "record_host_writes"]
