"""Runtime scalars: values loaded inside a kernel used as loop bounds, slice bounds and view sizes.

Each kernel runs as generated Triton (interpreted on CPU, compiled on CUDA) and in eager mode;
both are compared with PyTorch. Runtime sizes are kernel values, not compile-time constants:
one compiled variant serves every set of group sizes.
"""
from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close
from tessera import exc, settings


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _both_modes(device: torch.device, run: Any, *args: Any) -> tuple[Any, Any]:
    """(generated-code result, eager result) of `run(*args)`, each on fresh copies of the tensors."""
    results = []
    for mode in (_mode(device), "eager"):
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with settings.override(mode=mode):
            results.append(run(*copies))
    return results[0], results[1]


# -- grouped GEMM (seed 000) ---------------------------------------------------------------------
def _flatten_groups(shapes: list[tuple[int, int, int]], device: torch.device) -> tuple[list[torch.Tensor], ...]:
    from examples.grouped_gemm import make_inputs
    return make_inputs(tuple(shapes), dtype=torch.float32, device=str(device))


def test_grouped_gemm_runs_ragged_groups_with_one_variant_for_every_group_size(
        device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    from examples import grouped_gemm as module
    fresh = tessera.kernel(module.grouped_gemm_impl.fn, mode=_mode(device))
    monkeypatch.setattr(module, "grouped_gemm_impl", fresh)  # the host wrapper looks it up here
    for shapes in ([(1, 1, 1), (7, 13, 5), (0, 4, 3), (31, 17, 37)],      # size 1, primes, an empty group
                   [(33, 2, 19), (3, 0, 5), (2, 41, 1), (1, 3, 2), (5, 5, 5)]):
        As, Bs = _flatten_groups(shapes, device)
        assert_close(module.grouped_gemm(As, Bs), module.reference(As, Bs), _product_tolerance(device), "grouped_gemm")
    assert fresh.cache_info().variants == 1


# -- jagged kernels ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["jagged_mean", "jagged_softmax"])
@pytest.mark.parametrize("lengths", [[0, 0, 0], [0, 5, 0, 1, 40, 0], [33]], ids=["all-empty", "mixed", "one"])
def test_jagged_kernels_match_pytorch_with_empty_rows(name: str, lengths: list[int], device: torch.device) -> None:
    module = importlib.import_module(f"examples.{name}")
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor(lengths), dim=0)
    values = torch.randn(int(offsets[-1]), 7)
    values, offsets = values.to(device), offsets.to(device)
    kernel = getattr(module, name)
    generated, eager = _both_modes(device, kernel, values, offsets)
    expected = module.reference(values, offsets)
    assert_close(generated, expected, (1e-5, 1e-5), f"{name} vs PyTorch")
    assert_close(generated, eager, (1e-5, 1e-5), f"{name} vs eager")


@pytest.mark.parametrize(("name", "sizes"), [
    ("segment_sum", {"n": 37, "features": 13, "num_segments": 5}),
    ("moe", {"tokens": 11, "hidden": 20, "out_features": 9, "num_experts": 4, "top_k": 2}),
])
def test_scatter_examples_match_pytorch(name: str, sizes: dict[str, Any], device: torch.device) -> None:
    example = importlib.import_module(f"examples.{name}").EXAMPLE
    inputs = example.inputs(str(device), torch.float32, **sizes)
    generated, eager = _both_modes(device, example.run, *inputs)
    tolerance = _product_tolerance(device) if name == "moe" else (1e-4, 1e-4)
    assert_close(generated, example.reference(*inputs), tolerance, f"{name} vs PyTorch")
    assert_close(generated, eager, tolerance, f"{name} vs eager")


def _product_tolerance(device: torch.device) -> tuple[float, float]:
    """fp32 products run as tf32 on the GPU (the default dot_precision); the interpreter is exact."""
    return (1e-4, 1e-4) if device.type == "cpu" else (5e-3, 5e-3)


# -- loop bounds -----------------------------------------------------------------------------------
@tessera.kernel
def _row_block_sums(x: torch.Tensor, rows_of: torch.Tensor, cols_of: torch.Tensor) -> torch.Tensor:
    """Program g sums x[:rows_of[g], :cols_of[g]] with hl.tile([m, n]) and with nested hl.grid(m)."""
    groups = rows_of.size(0)
    out = torch.zeros([groups, 2], dtype=torch.float32, device=x.device)
    for g in hl.grid(groups):
        m = hl.load(rows_of, [g])
        n = hl.load(cols_of, [g])
        by_tiles = hl.zeros([], dtype=torch.float32)
        for tile_m, tile_n in hl.tile([m, n]):
            by_tiles = by_tiles + x[tile_m, tile_n].sum()
        by_rows = hl.zeros([], dtype=torch.float32)
        for row in hl.grid(m):
            for tile_n in hl.tile(0, n):
                by_rows = by_rows + x[row, tile_n].sum()
        out[g, 0] = by_tiles
        out[g, 1] = by_rows
    return out


def test_inner_loops_take_loaded_bounds(device: torch.device) -> None:
    x = torch.randn(40, 37, device=device)
    rows_of = torch.tensor([0, 1, 40, 7], dtype=torch.int32, device=device)
    cols_of = torch.tensor([3, 37, 33, 0], dtype=torch.int32, device=device)
    generated, eager = _both_modes(device, _row_block_sums, x, rows_of, cols_of)
    sums = torch.stack([x[:m, :n].sum() for m, n in zip(rows_of.tolist(), cols_of.tolist())])
    assert_close(generated, torch.stack([sums, sums], dim=1), (1e-4, 1e-4), "block sums")
    assert_close(generated, eager, (1e-4, 1e-4), "block sums vs eager")


@tessera.kernel
def _sums_of_long_tiles(x: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([starts.size(0)], dtype=torch.float32, device=x.device)
    for group in hl.grid(starts.size(0)):
        total = hl.zeros([1], dtype=torch.float32)
        for tile in hl.tile(hl.load(starts, [group]), hl.load(ends, [group]), block_size=4):
            if tile.end - tile.begin > 2:  # sizes from loaded bounds: a device branch
                total = total + x[tile].sum()
        out[group] = total.sum()
    return out


def test_an_if_on_a_size_computed_from_loaded_bounds_is_a_device_branch(device: torch.device) -> None:
    x = torch.randn(23, device=device)
    starts = torch.tensor([0, 5, 7, 23], dtype=torch.int32, device=device)
    ends = torch.tensor([5, 7, 23, 23], dtype=torch.int32, device=device)
    expected = []
    for begin, end in zip(starts.tolist(), ends.tolist()):
        pieces = [x[i:min(i + 4, end)] for i in range(begin, end, 4)]
        expected.append(sum((p.sum() for p in pieces if len(p) > 2), torch.zeros((), device=device)))
    generated, eager = _both_modes(device, _sums_of_long_tiles, x, starts, ends)
    assert_close(generated, torch.stack(expected), (1e-5, 1e-5), "sums of long tiles")
    assert_close(generated, eager, (1e-5, 1e-5), "sums of long tiles vs eager")


@tessera.kernel
def _first_n_doubled(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for _ in hl.grid(1):
        for tile in hl.tile(n):  # a 0-d tensor argument: read inside the kernel, no host sync
            out[tile] = x[tile] * 2
    return out


@tessera.kernel
def _up_to_longest(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(0, lengths.amax()):  # a host tensor bound: read on the host (a sync)
        out[tile] = x[tile] + 1
    return out


def test_a_0d_tensor_argument_bounds_an_inner_loop(device: torch.device) -> None:
    x = torch.randn(40, device=device)
    generated, eager = _both_modes(device, _first_n_doubled, x, torch.tensor(33, device=device))
    assert_close(generated, torch.where(torch.arange(40, device=device) < 33, x * 2, 0), (0, 0), "first n")
    assert_close(generated, eager, (0, 0), "first n vs eager")


def test_a_host_tensor_bounds_a_top_level_loop(device: torch.device) -> None:
    x = torch.randn(40, device=device)
    lengths = torch.tensor([3, 37, 5], device=device)
    generated, eager = _both_modes(device, _up_to_longest, x, lengths)
    assert_close(generated, torch.where(torch.arange(40, device=device) < 37, x + 1, 0), (0, 0), "up to max")
    assert_close(generated, eager, (0, 0), "up to max vs eager")


# -- views with runtime offsets and sizes ------------------------------------------------------------
@tessera.kernel
def _copy_views(flat: torch.Tensor, out: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Group g copies flat[off : off + m * k] viewed as [m, k] (both .reshape and .view) into out."""
    for g in hl.grid(meta.size(0) // 3):
        m = hl.load(meta, [g * 3])
        k = hl.load(meta, [g * 3 + 1])
        off = hl.load(meta, [g * 3 + 2])
        source = flat[off:][: m * k].reshape(m, k)
        target = out[off : off + m * k].view(m, k)
        for tile_m, tile_k in hl.tile([m, k]):
            target[tile_m, tile_k] = source[tile_m, tile_k] * 2
    return out


def test_views_with_runtime_offsets_and_sizes_read_and_write_their_slice(device: torch.device) -> None:
    flat = torch.randn(50, device=device)
    meta = torch.tensor([2, 3, 0, 1, 4, 6, 7, 5, 10, 0, 9, 45, 5, 1, 45], dtype=torch.int32, device=device)
    generated, eager = _both_modes(device, _copy_views, flat, torch.zeros(50, device=device), meta)
    assert_close(generated, flat * 2, (0, 0), "views")
    assert_close(generated, eager, (0, 0), "views vs eager")


def test_a_view_past_the_end_of_its_tensor_is_clipped_not_written_out_of_bounds(device: torch.device) -> None:
    # The group at offset 8 asks for 2 x 3 elements of a 10-element tensor: eager mode (PyTorch)
    # raises on the reshape (a located ShapeMismatchError); generated code masks the 4 elements past the end.
    buffer = torch.full((16,), float("nan"), device=device)
    out = buffer[:10]
    out.zero_()
    flat = torch.arange(10.0, device=device)
    meta = torch.tensor([2, 3, 8], dtype=torch.int32, device=device)
    with settings.override(mode=_mode(device)):
        _copy_views(flat, out, meta)
    assert out.tolist() == [0.0] * 8 + [16.0, 18.0]
    assert buffer[10:].isnan().all()
    with settings.override(mode="eager"), pytest.raises(exc.ShapeMismatchError, match="invalid for input of size 2"):
        _copy_views(flat, torch.zeros(10, device=device), meta)


@tessera.kernel
def _reshape_columns(x: torch.Tensor, meta: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for _ in hl.grid(1):
        n = hl.load(meta, [0])
        columns = x[:, :n].reshape(-1)
        for tile in hl.tile(n):
            out[tile] = columns[tile]
    return out


def test_reshaping_a_non_contiguous_view_is_an_error_at_the_users_line(device: torch.device) -> None:
    x, meta = torch.randn(4, 6, device=device), torch.tensor([2], device=device)
    with settings.override(mode=_mode(device)), pytest.raises(exc.ShapeMismatchError) as caught:
        _reshape_columns(x, meta, torch.zeros(8, device=device))
    assert "not contiguous" in str(caught.value)
    assert caught.value.location.source_line().strip() == "columns = x[:, :n].reshape(-1)"


@tessera.kernel
def _whole_runtime_dim(flat: torch.Tensor, meta: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for _ in hl.grid(1):
        n = hl.load(meta, [0])
        out[0] = flat[:n][:].sum()
    return out


def test_reading_a_runtime_sized_view_whole_asks_for_a_tile_loop(device: torch.device) -> None:
    flat, meta = torch.randn(8, device=device), torch.tensor([5], device=device)
    with settings.override(mode=_mode(device)), pytest.raises(exc.DynamicAllocationError, match="hl.tile"):
        _whole_runtime_dim(flat, meta, torch.zeros(1, device=device))


# -- allocations -----------------------------------------------------------------------------------
@tessera.kernel
def _allocate_loaded_rows(sizes: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for g in hl.grid(sizes.size(0)):
        m = hl.load(sizes, [g])
        rows = hl.zeros([m, 4], dtype=torch.float32)
        out[g, :] = rows.sum(0)
    return out


@pytest.mark.parametrize("mode", ["generated", "eager"])
def test_an_allocation_sized_by_a_loaded_value_explains_the_tile_shaped_rewrite(
        mode: str, device: torch.device) -> None:
    sizes, out = torch.tensor([2, 3], device=device), torch.zeros(2, 4, device=device)
    with settings.override(mode=_mode(device) if mode == "generated" else mode):
        with pytest.raises(exc.DynamicAllocationError) as caught:
            _allocate_loaded_rows(sizes, out)
    error = caught.value
    assert error.location is not None and error.location.filename == __file__
    assert error.location.source_line().strip() == "rows = hl.zeros([m, 4], dtype=torch.float32)"
    assert "compile-time" in str(error) or "compiled" in str(error)
    assert "for tile in hl.tile(m): acc = hl.zeros([tile, 4])" in str(error)
    assert "hl.specialize" in str(error)


@tessera.kernel
def _sum_from_eight(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([1], dtype=torch.float32, device=x.device)
    for group in hl.grid(1):
        total = hl.zeros([1], dtype=torch.float32)
        for tile in hl.tile(x.size(0), block_size=4):
            if tile.begin >= 8:  # a loop variable: a device branch too
                total = total + x[tile].sum()
        out[group] = total.sum()
    return out


def test_an_if_on_an_inner_loop_variable_is_a_device_branch(device: torch.device) -> None:
    x = torch.randn(23, device=device)
    generated, eager = _both_modes(device, _sum_from_eight, x)
    assert_close(generated, x[8:].sum().reshape(1), (1e-5, 1e-5), "sum from 8")
    assert_close(generated, eager, (1e-5, 1e-5), "sum from 8 vs eager")
