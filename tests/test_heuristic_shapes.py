"""The heuristic (untuned) Config of representative kernel shapes (issue 17: the default Config
within 0.8x of the tuned one). Each shape was found far behind torch.compile among Helion's
examples on the H100; the kernels here are written for these tests, at the examples' sizes for
the Config checks (planned on the CPU as an H100 call would be) and small sizes for the results.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import Config
from tessera.backends.triton.heuristics import heuristic_config
from tessera.backends.triton.space import config_space
from tessera.ir.loop_split import split_axis_names
from tessera.runtime.tuning import config_space_for, heuristic_for


@tessera.kernel
def row_scores(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sum_v exp(x) * (y - x) per row, with both block sizes named (`hl.register_block_size`)."""
    out = x.new_empty([x.shape[0]], dtype=torch.float32)
    block_v, block_r = hl.register_block_size(x.shape[1]), hl.register_block_size(x.shape[0])
    for tile_r in hl.tile(x.shape[0], block_size=block_r):
        acc = hl.zeros([tile_r, block_v], dtype=torch.float32)
        for tile_v in hl.tile(x.shape[1], block_size=block_v):
            a = x[tile_r, tile_v].to(torch.float32)
            acc += torch.exp(a) * (y[tile_r, tile_v].to(torch.float32) - a)
        out[tile_r] = acc.sum(dim=1)
    return out


@tessera.kernel
def packed_pairs_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ unpack(b): each int8 of b holds two signed 4-bit values, rows 2i and 2i+1 of the product's K."""
    m, k = a.shape
    _, n = b.shape
    out = torch.empty([m, n], dtype=torch.bfloat16, device=a.device)
    block_kp = hl.register_block_size(k // 2)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_kp in hl.tile(k // 2, block_size=block_kp):
            first = tile_kp.begin * 2
            left = a[tile_m, first:first + block_kp * 2]
            packed = b[tile_kp, tile_n]
            low = (packed & 0xF).to(torch.int32)
            low = torch.where(low >= 8, low - 16, low)
            high = (packed >> 4).to(torch.int32)
            pairs = torch.stack([low.to(a.dtype), high.to(a.dtype)], dim=1)
            acc = hl.dot(left, pairs.reshape(tile_kp.block_size * 2, tile_n.block_size), acc=acc)
        out[tile_m, tile_n] = acc.to(torch.bfloat16)
    return out


@tessera.kernel
def offset_groups_matmul(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows offsets[g]:offsets[g+1] of a times b, group by group, rows addressed as `start + tile.index`."""
    total, k = a.shape
    n = b.shape[1]
    out = torch.empty([total, n], dtype=a.dtype, device=a.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        count = offsets[g + 1] - start
        if count != 0:
            for tile_m, tile_n in hl.tile([count, n]):
                acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
                for tile_k in hl.tile(k):
                    acc = torch.addmm(acc, a[start + tile_m.index, tile_k], b[tile_k, tile_n])
                out[start + tile_m.index, tile_n] = acc.to(out.dtype)
    return out


@tessera.kernel
def two_pass_center(x: torch.Tensor) -> torch.Tensor:
    """x minus its row mean: one loop over the row for the sum, a second for the output."""
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n):
            total += x[tile_m, tile_n].to(torch.float32).sum(dim=1)
        mean = total / n
        for tile_n in hl.tile(n):
            out[tile_m, tile_n] = (x[tile_m, tile_n].to(torch.float32) - mean[:, None]).to(x.dtype)
    return out


@tessera.kernel
def chunked_row_sum(x: torch.Tensor) -> torch.Tensor:
    """Row sums through a [rows, chunk] accumulator whose chunk is a named block size."""
    out = x.new_empty([x.size(0)])
    block_n = hl.register_block_size(x.size(1))
    for tile_m in hl.tile(x.size(0)):
        partial = hl.zeros([tile_m, block_n], dtype=x.dtype)
        for tile_n in hl.tile(x.size(1), block_size=block_n):
            partial += x[tile_m, tile_n]
        out[tile_m] = partial.sum(-1)
    return out


def _unpacked(b: torch.Tensor) -> torch.Tensor:
    low = (b & 0xF).to(torch.int32)
    low = torch.where(low >= 8, low - 16, low)
    high = (b >> 4).to(torch.int32)
    return torch.stack([low, high], dim=1).reshape(b.shape[0] * 2, b.shape[1]).float()


# -- results ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (33, 300)])
def test_row_scores_matches_torch(mode: str, shape: tuple[int, int]) -> None:
    x, y = torch.randn(*shape), torch.randn(*shape)
    expected = (torch.exp(x) * (y - x)).sum(dim=1)
    result = tessera.kernel(row_scores.fn, mode=mode)(x, y)
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 64, 32), (19, 128, 64)])  # full tiles: the reshape names the blocks
def test_packed_pairs_matmul_matches_torch(mode: str, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    a = torch.randn(m, k).to(torch.bfloat16)
    b = torch.randint(-128, 128, (k // 2, n), dtype=torch.int8)
    expected = (a.float() @ _unpacked(b)).to(torch.bfloat16)
    result = tessera.kernel(packed_pairs_matmul.fn, mode=mode)(a, b)
    torch.testing.assert_close(result.float(), expected.float(), rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_offset_groups_matmul_matches_torch(mode: str) -> None:
    offsets = torch.tensor([0, 3, 3, 40, 57], dtype=torch.int32)  # an empty group, tails
    a, b = torch.randn(57, 24), torch.randn(24, 20)
    result = tessera.kernel(offset_groups_matmul.fn, mode=mode)(a, b, offsets)
    torch.testing.assert_close(result, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1), (7, 130), (40, 33)])
def test_two_pass_center_matches_torch(mode: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    result = tessera.kernel(two_pass_center.fn, mode=mode)(x)
    torch.testing.assert_close(result, x - x.mean(dim=1, keepdim=True), rtol=1e-5, atol=1e-5)


# -- the Configs an H100 call would run (planned here, never launched) -------------------------------

def test_named_row_and_chunk_blocks_make_a_row_kernel() -> None:
    """Blocks named with hl.register_block_size for a tile of rows and a chunk loop over each row
    take a row kernel's Config: wide chunks, few rows, enough warps (Helion's jsd had 32 x 256
    tiles on one warp as if the rows were blocked for the host: 25x slower than torch.compile)."""
    x = torch.empty(8192, 65536)
    config = heuristic_for(row_scores.bind(x, x))
    block_v, block_r = config["block_sizes"]
    assert block_v >= 1024 and block_r <= 4 and config["num_warps"] >= 4


def test_named_blocks_take_their_loops_roles() -> None:
    x = torch.empty(64, 512)
    facts = config_space_for(row_scores.bind(x, x).plan(Config())).facts
    assert [(d.role, d.registered) for d in facts.tunables] == [("loop", True), ("launch", True)]


def test_window_of_a_block_is_the_products_k_not_a_whole_row() -> None:
    """`a[tile_m, 2*k0 : 2*k0 + 2*bk]` is K of the product: the output tiles stay GEMM-sized
    (Helion's int4_gemm got 16-row tiles and 16-deep K, 25x slower than torch.compile)."""
    a = torch.empty(8192, 8192, dtype=torch.bfloat16)
    b = torch.empty(4096, 8192, dtype=torch.int8)
    bound = packed_pairs_matmul.bind(a, b)
    facts = config_space_for(bound.plan(Config())).facts
    assert facts.whole_row == 0 and facts.whole_elements == 1
    block_kp, block_m, block_n = heuristic_for(bound)["block_sizes"]
    assert block_m >= 64 and block_n >= 128 and block_kp >= 32


def test_rows_addressed_from_a_loaded_start_are_shared_by_programs() -> None:
    """`out[start + tile_m.index, tile_n]`: distinct tiles write distinct rows, so the group's
    tile loop may be spread over programs (Helion's grouped_gemm ran one program per group)."""
    offsets = torch.tensor([0, 64, 192, 384, 640], dtype=torch.int32)
    a, b = torch.empty(640, 256, dtype=torch.bfloat16), torch.empty(256, 128, dtype=torch.bfloat16)
    bound = offset_groups_matmul.bind(a, b, offsets)
    assert split_axis_names(bound.to_ir(Config(block_sizes=[64, 64, 64])))
    config = heuristic_for(bound)
    assert config.get("split_programs", 0) > 0 and min(config["block_sizes"][:2]) >= 64


def test_two_passes_over_a_row_are_not_a_2d_tile() -> None:
    """Two loops over one row (statistics, then the output) each hold one chunk at a time: the
    rows per program and the warps follow one chunk (Helion's welford, 262144 x 1024: one row per
    program on 16 warps when the two chunks were multiplied, 3x slower than torch.compile)."""
    config = heuristic_for(two_pass_center.bind(torch.empty(262144, 1024)))
    rows, first, second = config["block_sizes"]
    assert first == second == 1024 and rows >= 2 and config["num_warps"] <= 8


@tessera.kernel
def rows_from_tile_start(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Every tile of a group writes rows start.. of `out` (a shift computed inside the loop):
    the tiles' writes overlap, so their programs must not be spread (the last tile's rows win)."""
    for g in hl.grid(x.size(0) // 8):
        for tile_m in hl.tile(8 * g, 8 * g + 8, block_size=4):
            shift = tile_m.begin - 8 * g
            out[tile_m.index - shift] = x[tile_m]
    return out


def test_a_shift_that_follows_the_tiles_does_not_split_the_loop() -> None:
    x = torch.arange(16, dtype=torch.float32)
    ir = rows_from_tile_start.bind(x, torch.zeros(16)).to_ir(Config())
    assert not split_axis_names(ir)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_rows_from_tile_start_keep_the_last_tile(mode: str) -> None:
    x = torch.arange(16, dtype=torch.float32)
    result = tessera.kernel(rows_from_tile_start.fn, mode=mode)(x, torch.zeros(16))
    expected = torch.tensor([4., 5, 6, 7, 0, 0, 0, 0, 12, 13, 14, 15, 0, 0, 0, 0])
    torch.testing.assert_close(result, expected)


def test_a_named_block_allocated_per_row_is_not_a_whole_row() -> None:
    """`hl.zeros([tile_m, block_n])` holds the chunk loop's block, not a whole dim: few long rows
    keep wide chunks (Helion's long_sum, 4 x 130000: its chunks were cut to 32 elements)."""
    planned = config_space_for(chunked_row_sum.bind(torch.empty(4, 130000)).plan(Config())).facts
    # as the example planned it: the accumulator measured at a 32 x 1024 planning tile
    facts = dataclasses.replace(planned, whole_elements=32768, whole_row=32768)
    block_n, _ = heuristic_config(config_space(facts))["block_sizes"]
    assert block_n >= 1024


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 1000)])
def test_chunked_row_sum_matches_torch(mode: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    torch.testing.assert_close(tessera.kernel(chunked_row_sum.fn, mode=mode)(x), x.sum(dim=1), rtol=1e-5, atol=1e-5)


@tessera.kernel
def per_token_scaled_rows(logits: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Helion's grpo_loss backward shape: a [batch, tokens] tile loop around a loop over the vocabulary."""
    out = torch.empty_like(logits)
    batch, tokens, vocab = logits.shape
    for tile_b, tile_l in hl.tile([batch, tokens]):
        s = torch.exp(scale[tile_b, tile_l]) * 2
        for tile_v in hl.tile(vocab):
            probs = torch.exp(logits[tile_b, tile_l, tile_v] - s[:, :, None])
            out[tile_b, tile_l, tile_v] = torch.where(tile_v.index[None, None, :] == 3, probs * s[:, :, None], -probs)
    return out


def test_widened_interpreter_blocks_stay_within_tritons_block_limit() -> None:
    # the interpreter's widening ignored a split vocabulary loop's block: 8 x 128 x 4096 lanes (Triton's limit is 2**20)
    logits, scale = torch.empty(8, 128, 4000), torch.empty(8, 128)
    bound = per_token_scaled_rows.bind(logits, scale)
    blocks = heuristic_for(bound, interpreted=True)["block_sizes"]
    assert torch.Size(blocks).numel() <= 2 ** 20, blocks


def test_interpreter_blocks_grow_past_a_wide_inner_loop() -> None:
    # grpo_loss at the examples' CPU sizes: a 4096-wide vocabulary block left the interpreter
    # [1, 1] -> [4, 1] token tiles, 256 programs of ~100 ops each, whose Python cost per op
    # (not the elements) made one call take 5-8 s and the example's 180 calls time out
    logits, scale = torch.empty(8, 128, 4000), torch.empty(8, 128)
    bound = per_token_scaled_rows.bind(logits, scale)
    gpu, interpreted = heuristic_for(bound)["block_sizes"], heuristic_for(bound, interpreted=True)["block_sizes"]
    assert gpu[2] == interpreted[2] == 4096
    assert (8 // interpreted[0]) * (128 // interpreted[1]) <= 16, interpreted


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_per_token_scaled_rows_matches_torch(mode: str) -> None:
    logits, scale = torch.randn(3, 5, 37), torch.randn(3, 5)
    result = tessera.kernel(per_token_scaled_rows.fn, mode=mode)(logits, scale)
    s = torch.exp(scale)[:, :, None] * 2
    probs = torch.exp(logits - s)
    torch.testing.assert_close(result, torch.where(torch.arange(37) == 3, probs * s, -probs))
