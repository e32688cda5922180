"""An inner tile loop shared by several programs (`split_programs`, `pid_type='persistent_interleaved'`).

The grouped GEMM of seed 000 launches one program per group; its inner `hl.tile([m, n])` loop has
independent iterations, so the Triton backend may give each group several programs (flat) or deal
the tiles of all groups out to one program per SM (persistent). These tests pin which loops may be
shared (ir/loop_split.py), that every way of sharing computes what eager mode and PyTorch compute
(ragged, empty, size-1 and unaligned groups: the loop's aligned and general versions), and what the
heuristic picks.
"""
from __future__ import annotations

import math
from typing import Any

import math
import pytest
import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close
from tessera import exc, settings
from tessera.backends.config_space import KernelFacts
from tessera.backends.triton.heuristics import heuristic_config
from tessera.backends.triton.space import config_space
from tessera.ir.loop_split import splittable_loop
from tessera.ir.tunables import TunableDim


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _grouped_inputs(shapes: list[tuple[int, int, int]], device: torch.device, dtype: torch.dtype) -> tuple:
    """The seed kernel's five arguments for groups `(m, k, n)`, and the per-group references."""
    from examples.grouped_gemm import flatten_groups, make_inputs
    As, Bs = make_inputs(tuple(shapes), dtype=dtype, device=str(device))
    (flat_a, flat_b, flat_c, sizes, dummy), _ = flatten_groups(As, Bs)
    flat_c.fill_(float("nan"))  # every element must be written
    expected = torch.cat([(A.double() @ B.double()).reshape(-1) for A, B in zip(As, Bs)])
    return (flat_a, flat_b, flat_c, sizes, dummy), expected


def _seed_kernel(**options: Any) -> Any:
    from examples.grouped_gemm import grouped_gemm_impl
    return tessera.kernel(grouped_gemm_impl.fn, **options)


SHAPES = [
    [(1, 1, 1), (37, 24, 40), (0, 8, 16), (16, 16, 16), (5, 3, 7)],   # size 1, empty, unaligned
    [(40, 32, 48), (24, 16, 8), (0, 16, 16), (64, 8, 32)],             # k, n, offsets all multiples of 8
]


@pytest.mark.parametrize("shapes", SHAPES, ids=["ragged", "aligned"])
@pytest.mark.parametrize("config", [
    tessera.Config(block_sizes=[16, 16, 16], split_programs=0),
    tessera.Config(block_sizes=[16, 16, 16], split_programs=3),
    tessera.Config(block_sizes=[16, 32, 16], split_programs=64),
    tessera.Config(block_sizes=[32, 16, 16], pid_type="persistent_interleaved"),
    tessera.Config(block_sizes=[16, 16, 16], pid_type="persistent_blocked", split_programs=64),
    tessera.Config(block_sizes=[16, 16, 16], split_programs=8, l2_grouping=2),
    tessera.Config(block_sizes=[16, 16, 16], pid_type="persistent_interleaved", l2_grouping=4),
], ids=["off", "split3", "split64", "persistent", "blocked", "split-grouped", "persistent-grouped"])
def test_shared_tile_loop_matches_pytorch_and_eager(shapes: list, config: tessera.Config,
                                                    device: torch.device) -> None:
    args, expected = _grouped_inputs(shapes, device, torch.float16)
    generated = _seed_kernel(mode=_mode(device), config=config)(*[a.clone() for a in args])
    with settings.override(mode="eager"):
        eager = _seed_kernel(config=config)(*[a.clone() for a in args])
    assert not torch.isnan(generated).any()
    assert_close(generated, expected.to(generated.dtype), (2e-2, 2e-2), "grouped_gemm")
    assert_close(generated, eager, (2e-2, 2e-2), "grouped_gemm vs eager")


def test_the_seed_loop_is_shared_and_its_grid_follows_the_config(device: torch.device) -> None:
    args, _ = _grouped_inputs(SHAPES[0], device, torch.float32)
    bound = _seed_kernel(mode=_mode(device)).bind(*args)
    flat = bound.plan(tessera.Config(block_sizes=[16, 16, 16], split_programs=64))
    assert [launch.grid for launch in flat.launches] == [(60,)]  # 5 groups x 12 programs each
    assert "split_tile" in bound.to_triton_code(tessera.Config(block_sizes=[16, 16, 16], split_programs=64))
    off = bound.plan(tessera.Config(block_sizes=[16, 16, 16], split_programs=0))
    assert [launch.grid for launch in off.launches] == [(5,)]
    assert {dim.role for dim in flat.tunables} == {"split", "loop"}


def test_loaded_strides_and_offsets_get_an_aligned_version(device: torch.device) -> None:
    args, _ = _grouped_inputs(SHAPES[1], device, torch.float16)
    code = _seed_kernel(mode=_mode(device)).bind(*args).to_triton_code(
        tessera.Config(block_sizes=[16, 16, 16], split_programs=64))
    head = next(line for line in code.splitlines() if "multiples of 16 bytes" in line)
    for value in ("v1 % 8 == 0", "v2 % 8 == 0", "v3 % 8 == 0", "v4 % 8 == 0", "v5 % 8 == 0"):  # n, k, offsets
        assert value in head
    assert "v0 % 8" not in head  # m (rows) need not be aligned: MoE groups have any number of tokens


def test_persistent_shared_tiles_index_in_32_bits() -> None:
    # H100 (sm_90), compiled on the CPU: the count of tiles seen is int64 (loaded sizes may be), but
    # each program's first tile is below the program count; an int64 first tile made the tile
    # indices, addresses and masks of the whole K loop 64-bit (MoE G8 0.40 -> 0.73 ms).
    import re

    from sm90_compile import sm90_ttgir

    args, _ = _grouped_inputs(SHAPES[1], torch.device("cpu"), torch.bfloat16)
    config = tessera.Config(block_sizes=[128, 128, 64], num_warps=8, num_stages=3,
                            pid_type="persistent_interleaved", split_programs=1024)
    (ttgir,) = sm90_ttgir(_seed_kernel(mode="interpret"), args, config)
    assert "ttng.warp_group_dot " in ttgir
    assert not re.search(r"tensor<\d+(x\d+)*xi64", ttgir)


def _ir(kernel: Any, *args: Any) -> Any:
    return kernel.bind(*args).to_ir(tessera.Config(block_sizes=[16, 16]))


def test_a_loop_that_reads_what_it_stores_is_not_shared() -> None:
    @tessera.kernel(mode="interpret")
    def shift(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        for row in hl.grid(x.size(0)):
            n = hl.load(lengths, [row])
            for tile in hl.tile(n):
                x[row, tile] = x[row, tile] + 1
        return x

    assert splittable_loop(_ir(shift, torch.zeros(3, 8), torch.tensor([8, 3, 0], dtype=torch.int32))) is None


def test_a_loop_carrying_a_value_or_a_store_outside_it_is_not_shared() -> None:
    @tessera.kernel(mode="interpret")
    def row_sums(x: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for row in hl.grid(x.size(0)):
            n = hl.load(lengths, [row])
            total = hl.zeros([1], dtype=torch.float32)
            for tile in hl.tile(n):
                total = total + torch.sum(x[row, tile])
            out[row] = total.sum()
        return out

    @tessera.kernel(mode="interpret")
    def scale_and_mark(x: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        for row in hl.grid(x.size(0)):
            n = hl.load(lengths, [row])
            for tile in hl.tile(n):
                out[row, tile] = x[row, tile] * 2
            seen[row] = 1.0
        return out

    x, lengths = torch.randn(3, 8), torch.tensor([8, 3, 0], dtype=torch.int32)
    assert splittable_loop(_ir(row_sums, x, lengths, torch.zeros(3))) is None
    assert splittable_loop(_ir(scale_and_mark, x, lengths, torch.zeros(3, 8), torch.zeros(3))) is None


def test_a_store_missing_one_of_the_loop_tiles_is_not_shared() -> None:
    @tessera.kernel(mode="interpret")
    def last_column(x: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for row in hl.grid(x.size(0)):
            n = hl.load(lengths, [row])
            for tile_a, tile_b in hl.tile([n, n]):
                out[row, tile_a] = x[row, tile_a] + x[row, tile_b].sum()
        return out

    x = torch.randn(3, 8)
    assert splittable_loop(_ir(last_column, x, torch.tensor([8, 3, 0], dtype=torch.int32), torch.zeros(3, 8))) is None


def test_a_jagged_elementwise_loop_is_shared_and_correct(device: torch.device) -> None:
    def double_rows(x: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for row in hl.grid(x.size(0)):
            n = hl.load(lengths, [row])
            for tile in hl.tile(n):
                out[row, tile] = x[row, tile] * 2
        return out

    x = torch.randn(4, 37, device=device)
    lengths = torch.tensor([37, 0, 1, 20], dtype=torch.int32, device=device)
    expected = torch.zeros_like(x)
    for row, n in enumerate(lengths.tolist()):
        expected[row, :n] = x[row, :n] * 2
    for config in (tessera.Config(block_sizes=[8], split_programs=16),
                   tessera.Config(block_sizes=[16], pid_type="persistent_interleaved")):
        kernel = tessera.kernel(double_rows, mode=_mode(device), config=config)
        torch.testing.assert_close(kernel(x, lengths, torch.zeros_like(x)), expected)
        assert "split_tile" in kernel.bind(x, lengths, torch.zeros_like(x)).to_triton_code(config)


def test_the_heuristic_shares_a_large_split_product_flat_in_wide_tiles() -> None:
    tunables = (TunableDim(0, 64, 16, "split"), TunableDim(1, 64, 16, "split"), TunableDim(2, 64, 16, "loop"))
    few = heuristic_config(config_space(KernelFacts(tunables=tunables, uses_dot=True, programs=8,
                                                    largest_numel=1 << 26)))
    assert few["block_sizes"] == [128, 256, 64] and few["num_warps"] == 8
    assert few["pid_type"] == "flat" and few["split_programs"] >= 256
    many = heuristic_config(config_space(KernelFacts(tunables=tunables, uses_dot=True, programs=100_000,
                                                     largest_numel=1 << 26)))
    assert many["pid_type"] == "flat" and many["split_programs"] >= 256
    # Helion's grouped_gemm example: 4 groups, a 640 x 256 input; a few output tiles in all
    small = heuristic_config(config_space(KernelFacts(tunables=tunables, uses_dot=True, programs=4,
                                                      largest_numel=640 * 256)))
    assert small["pid_type"] == "flat" and small["split_programs"] >= 256 and small["block_sizes"] == [128, 128, 64]


def test_the_heuristic_shares_a_large_split_loop_without_products_persistently() -> None:
    rows = heuristic_config(config_space(KernelFacts(tunables=(TunableDim(0, 4096, 1, "split"),), programs=8,
                                                     largest_numel=1 << 26)))
    assert rows["pid_type"] == "persistent_interleaved"


def test_a_kernel_without_a_split_loop_has_no_split_axis() -> None:
    space = config_space(KernelFacts(tunables=(TunableDim(0, 4096, 1, "launch"),)))
    assert "split_programs" not in [axis.key for axis in space.axes]


@pytest.mark.parametrize("value", [-1, 1.5, "many"])
def test_split_programs_must_be_a_count(value: Any) -> None:
    with pytest.raises(exc.ConfigError, match="split_programs"):
        tessera.Config(split_programs=value)


# -- masks of loops bounded by a tile's begin (causal attention) --------------------------------
@pytest.mark.parametrize("blocks, masked", [([32, 64], False), ([64, 64], False), ([64, 32], True)],
                         ids=["launch-block-multiple", "equal", "launch-block-smaller"])
def test_a_key_loop_ending_at_the_query_tile_is_unmasked_when_blocks_divide(blocks: list, masked: bool) -> None:
    from examples.attention import attention, make_inputs
    q, k, v, causal = make_inputs(1, 2, 100, 100, 16, causal=True, dtype=torch.float32, device="cpu")
    code = attention.bind(q, k, v, causal).to_triton_code(tessera.Config(block_sizes=blocks))
    before_diagonal = code.split("for tile_n in hl.tile(0,", 1)[1].split("for tile_n in hl.tile(tile_m.begin")[0]
    assert "mask_t2 = " not in before_diagonal  # whole tiles unmasked; a last partial tile peeled off
    assert ("mask_t2_tail = " in before_diagonal) is masked
    with settings.override(mode="interpret"):
        out = tessera.kernel(attention.fn, config=tessera.Config(block_sizes=blocks))(q, k, v, causal)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("head_dim, warps", [(128, 8), (64, 4)])
def test_the_dot_heuristic_counts_a_whole_row_in_the_program_tile(head_dim: int, warps: int) -> None:
    from examples.attention import attention, make_inputs
    from tessera.runtime.tuning import heuristic_for
    q, k, v, causal = make_inputs(1, 2, 256, 256, head_dim, dtype=torch.bfloat16, device="cpu")
    assert heuristic_for(attention.bind(q, k, v, causal))["num_warps"] == warps  # [128 queries, head_dim] accumulator


def test_the_heuristic_keeps_a_broadcast_tile_of_three_blocks_within_registers() -> None:
    """Helion's jagged_mean: [tile_b, tile_k, tile_m] values of blocks [32, 64, 64] (131072 fp32)
    took ptxas minutes; blocks that multiply stay under REGISTER_TILE_ELEMENTS."""
    from tessera.backends.triton.heuristics import REGISTER_TILE_ELEMENTS
    tunables = (TunableDim(0, 32, 1, "launch"), TunableDim(1, 64, 1, "split"), TunableDim(2, 2048, 1, "loop"))
    config = heuristic_config(config_space(KernelFacts(tunables=tunables, uses_reduction=True, programs=1,
                                                       largest_numel=2048 * 8)))
    blocks = config["block_sizes"]
    assert math.prod(blocks) <= REGISTER_TILE_ELEMENTS, blocks
