"""The heuristic Config and the tuner's candidates respect the device's shared memory (issue 15).

A product loop's loads are software-pipelined by Triton: `num_stages` copies of each loaded tile
live in shared memory. Helion's gdn_fwd_h (three 256-row bf16 loads per iteration) needed 297 KB
under the heuristic Config, more than an H100 program may use (227 KB). The estimate is checked
against Triton's own compiler for sm_90, which runs on this CPU-only machine.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import Config
from tessera.backends.triton.heuristics import (H100_SHARED_MEMORY, SHARED_MEMORY_MARGIN, config_fits_shared_memory,
                                                pipelined_load_bytes)
from tessera.ir.tunables import LoadedTile
from sm90_compile import sm90_shared_memory
from tessera.runtime.tuning import config_space_for, heuristic_for


@tessera.kernel
def chunked_state(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """out[b] = k[b].T @ v[b], summed over the sequence in chunks of 256 rows (gdn_fwd_h's loop)."""
    batch, seq, dim = k.shape
    dim = hl.specialize(dim)
    width = v.shape[-1]
    out = torch.empty(batch, dim, width, dtype=torch.float32, device=k.device)
    for tile_b, tile_e in hl.tile([batch, width], block_size=[1, None]):
        acc = hl.zeros([dim, tile_e], dtype=torch.float32)
        for tile_s in hl.tile(seq, block_size=256):
            keys = k[tile_b.begin, tile_s, :]
            values = v[tile_b.begin, tile_s, tile_e]
            acc = hl.dot(keys.T, values, acc=acc)
        out[tile_b.begin, :, tile_e] = acc
    return out


def _reference(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bsd,bse->bde", k.float(), v.float())


def _inputs(batch: int, seq: int, dim: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    k = torch.randn(batch, seq, dim, generator=generator).to(torch.bfloat16)
    v = torch.randn(batch, seq, width, generator=generator).to(torch.bfloat16)
    return k, v


def _gpu_heuristic(k: torch.Tensor, v: torch.Tensor) -> tuple[Config, object]:
    """The Config an H100 call with these shapes would run untuned, and its facts."""
    bound = chunked_state.bind(k, v)
    return heuristic_for(bound), config_space_for(bound.plan(Config())).facts


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 256, 16, 16), (2, 300, 32, 48), (3, 512, 64, 1)])
def test_chunked_state_matches_torch(mode: str, shape: tuple[int, int, int, int]) -> None:
    k, v = _inputs(*shape)
    kernel = tessera.kernel(chunked_state.fn, mode=mode)
    torch.testing.assert_close(kernel(k, v), _reference(k, v), rtol=2e-2, atol=2e-2)


def test_product_loop_loads_are_recorded_per_iteration() -> None:
    k, v = _inputs(2, 1024, 128, 256)
    _, facts = _gpu_heuristic(k, v)
    (loop,) = facts.pipelined_loads
    # keys: 256 x 128 bf16 whatever the Config; values: 256 x the width block
    assert sorted(tile.size_under([64]) for tile in loop) == [256 * 64 * 2, 256 * 128 * 2]


def test_heuristic_fits_the_h100_shared_memory() -> None:
    k, v = _inputs(2, 1024, 128, 256)
    config, facts = _gpu_heuristic(k, v)
    used = pipelined_load_bytes(facts, config["block_sizes"], config["num_stages"])
    assert 0 < used <= H100_SHARED_MEMORY * SHARED_MEMORY_MARGIN
    assert config["num_stages"] >= 2  # still pipelined: stages are cut before the loop stops overlapping


def test_fewer_stages_before_narrower_blocks() -> None:
    """A loop that fits at two stages keeps its blocks; stages go first."""
    k, v = _inputs(2, 1024, 64, 128)
    config, facts = _gpu_heuristic(k, v)
    assert pipelined_load_bytes(facts, config["block_sizes"], 3) > H100_SHARED_MEMORY * SHARED_MEMORY_MARGIN
    assert config["num_stages"] == 2 and config["block_sizes"][0] == 128


def test_tuner_candidates_are_filtered_by_shared_memory() -> None:
    k, v = _inputs(2, 1024, 128, 256)
    space = config_space_for(chunked_state.bind(k, v).plan(Config()))
    too_deep = Config(block_sizes=[256], num_stages=5)
    assert not config_fits_shared_memory(space.facts, too_deep)
    assert not space.fits_device(too_deep)
    assert space.fits_device(Config(block_sizes=[32], num_stages=2))


def test_loaded_tile_counts_fixed_and_tunable_dims() -> None:
    assert LoadedTile(2, 256, (1,)).size_under([1, 64]) == 2 * 256 * 64
    assert LoadedTile(4, 8, ()).size_under([]) == 32
    assert LoadedTile(2, 1, (3,)).size_under([16]) == 2  # a slot the Config lacks counts 1


def test_heuristic_config_compiles_within_the_h100_limit() -> None:
    """Triton's compiler for sm_90 (offline, on the CPU) agrees: the heuristic Config fits, the
    estimate is no smaller than what the compiler allocates, and three stages would not have fitted."""
    k, v = _inputs(2, 1024, 128, 256)
    config, facts = _gpu_heuristic(k, v)
    (used,) = sm90_shared_memory(chunked_state, (k, v), config)
    assert used <= H100_SHARED_MEMORY
    assert pipelined_load_bytes(facts, config["block_sizes"], config["num_stages"]) >= used * 0.8
    (deep,) = sm90_shared_memory(chunked_state, (k, v), config.merged(num_stages=3))
    assert deep > H100_SHARED_MEMORY
