"""The cache-hit call path: cheap, yet every guard is still checked on every call.

A call whose variant is compiled reads each captured value once (`call_keys.launch_inputs`),
looks its key up and checks the variant's guards; it does no tracing and copies no block-slot
table. Each fact the key holds (dtype, rank, unit strides, alignment, int64 need, pinned sizes,
specialized values, constants) still picks or builds the right variant after a run of hits.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from tessera.location import user_location
from tessera.runtime import call_keys
from tessera.trace.tracer import Tracer


GIVEN = tessera.Config(block_sizes=[8, 8])


def doubled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([x.size(0), x.size(1)]):
        out[tile_m, tile_n] = x[tile_m, tile_n] * 2
    return out


def scaled(x: torch.Tensor, factor: float, flip: bool) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = -x[tile] * factor if flip else x[tile] * factor
    return out


def first_columns(x: torch.Tensor) -> torch.Tensor:
    n = hl.specialize(x.size(1))
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :n].sum(dim=1)
    return out


@pytest.fixture
def count_traces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one per traced launch."""
    traced: list[int] = []
    original = Tracer.trace_launch

    def counting(self: Tracer, *args: object, **kwargs: object) -> object:
        traced.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Tracer, "trace_launch", counting)
    return traced


def test_a_hit_traces_nothing_and_copies_no_block_slots(device: torch.device, count_traces: list[int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tessera.kernel(doubled, config=GIVEN)  # a given Config: no heuristic plans (which trace)
    x = torch.randn(5, 7, device=device)
    kernel(x)
    assert len(count_traces) == 1
    copies: list[int] = []
    original = kernel.block_slots
    monkeypatch.setattr(kernel, "block_slots", lambda: copies.append(1) or original())
    for rows in (5, 9, 33):
        y = torch.randn(rows, 7, device=device)
        torch.testing.assert_close(kernel(y), y * 2)
    assert len(count_traces) == 1 and copies == []
    assert kernel.cache_info() == (3, 1, 1)


def test_a_stride_change_after_many_hits_builds_a_new_variant(device: torch.device, count_traces: list[int]) -> None:
    kernel = tessera.kernel(doubled, config=GIVEN)
    for _ in range(3):
        x = torch.randn(6, 10, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    column_major = torch.randn(10, 6, device=device).t()
    torch.testing.assert_close(kernel(column_major), column_major * 2)
    every_other = torch.randn(6, 20, device=device)[:, ::2]  # no unit stride at all
    torch.testing.assert_close(kernel(every_other), every_other * 2)
    assert kernel.cache_info() == (2, 3, 3)
    assert len(count_traces) == 3


def test_an_unaligned_pointer_builds_its_own_variant(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    storage = torch.randn(4 * 8 + 1, device=device)
    aligned, shifted = storage[:32].view(4, 8), storage[1:].view(4, 8)
    assert shifted.data_ptr() % 16 != 0
    for x in (aligned, shifted, aligned, shifted):
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (2, 2, 2)


def test_a_rank_or_dtype_change_after_hits_builds_a_new_variant(device: torch.device) -> None:
    @tessera.kernel
    def negated(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size()):
            out[tile] = -x[tile]
        return out
    inputs = [torch.randn(8, device=device), torch.randn(8, device=device), torch.randn(3, 8, device=device),
              torch.randn(3, 8, device=device).half(), torch.randn(7, device=device)]
    for x in inputs:
        torch.testing.assert_close(negated(x), -x)
    assert negated.cache_info() == (2, 3, 3)


def test_constants_are_keyed_by_value_and_floats_are_runtime(device: torch.device, count_traces: list[int]) -> None:
    kernel = tessera.kernel(scaled, config=GIVEN)
    x = torch.randn(20, device=device)
    for factor, flip in ((2.0, False), (3.5, False), (3.5, True), (0.5, True), (2.0, False)):
        torch.testing.assert_close(kernel(x, factor, flip), -x * factor if flip else x * factor)
    assert kernel.cache_info().variants == 2  # one per value of `flip`; the float is an argument
    assert len(count_traces) == 2


def test_a_specialized_value_is_checked_on_every_call(device: torch.device) -> None:
    kernel = tessera.kernel(first_columns)
    for cols in (4, 4, 6, 4, 6):
        x = torch.randn(5, cols, device=device)
        torch.testing.assert_close(kernel(x), x.sum(dim=1))
    assert kernel.cache_info() == (3, 2, 2)


def test_static_shapes_key_exact_sizes_after_hits(device: torch.device) -> None:
    kernel = tessera.kernel(doubled, static_shapes=True)
    for shape in ((3, 4), (3, 4), (4, 3), (3, 4)):
        x = torch.randn(shape, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (2, 2, 2)


def test_a_size_bucket_change_picks_a_config_per_bucket(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    for rows in (6, 7, 1, 6, 1, 40):
        x = torch.randn(rows, 4, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    assert len(kernel.config_choices) == 3  # rows in (4, 8], rows == 1, rows in (32, 64]


def test_a_small_first_call_does_not_fix_the_blocks_of_a_large_product(device: torch.device) -> None:
    # A one-row first call chose 16-row blocks; a 1024-row call reusing them ran a GEMM at a
    # sixth of cuBLAS's speed on the H100. Each size magnitude now gets its own heuristic Config.
    from examples.matmul import matmul

    kernel = tessera.kernel(matmul.fn, dot_precision="ieee")  # the GPU's default tf32 rounds apart from torch's fp32
    y = torch.randn(64, 48, device=device)
    for m in (1, 1024):
        x = torch.randn(m, 64, device=device)
        torch.testing.assert_close(kernel(x, y), x @ y, rtol=1e-4, atol=1e-4)
    blocks = sorted(config["block_sizes"][0] for config in kernel.config_choices.by_key.values())
    assert len(blocks) == 2 and blocks[0] < blocks[1]


def test_the_mode_follows_tessera_mode_on_every_call(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(4, 4, device=device)
    kernel(x)
    monkeypatch.setenv("TESSERA_MODE", "eager")
    torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (0, 1, 1)  # the eager call did not touch the variant cache


def test_max_variants_still_caps_after_hits(device: torch.device) -> None:
    kernel = tessera.kernel(doubled, static_shapes=True, max_variants=1)
    x = torch.randn(2, 3, device=device)
    kernel(x)
    kernel(x)
    with pytest.raises(exc.RecompileLimitError):
        kernel(torch.randn(3, 3, device=device))
    assert kernel.cache_info() == (1, 2, 1)


def test_launch_arguments_follow_the_kernel_parameters(device: torch.device) -> None:
    # unpinned sizes, then strides other than 1, per tensor; then runtime loop bounds
    x = torch.randn(4, 6, device=device)
    marked = tessera.mark_static(torch.randn(3, 5, device=device).t(), [0])
    tile_range = hl_range(begins=[0, 2], ends=[4, 6])
    key, range_key, arguments = call_keys.launch_inputs([x, 7, 0.5, True, marked], tile_range, False)
    assert arguments == [x, 4, 6, 6, 7, 0.5, marked, 3, 5, 2, 4, 6]
    assert range_key[3:5] == ((0, None), (None, None))
    assert key[1:4] == (("int", False), ("float",), ("const", bool, True))  # typed: True and 1 are different constants
    assert key[4][5] == ((0, 5, 1),)  # the pinned dim's size and stride


def hl_range(begins: list[int], ends: list[int]) -> object:
    from tessera.ir.tile_range import TileRange
    return TileRange(begins, ends, [None] * len(ends), True, False, ("f.py", 1, 0))


def test_int64_need_is_computed_from_the_layout() -> None:
    big = torch.empty(2 ** 31 + 8, device="meta")
    assert call_keys.needs_int64(big)
    assert not call_keys.needs_int64(torch.empty(16, 2 ** 20, device="meta"))
    wide = torch.empty(2 ** 16, 2 ** 16, device="meta")[:, :4]  # few elements, far apart
    assert call_keys.needs_int64(wide)
    assert not call_keys.needs_int64(torch.empty(0, 2 ** 40, device="meta"))


def test_config_keys_are_the_repr_of_each_config() -> None:
    first, same, other = tessera.Config(block_sizes=[16]), tessera.Config(block_sizes=[16]), tessera.Config(block_sizes=[32])
    assert call_keys.config_key(first) == call_keys.config_key(same) == repr(first)
    assert call_keys.config_key(other) == repr(other) != repr(first)


def test_two_tile_loops_keep_their_own_variants(device: torch.device) -> None:
    @tessera.kernel
    def two_loops(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + 1
        for tile in hl.tile(x.size(0)):
            out[tile] = out[tile] * 2
        return out
    x = torch.randn(10, device=device)
    for _ in range(3):
        torch.testing.assert_close(two_loops(x), (x + 1) * 2)
    assert two_loops.cache_info() == (4, 2, 2)


def test_remembered_locations_name_the_exact_line() -> None:
    seen = [user_location(skip=0) for _ in range(2)]  # one call site: computed once
    other = user_location(skip=0)
    assert seen[0] is seen[1] and seen[0] is not None and other is not None
    assert other.lineno == seen[0].lineno + 1 and other.filename == __file__


@tessera.kernel
def plus_depth(x: torch.Tensor, depth: int) -> torch.Tensor:
    inner = plus_depth(x, depth - 1) if depth > 0 else x  # the same kernel, called from its own host code
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = inner[tile] + 1
    return out


def test_a_kernel_called_from_its_own_host_code_gets_its_own_runner(device: torch.device) -> None:
    x = torch.randn(12, device=device)
    for depth in (2, 0, 3):
        torch.testing.assert_close(plus_depth(x, depth), x + depth + 1)


def test_reset_between_calls_starts_from_an_empty_cache(device: torch.device) -> None:
    kernel = tessera.kernel(doubled, config=GIVEN)
    x = torch.randn(4, 8, device=device)
    kernel(x)
    kernel(x)
    kernel.reset()
    torch.testing.assert_close(kernel(x), x * 2)
    torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (1, 1, 1)


def test_the_one_pass_device_read_takes_only_plain_calls() -> None:
    plain_call_device = call_keys.plain_call_device
    x = torch.zeros(2)
    assert plain_call_device((x, 3, 2.0, None, "s", torch.float16, True)) == torch.device("cpu")
    assert plain_call_device(()) == torch.device("cpu")
    # anything else goes to the general checks (custom ops for subclasses, device mismatch errors)
    assert plain_call_device((torch.nn.Parameter(x),)) is None
    assert plain_call_device(([x],)) is None
    assert plain_call_device((x, torch.zeros(2, device="meta"))) is None
