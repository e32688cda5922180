"""The accuracy reference of a tuning run, and the copies of the arguments it is tuned on.

A run tunes on copies of the call's tensors (`bind_on_copies`: one copy per storage, so views
still alias, each with a pristine twin to undo in-place writes), and compares every candidate
with one reference result computed on them in the parent (`tuning_reference`): the kernel's
`autotune_baseline_fn`, else eager mode with big blocks (`reference_config`), else, where eager
would take too long, the compiled result of the Config the call would run untuned.

>>> working = bind_on_copies(kernel.bind(x))                                   # doctest: +SKIP
>>> reference, source = tuning_reference(working, reference_config(space, heuristic), heuristic)
"""
from __future__ import annotations

import math
from typing import Any

import torch

from tessera import exc
from tessera.autotune import progress
from tessera.autotune.bench_worker import flatten_tensors
from tessera.backends.config_space import ConfigSpace
from tessera.config import Config
from tessera.runtime.eager import run_eager

REFERENCE_TILES = 256
"""The eager reference runs with blocks grown until about this many tiles remain: eager mode
costs Python time per tile (an 8192 x 8192 add in 32 x 32 tiles is 65536 iterations)."""


def reference_config(space: ConfigSpace, start: Config) -> Config:
    """`start` with big blocks, for the eager reference (any valid Config computes the same result).

    Each step doubles the block of the tunable dim with the most tiles, until about
    REFERENCE_TILES tiles (over all tunable dims, inner loops included) remain or no block can
    grow within its axis; so a tile holds about 1/256 of the work and eager's per-tile Python
    cost stays small.

    >>> reference_config(space_of_an_8192_square_add, Config(block_sizes=[4, 1024]))  # doctest: +SKIP
    Config(block_sizes=[256, 1024], ...)
    """
    blocks = list(start.get("block_sizes") or [])
    limits = {}
    for dim in space.facts.tunables:
        name = f"block_sizes[{dim.index}]"
        if dim.index < len(blocks) and name in {axis.name for axis in space.axes}:
            limits[dim.index] = (max(dim.extent, 1), space.axis(name).choices[-1])

    def tiles(index: int) -> int:
        return -(-limits[index][0] // blocks[index])

    while math.prod(tiles(index) for index in limits) > REFERENCE_TILES:
        growable = [(tiles(index), index) for index in limits if blocks[index] < limits[index][1]]
        if not growable:
            break
        blocks[max(growable)[1]] *= 2
    if not limits:
        return start
    config = start.merged(block_sizes=blocks)
    try:
        space.validate(config)
    except exc.ConfigError:
        return start
    return config


def tuning_reference(working: Any, reference_config: Config | None,
                     fallback: Config | None) -> tuple[list[torch.Tensor], str]:
    """The accuracy reference of a tuning run on the tuning copies, and where it came from: the
    kernel's `autotune_baseline_fn`, else eager mode with `reference_config`, else (eager too
    slow) the compiled result of `fallback`, the Config the call would run untuned."""
    baseline = working.kernel.settings.autotune_baseline_fn
    if baseline is not None:
        return result_on_copies(working, lambda: baseline(*working.args, **working.kwargs)), "autotune_baseline_fn"
    if fallback is not None and (reference_config is None or not eager_is_affordable(working, reference_config)):
        return (compiled_reference(working, fallback),
                f"compiled with {fallback} (eager would take too long)")
    return eager_reference(working, reference_config), f"eager with {reference_config}"


def baseline_tolerance(given: Any) -> tuple[float, float] | None:
    """(atol, rtol) from a kernel's autotune_baseline_atol/rtol settings (either one given; 1e-2
    for the other), else None: the accuracy gate's tolerance by dtype."""
    if given.autotune_baseline_atol is None and given.autotune_baseline_rtol is None:
        return None
    return (1e-2 if given.autotune_baseline_atol is None else float(given.autotune_baseline_atol),
            1e-2 if given.autotune_baseline_rtol is None else float(given.autotune_baseline_rtol))


EAGER_REFERENCE_TILES = 4096
"""Above this many eager tile iterations (programs x inner-loop steps) the accuracy reference is
the heuristic Config's compiled result: eager attention at 4x32x4096x4096 took 3 minutes."""


def eager_is_affordable(working: Any, config: Config | None) -> bool:
    """Whether eager mode runs `config` in at most EAGER_REFERENCE_TILES tile iterations (a plan:
    its launches' program counts times the steps of each inner loop)."""
    try:
        plan = working.plan(config or Config())
    except Exception:  # noqa: BLE001 - then let the eager run itself report what is wrong
        return True
    if any(dim.role == "split" for dim in plan.tunables):
        # a loop shared by programs tiles sizes loaded from memory (unknown here), and its grid
        # says nothing of its work: eager walked 460K tiles in 83 s for a 64-expert MoE
        return False
    programs = sum(math.prod(launch.grid) for launch in plan.launches)
    blocks = list((config or Config()).get("block_sizes") or [])
    steps = math.prod(-(-max(dim.extent, 1) // max(blocks[dim.index] if dim.index < len(blocks) else 1, 1))
                      for dim in plan.tunables if dim.role == "loop")
    return programs * steps <= EAGER_REFERENCE_TILES


def compiled_reference(working: Any, config: Config) -> list[torch.Tensor]:
    """The compiled result of `config` on the tuning copies (restored afterwards)."""
    return result_on_copies(working, lambda: working.run(config))


def eager_reference(working: Any, config: Config | None) -> list[torch.Tensor]:
    """The kernel's eager result on the tuning copies, run with `config` (big blocks: fast).

    Falls back to the kernel's default blocks (`BoundKernel.reference`) if that run fails.
    """
    kernel = working.kernel
    if config is not None:
        try:
            with working.same_random_draws():  # the seeds the plans drew (torch.rand_like & co.)
                return result_on_copies(working, lambda: run_eager(kernel.fn, working.args, working.kwargs,
                                                                    kernel.block_slots(), config, working.device,
                                                                    kernel.uses_jagged_tile))
        except Exception as error:  # noqa: BLE001 - the default blocks below say what is really wrong
            progress.log(f"eager reference with {config} failed ({type(error).__name__}); using default blocks")
    return flatten_tensors(working.reference())


def result_on_copies(working: Any, run: Any) -> list[torch.Tensor]:
    """The tensors `run()` returns on the tuning copies. The copies are restored from their
    pristine twins afterwards (an in-place kernel wrote them), and an output that aliases one of
    them is cloned first. The run starts from the call's own state (`call_storages`: the host
    code writes into its arguments before its launches, host_writes.py) where that differs."""
    with torch.no_grad():
        for copy, state in getattr(working, "call_storages", ()):
            copy.copy_(state)
    try:
        result = run()
        shared = {w.untyped_storage().data_ptr() for w, _ in working.tuning_storages}
        return [t.clone() if t.untyped_storage().data_ptr() in shared else t for t in flatten_tensors(result)]
    finally:
        with torch.no_grad():
            for copy, pristine in working.tuning_storages:
                copy.copy_(pristine)


# -- tuning copies of the arguments ------------------------------------------------------------

def bind_on_copies(bound: Any) -> Any:
    """Bind the kernel to copies of the call's tensors (one copy per storage, so views still alias).

    The copy's `tuning_storages` lists (working storage, pristine copy) pairs for the bench worker.
    """
    storages: dict[tuple[str, int], tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            key = (str(value.device), storage.data_ptr())
            if key not in storages:
                storages[key] = (storage.clone(), storage.clone())
            view = torch.empty(0, dtype=value.dtype, device=value.device)
            return view.set_(storages[key][0], value.storage_offset(), value.size(), value.stride())
        if isinstance(value, (list, tuple)):
            return type(value)(copy(v) for v in value)
        return value

    with torch.no_grad():
        args = tuple(copy(a) for a in bound.args)
        kwargs = {k: copy(v) for k, v in bound.kwargs.items()}
    working = bound.kernel.bind_arguments(args, kwargs)
    working.tuning_storages = [(_as_bytes(w), _as_bytes(p)) for w, p in storages.values()]
    return working


def _as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over a whole storage (what the worker copies to undo in-place writes)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (storage.nbytes(),), (1,))


__all__ = ["EAGER_REFERENCE_TILES", "REFERENCE_TILES", "baseline_tolerance", "bind_on_copies", "compiled_reference",
           "eager_is_affordable", "eager_reference", "reference_config", "result_on_copies", "tuning_reference"]
