"""The search over a tuning space: seeded and repeatable, quick then full, within its budget
(a fake cost, a bowl, stands in for timing)."""
from __future__ import annotations


import pytest

from tessera import backends, settings
from tessera.autotune.search import search
from tessera.config import Config

import autotune_fakes

TRITON = backends.get("triton")  # the space and the heuristics are the backend's

pytestmark = pytest.mark.usefixtures("private_cache")


def _bowl(config: Config) -> float:
    """A cost with its minimum at block_sizes=[128, 64, 32], num_warps=4."""
    blocks = config["block_sizes"]
    return (1 + abs(blocks[0].bit_length() - 8) + abs(blocks[1].bit_length() - 7) + abs(blocks[2].bit_length() - 6)
            + abs(config["num_warps"].bit_length() - 3) + 0.1 * config["num_stages"])


def _run_search(effort: str, seed: int, budget: float = 1e9):
    space = TRITON.config_space(autotune_fakes.matmul_facts(), enabled={"block_sizes", "num_warps", "num_stages"})
    clock = iter(range(10 ** 6))
    return search(space, lambda configs, deadline: [_bowl(c) for c in configs], effort=effort,
                  seeds=[TRITON.heuristic_config(space)], budget_seconds=budget, seed=seed, clock=lambda: next(clock))


def test_search_with_the_same_seed_visits_the_same_configs_in_the_same_order():
    first, second = _run_search("full", seed=7), _run_search("full", seed=7)
    assert [t.config for t in first.trials] == [t.config for t in second.trials]


def test_search_with_another_seed_draws_another_population():
    assert [t.config for t in _run_search("full", 1).trials] != [t.config for t in _run_search("full", 2).trials]


def test_full_search_finds_the_bottom_of_a_bowl():
    result = _run_search("full", seed=0)
    assert result.best == Config(block_sizes=[128, 64, 32], num_warps=4, num_stages=1)


def test_quick_search_stays_small_and_improves_on_the_seed():
    result = _run_search("quick", seed=0)
    assert len(result.trials) <= 30
    assert result.best_ms < _bowl(result.trials[0].config)


def _batches_of(effort: str, space, seed: int = 0) -> list[list[Config]]:
    """The batches a search from the heuristic sends out under the bowl cost."""
    batches = []

    def evaluate(configs, deadline):
        batches.append(configs)
        return [_bowl(c) for c in configs]

    search(space, evaluate, effort=effort, seeds=[TRITON.heuristic_config(space)], budget_seconds=1e9, seed=seed)
    return batches


def test_quick_search_sends_a_single_seed_out_with_its_neighbours_in_one_batch():
    space = TRITON.config_space(autotune_fakes.matmul_facts(), enabled={"block_sizes", "num_warps", "num_stages"})
    batches = _batches_of("quick", space)
    seed = TRITON.heuristic_config(space)
    assert batches[0][0] == space.normalize(seed)
    fitting = [space.normalize(c) for c in space.neighbors_interleaved(seed) if space.fits_device(c)]
    assert batches[0][1:] == fitting[:len(batches[0]) - 1]
    assert len(batches[0]) >= 8


def test_the_first_ring_of_a_quick_search_moves_every_axis_of_a_matmul_space():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    seed = space.normalize(TRITON.heuristic_config(space))
    assert len(list(space.neighbors(seed))) > 16  # more one-step moves than the first ring holds
    ring = _batches_of("quick", space)[0][1:]
    moved = {name for config in ring for name, value in space.values_of(config).items()
             if value != space.values_of(seed)[name]}
    assert moved == {axis.name for axis in space.axes if len(axis.choices) > 1}


def test_a_dot_tile_that_leaves_a_thread_more_than_128_accumulator_elements_is_not_tried():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    heuristic = TRITON.heuristic_config(space)  # 128 x 256 with 8 warps: 128 per thread
    assert space.fits_device(heuristic)
    assert not space.fits_device(heuristic.merged(num_warps=4))  # 256 per thread: spills
    assert space.fits_device(heuristic.merged(block_sizes=[128, 128, 64], num_warps=4))
    ring = _batches_of("quick", space)[0]
    assert all(space.fits_device(config) for config in ring)


def test_a_seed_is_timed_even_when_it_does_not_fit_the_tuners_register_budget():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    spilling = TRITON.heuristic_config(space).merged(num_warps=4)
    batches = []
    search(space, lambda configs, deadline: batches.append(configs) or [1.0] * len(configs), effort="quick",
           seeds=[spilling], budget_seconds=1e9)
    assert batches[0][0] == space.normalize(spilling) and not space.fits_device(spilling)


def test_interleaved_neighbours_are_the_same_moves_in_another_order():
    space = TRITON.config_space(autotune_fakes.matmul_facts())
    seed = TRITON.heuristic_config(space)
    assert sorted(map(repr, space.neighbors_interleaved(seed))) == sorted(map(repr, space.neighbors(seed)))


def test_a_full_search_begins_with_the_quick_search_and_never_ends_worse():
    quick, full = _run_search("quick", seed=0), _run_search("full", seed=0)
    assert [t.config for t in full.trials[:len(quick.trials)]] == [t.config for t in quick.trials]
    assert full.best_ms <= quick.best_ms and len(full.trials) > len(quick.trials)


def test_a_full_search_population_holds_mutants_of_the_best_beside_random_points():
    space = TRITON.config_space(autotune_fakes.matmul_facts(), enabled={"block_sizes", "num_warps", "num_stages"})
    batches = _batches_of("full", space)
    quick_trials = len(_run_search("quick", seed=0).trials)
    done = 0
    for number, batch in enumerate(batches):  # find the population: the batch after the quick search's
        done += len(batch)
        if done == quick_trials:
            population = batches[number + 1]
            break
    best = min((c for b in batches[:number + 1] for c in b), key=_bowl)
    near = [c for c in population if sum(a != b for a, b in zip(space.values_of(c).values(),
                                                                    space.values_of(best).values())) <= 2]
    assert len(near) >= 2 and len(population) >= 8


def test_search_stops_when_the_budget_is_spent():
    result = _run_search("full", seed=0, budget=3)  # the fake clock ticks once per batch
    assert len(result.trials) < len(_run_search("full", seed=0).trials)


def test_settings_declare_the_autotune_seed():
    with settings.override(autotune_seed=11):
        assert settings.get("autotune_seed") == 11
