"""Which candidates to time, in what order, until the effort level or the time budget says stop.

The search sees the kernel only through `evaluate(configs, deadline) -> [ms or None]` (None: the
candidate failed), so it is tested with a pure cost function and runs unchanged over the real
compile-and-benchmark pipeline. Candidates go out in batches so the pipeline can compile a batch
in parallel. Every random choice comes from one `random.Random(seed)`; with a deterministic
`evaluate` the same seed visits the same configs in the same order.

- "quick": the heuristic (and user) seeds, then the one-step neighbours of the best (every
  axis's first move before any axis's second, so each axis is tried), then of the new best if
  it moved: about 10-30 candidates. With a single seed its neighbours go out in
  the seed's batch: they do not depend on its time, and the compile workers would otherwise
  idle while it alone compiles and runs.
- "full": the quick search first (so a full search never ends worse than a quick one: on the
  H100 a 15 s full search that began with a uniform random population timed only that
  population, whose members ran 1.2-20x slower than the heuristic), then a population of
  mutants of the best few and uniform random points, then a pattern search (one-step, then
  two-step neighbours of the best) alternating with small genetic generations (crossover of the
  best few plus mutation) until the budget is spent or nothing improves for a while.

>>> result = search(space, lambda configs, deadline: [cost(c) for c in configs], effort="quick",
...                 seeds=[space.default()], budget_seconds=10, seed=0)   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Callable, Iterable

from tessera.backends.config_space import ConfigSpace
from tessera.config import Config

Evaluate = Callable[[list[Config], float], list["float | None"]]

QUICK_NEIGHBORS = 16        # first ring around the seed
QUICK_SECOND_RING = 8       # around a better point found in the first ring
FULL_POPULATION = 16
FULL_OFFSPRING = 8
FULL_PATIENCE = 3           # generations without improvement before a full search stops
IMPROVEMENT = 0.01          # a move must gain 1% to count as better (timing noise)


@dataclasses.dataclass(frozen=True)
class Trial:
    """One timed candidate: its time in ms, or None when it failed."""

    config: Config
    time_ms: float | None


@dataclasses.dataclass
class SearchResult:
    best: Config | None
    best_ms: float
    trials: list[Trial]

    def ranked(self) -> list[Trial]:
        """Successful trials, fastest first."""
        return sorted((t for t in self.trials if t.time_ms is not None), key=lambda t: t.time_ms)


class _Search:
    """State shared by the strategies: what was tried, the best so far, the clock."""

    def __init__(self, space: ConfigSpace, evaluate: Evaluate, budget_seconds: float,
                 clock: Callable[[], float]) -> None:
        self.space = space
        self.evaluate = evaluate
        self.clock = clock
        self.deadline = clock() + budget_seconds
        self.trials: list[Trial] = []
        self.seen: set[Config] = set()
        self.best: Config | None = None
        self.best_ms = math.inf

    def out_of_time(self) -> bool:
        return self.clock() >= self.deadline

    def fresh(self, configs: Iterable[Config], limit: int | None = None, seeds: bool = False) -> list[Config]:
        """Configs not tried yet, normalized and within the device's register and shared memory
        budgets, in order. `seeds` (the heuristic Config, the user's configs=) skip the budget
        check: what a call runs untuned is always timed, and a given Config fails by its own error."""
        batch: list[Config] = []
        for config in configs:
            config = self.space.normalize(config)
            if config in self.seen or config in batch or not (seeds or self.space.fits_device(config)):
                continue
            batch.append(config)
            if limit is not None and len(batch) >= limit:
                break
        return batch

    def run_batch(self, configs: list[Config]) -> bool:
        """Time a batch; True when it found a better config (by more than the noise margin)."""
        if not configs or self.out_of_time():
            return False
        self.seen.update(configs)
        times = self.evaluate(configs, self.deadline)
        improved = False
        for config, time_ms in zip(configs, times):
            self.trials.append(Trial(config, time_ms))
            if time_ms is not None and time_ms < self.best_ms * (1 - IMPROVEMENT):
                self.best, self.best_ms, improved = config, time_ms, True
            elif time_ms is not None and self.best is None:
                self.best, self.best_ms = config, time_ms
        return improved

    def result(self) -> SearchResult:
        return SearchResult(self.best, self.best_ms, self.trials)


def search(space: ConfigSpace, evaluate: Evaluate, *, effort: str, seeds: list[Config],
           budget_seconds: float, seed: int = 0, clock: Callable[[], float] = time.monotonic) -> SearchResult:
    """Run the `effort` strategy ("quick" or "full") from `seeds`; see the module docstring."""
    state = _Search(space, evaluate, budget_seconds, clock)
    rng = random.Random(seed)
    if effort == "quick":
        _quick(state, seeds)
        return state.result()
    if effort == "full":
        _quick(state, seeds)
        _full(state, rng)
        return state.result()
    state.run_batch(state.fresh(seeds, seeds=True))
    return state.result()


def _quick(state: _Search, seeds: list[Config]) -> None:
    first = state.fresh(seeds, seeds=True)
    if len(first) == 1:
        center = first[0]
        improved = state.run_batch(first + state.fresh(state.space.neighbors_interleaved(center), QUICK_NEIGHBORS))
    else:
        state.run_batch(first)
        if state.best is None:
            return
        center = state.best
        improved = state.run_batch(state.fresh(state.space.neighbors_interleaved(center), QUICK_NEIGHBORS))
    if improved and state.best is not None and state.best != center:
        state.run_batch(state.fresh(state.space.neighbors_interleaved(state.best), QUICK_SECOND_RING))


def _full(state: _Search, rng: random.Random) -> None:
    # half the population near the best points found so far, half anywhere in the space
    parents = [trial.config for trial in state.result().ranked()[:4]] or [state.space.default()]
    population = [state.space.mutate(rng.choice(parents), rng) for _ in range(FULL_POPULATION // 2)]
    population += [state.space.random_config(rng) for _ in range(FULL_POPULATION - len(population))]
    state.run_batch(state.fresh(population))
    stale = 0
    while stale < FULL_PATIENCE and not state.out_of_time() and state.best is not None:
        improved = _pattern_step(state)
        if not improved:
            improved = state.run_batch(_offspring(state, rng))
        stale = 0 if improved else stale + 1


def _pattern_step(state: _Search) -> bool:
    """Move to the best one-step neighbour while any improves; then try two-step moves once."""
    assert state.best is not None
    improved_any = False
    while not state.out_of_time():
        if not state.run_batch(state.fresh(state.space.neighbors(state.best))):
            break
        improved_any = True
    if not improved_any:
        improved_any = state.run_batch(state.fresh(state.space.neighbors(state.best, step=2)))
    return improved_any


def _offspring(state: _Search, rng: random.Random) -> list[Config]:
    """A generation bred from the fastest few trials: crossover of two parents, then mutation."""
    parents = [trial.config for trial in state.result().ranked()[:4]]
    if not parents:
        return []
    children = []
    for _ in range(FULL_OFFSPRING * 3):  # some children repeat tried points; draw extra
        first, second = rng.choice(parents), rng.choice(parents)
        children.append(state.space.mutate(state.space.crossover(first, second, rng), rng))
    return state.fresh(children, FULL_OFFSPRING)


__all__ = ["SearchResult", "Trial", "search"]
