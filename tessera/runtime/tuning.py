"""Which Config a kernel call runs with: given, tuned, cached or heuristic.

One rule, in order:
1. `config=` on the kernel: that Config, always.
2. eager mode: the kernel's default Config (eager has nothing to tune).
3. compiled mode, autotune_effort != "none": per specialization key, the in-memory choice, else
   the disk cache, else a tuning run (among `configs=` when given), whose result is cached.
4. otherwise (interpret mode, effort "none"): `configs=[0]` when given, else the heuristic
   Config for this call's shapes. Interpret mode never tunes: timing the CPU interpreter says
   nothing about a GPU.

A tuning run that fails entirely warns and falls back to the heuristic Config: tuning must never
be what breaks a user's call.

The autotuner sits above the runtime (tessera/autotune), so the runtime does not import it: it
calls whatever `Tuner` was installed with `install_tuner` (tessera/__init__.py installs
tessera.autotune's). Without one, step 3 runs the heuristic Config. The space and the heuristic
Config are the backend's (`Backend.config_space`, `Backend.heuristic_config`).

>>> config = config_for_call(kernel, "compiled", (x,), {})   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses

import math

import sys
from typing import TYPE_CHECKING, Any, Protocol

from tessera import backends, exc, settings
from tessera.backends.config_space import KernelFacts
from tessera.config import Config, default_block_size
from tessera.runtime.call_keys import argument_key
from tessera.runtime.exact_facts import Memo, exact_facts
from tessera.runtime.fast_checks import facts_check
from tessera.runtime.repeated_calls import RepeatedCalls

if TYPE_CHECKING:
    from tessera.backends.base import Backend
    from tessera.backends.config_space import ConfigSpace
    from tessera.runtime.plan import KernelPlan

BACKEND = "triton"
"""The default backend (a kernel's `backend=` setting picks its own): the one whose config space,
heuristics and worker steps tuning uses when none is named."""


class Tuner(Protocol):
    """What the runtime asks of an autotuner (tessera/autotune/tuner.py is the one installed)."""

    def kernel_defined(self, kernel: Any) -> None:
        """A kernel was just defined (it may start workers ahead of its first call); never raises."""

    def stored_config(self, kernel: Any, bound: Any, at_least: str) -> Config | None:
        """The Config stored for this call (the disk cache), tuned with at least that effort, or None."""

    def tune(self, kernel: Any, bound: Any, effort: str) -> Config:
        """Tune this call now and store the result; AutotuneError when every candidate fails."""


_tuner: Tuner | None = None


def install_tuner(tuner: Tuner | None) -> Tuner | None:
    """Install `tuner` as the autotuner the runtime calls (None: none, and compiled calls run
    heuristic Configs); returns the one it replaces.

    >>> install_tuner(Autotuner())   # what tessera/__init__.py does     # doctest: +SKIP
    """
    global _tuner
    previous, _tuner = _tuner, tuner
    return previous


def kernel_defined(kernel: Any) -> None:
    """The hook `Kernel.__init__` calls: the tuner may start its workers now (never raises)."""
    if _tuner is not None:
        _tuner.kernel_defined(kernel)


class ConfigChoices:
    """The Config each call of one kernel runs with, by `choice_key` of its arguments, with an
    exact-facts memo in front (exact_facts.py): a repeat call skips building the key.

    The choices were made under one effort (`_effort`: TESSERA_AUTOTUNE_EFFORT, forced to "none"
    by TESSERA_CHECK_INDICES); `follow_settings` forgets them when those settings change.
    """

    def __init__(self) -> None:
        self.by_key: dict[Any, Config] = {}
        self.by_facts = Memo()
        self.calls = RepeatedCalls()  # whole call decisions (mode, Config, device), forgotten with the choices
        self.stamp: tuple[Any, ...] | None = None  # settings.call_stamp() when effort_settings was read
        self.effort_settings: tuple[bool, str | None] | None = None  # what the choices were made under

    def follow_settings(self, stamp: tuple[Any, ...]) -> None:
        """Forget the choices if TESSERA_CHECK_INDICES or TESSERA_AUTOTUNE_EFFORT changed since they
        were made; `stamp`: `settings.call_stamp()` now. A changed stamp alone (TESSERA_MODE, an
        `override` entered) keeps them: the settings are read only then, so a call whose stamp
        is unchanged pays one tuple compare."""
        if stamp == self.stamp:
            return
        self.stamp = stamp
        now = (bool(settings.get_under(stamp, "check_indices")), settings.get_under(stamp, "autotune_effort"))
        if now != self.effort_settings:
            if self.effort_settings is not None:
                self.clear()
            self.effort_settings = now

    def __len__(self) -> int:
        return len(self.by_key)

    def set(self, key: Any, config: Config) -> None:
        self.by_key[key] = config
        self.by_facts.clear()  # a memo entry may repeat the choice this replaces
        self.calls.clear()

    def clear(self) -> None:
        self.by_key.clear()
        self.by_facts.clear()
        self.calls.clear()


def config_for_call(kernel: Any, mode: str, args: tuple, kwargs: dict, stamp: tuple[Any, ...] | None = None) -> Config:
    """The Config this call of `kernel` runs with (the hook `Kernel.__call__` uses); `stamp`:
    `settings.call_stamp()` as the caller took it (None: taken now)."""
    given = kernel.settings.config
    if given is not None:
        return given
    if mode == "eager":
        return kernel.default_config()
    choices = kernel.config_choices
    choices.follow_settings(settings.call_stamp() if stamp is None else stamp)
    memo = choices.by_facts
    # keyword arguments: their names join the mode at the head of the facts
    site, values = ((mode, tuple(kwargs)), (*args, *kwargs.values())) if kwargs else (mode, args)
    keyed = kernel.settings.key is not None  # the user's key= decides too: the arguments' facts alone do not
    if memo.recent and not keyed:
        found = memo.quick(site, values, None)
        if found is not None:
            return found[0]
    facts = exact_facts(values, site) if memo.wanted() and not keyed else None
    if facts is not None:
        facts = tuple(facts)
        config = memo.lookup(facts)
        if config is not None:
            if memo.check_wanted(facts):  # a repeated choice: later repeats take a fast check
                check = facts_check(values)
                if check is not None:
                    memo.add_check(site, check, config, facts)
            return config
    fast_key = choice_key(kernel, mode, args, kwargs)
    config = choices.by_key.get(fast_key)
    if config is None:
        chosen = _choose(kernel, mode, kernel.bind_arguments(args, kwargs))
        if chosen is None:
            # No choice could be made for these arguments (planning the call failed: the call
            # itself raises in a moment, with the kernel's own error). Nothing is remembered, so
            # a later good call with the same key chooses afresh instead of inheriting this.
            return kernel.default_config()
        overrides = kernel.settings.autotune_config_overrides
        config = _cover_every_slot(kernel, chosen.merged(**overrides) if overrides else chosen)
        if not kernel.settings.configs:  # Tessera's choice, not the user's (see Config.chosen)
            config = config.chosen()
        choices.set(fast_key, config)
    if facts is not None:
        choices.by_facts.remember(facts, config)
    return config


def _cover_every_slot(kernel: Any, config: Config) -> Config:
    """Pad block_sizes to every slot the source declares: a config chosen from one call serves
    later calls of its key, which may take branches (and tile loops) the first call did not."""
    blocks = list(config.get("block_sizes") or [])
    wanted = kernel.block_slots().known_count()
    if len(blocks) >= wanted:
        return config
    return config.merged(block_sizes=blocks + [default_block_size()] * (wanted - len(blocks)))


def autotune(kernel: Any, args: tuple, kwargs: dict) -> Config:
    """Tune now (what `kernel.autotune(*args, **kwargs)` does), store the result, return it.

    Works in interpret mode too (timed by wall clock), so the pipeline runs on CPU-only machines.
    """
    if _tuner is None:
        raise exc.AutotuneError(f"cannot tune {kernel.fn.__name__}: no autotuner is installed",
                                hint="import tessera (it installs tessera.autotune), or pass config= instead")
    bound = kernel.bind_arguments(args, kwargs)
    effort = _effort(kernel)
    config = _tuner.tune(kernel, bound, "quick" if effort == "none" else effort)
    kernel.config_choices.set(choice_key(kernel, bound.mode, args, kwargs), config)
    return config


def heuristic_for(bound: Any, interpreted: bool = False) -> Config:
    """The heuristic Config for a bound kernel (what autotune_effort='none' runs); `interpreted`:
    for a call that runs in Triton's CPU interpreter (interpret mode), which wants wider blocks."""
    backend = bound.kernel.settings.backend
    space = config_space_for(bound.plan(Config()), backend, interpreted=interpreted and backend == "triton")
    return backends.get(backend).heuristic_config(space)


def config_space_for(plan: KernelPlan, backend_name: str = BACKEND, interpreted: bool = False) -> ConfigSpace:
    """The tuning space of a planned call, as the backend defines it.

    >>> config_space_for(softmax.bind(x).plan()).axis("reduction_loops[0]")   # doctest: +SKIP
    """
    backend = backends.get(backend_name)
    facts = kernel_facts(plan, backend)
    if interpreted:
        facts = dataclasses.replace(facts, interpreted=True, launches=tuple(
            dataclasses.replace(launch, interpreted=True) for launch in facts.launches))
    return backend.config_space(facts)


def kernel_facts(plan: KernelPlan, backend: Backend) -> KernelFacts:
    """What `plan` tells a config space and the heuristics; `backend` reads the op mix off the
    generated sources the plan names."""
    tensors = plan.tensors()
    tunables = tuple(plan.tunables)
    launch_dims = tuple(plan.launch_dims)
    if not launch_dims and len(plan.launches) == 1:
        # until plans list each launch's dims: a single launch tiles its tunable launch dims
        # (a fixed-size dim is missed, which only leaves a loop order untried)
        launch_dims = (sum(1 for t in tunables if t.role == "launch"),)
    facts = KernelFacts(
        tunables=tunables,
        launch_dims=launch_dims,
        reduction_extents=tuple(plan.reduction_extents),
        dtypes=tuple(dict.fromkeys(t.dtype for t in tensors)),
        largest_numel=max((t.numel() for t in tensors), default=0),
        on_gpu=any(t.is_cuda for t in tensors),
        programs=max((math.prod(launch.grid) for launch in plan.launches), default=0),
        whole_row=max(plan.whole_rows, default=0), user_tunables=tuple(plan.user_tunables),
        carried_row=max(plan.carried_rows, default=0), split_reduction=any(plan.split_reductions),
        score_tiles=max(plan.score_tiles, default=0),
        whole_elements=plan.whole_elements, unit_dims=tuple(plan.unit_dims),
        pipelined_loads=tuple(loop for launch in plan.pipelined_loads for loop in launch))
    facts = backend.read_op_mix(facts, [_read(launch.source_path) for launch in plan.launches])
    return dataclasses.replace(facts, launches=_launch_facts(plan, facts, backend))


def _launch_facts(plan: KernelPlan, facts: KernelFacts, backend: Backend) -> tuple[KernelFacts, ...]:
    """Per top-level tile loop with block_sizes slots of its own, the facts of its launch alone,
    when the call's launches use disjoint slots (else () : one launch, or launches sharing a
    block size). A launch whose blocks are all fixed (`block_size=`) has no facts here, but its
    whole rows are not taken for another launch's (layer_norm_bwd's second stage)."""
    groups = plan.launch_tunables
    if len(groups) < 2 or len(plan.launch_sources) != len(groups) or not any(groups):
        return ()
    flat = [index for group in groups for index in group]
    if len(flat) != len(set(flat)):
        return ()
    groups = tuple(list(group) for group in groups)
    for dim in facts.tunables:
        if dim.index not in flat:
            # an hl.register_block_size slot (its loops do not report it): the host registers it
            # before the top-level loop that uses it, and slots are numbered in source order
            following = next((group for group in groups if group and min(group) > dim.index), None)
            if following is None:
                return ()
            following.append(dim.index)
    by_index = {dim.index: dim for dim in facts.tunables}
    grids = {launch.source_path: math.prod(launch.grid) for launch in plan.launches}
    launches = []
    for position, (group, source) in enumerate(zip(groups, plan.launch_sources)):
        if not group:
            continue
        launch = dataclasses.replace(
            facts, tunables=tuple(by_index[i] for i in sorted(group) if i in by_index), uses_dot=False, uses_reduction=False,
            reduction_extents=tuple(e if p == position else 0 for p, e in enumerate(facts.reduction_extents)),
            programs=grids.get(source, facts.programs),
            whole_row=plan.whole_rows[position] if position < len(plan.whole_rows) else facts.whole_row,
            carried_row=plan.carried_rows[position] if position < len(plan.carried_rows) else facts.carried_row,
            score_tiles=plan.score_tiles[position] if position < len(plan.score_tiles) else facts.score_tiles,
            split_reduction=plan.split_reductions[position] if position < len(plan.split_reductions) else False,
            pipelined_loads=plan.pipelined_loads[position] if position < len(plan.pipelined_loads) else ())
        launches.append(backend.read_op_mix(launch, [_read(source)]))
    return tuple(launches)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def forget(kernel: Any) -> None:
    """Drop the in-memory choices of `kernel` (the disk cache stays)."""
    kernel.config_choices.clear()


def _choose(kernel: Any, mode: str, bound: Any) -> Config | None:
    """The Config for a call: stored, tuned, given or heuristic; None when the heuristic could
    not plan the call (its host code raised, or its tensors cannot run in this mode)."""
    effort = _effort(kernel)
    if mode == "compiled" and effort != "none" and _tuner is not None:
        stored = None if kernel.settings.force_autotune else \
            _tuner.stored_config(kernel, bound, at_least="given" if kernel.settings.configs else effort)
        if stored is not None:
            return stored
        try:
            return _tuner.tune(kernel, bound, effort)
        except exc.AutotuneError as error:
            print(f"[tessera] warning: {error.detail}; running the heuristic config instead", file=sys.stderr)
    if kernel.settings.configs:
        return kernel.settings.configs[0]
    try:
        return heuristic_for(bound, interpreted=mode == "interpret")
    except Exception as error:  # noqa: BLE001 - the real call reports the kernel's own error
        _log(f"{kernel.fn.__name__}: no heuristic config ({type(error).__name__}); using the default")
        return None


def _effort(kernel: Any) -> str:
    if settings.get("check_indices"):  # a debugging run: the checked launch takes an extra argument
        return "none"
    return settings.get("autotune_effort") or kernel.settings.autotune_effort


def choice_key(kernel: Any, mode: str, args: tuple, kwargs: dict) -> Any:
    """A cheap per-call key with the same meaning as `BoundKernel.specialization_key()` (no hashing)."""
    static = kernel.settings.static_shapes
    named = tuple([(k, argument_key(v, static)) for k, v in sorted(kwargs.items())]) if kwargs else ()
    key = (mode, tuple([argument_key(a, static) for a in args]), named, kernel.pinned_values(args, kwargs))
    return key if kernel.settings.key is None else (*key, ("key", kernel.settings.key(*args, **kwargs)))


def _log(message: str) -> None:
    if settings.log_enabled("autotune"):
        print(f"[tessera autotune] {message}", file=sys.stderr)


__all__ = ["BACKEND", "Tuner", "autotune", "choice_key", "config_for_call", "config_space_for", "forget", "heuristic_for",
           "install_tuner", "kernel_defined", "kernel_facts"]
