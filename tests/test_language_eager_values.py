"""What `hl` means in eager mode, continued: memory ops, creation, products, compile-time values.

Eager mode is the specification every other mode is checked against (see test_language_eager.py
for tiles, iteration order and block sizes). Each test is one behaviour, named after it.
"""
from __future__ import annotations

from typing import Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import settings

from eager_kernels import eager_kernel

# ---------------------------------------------------------------------------------------------
# Memory: load / store / extra_mask / index tensors / atomics
# ---------------------------------------------------------------------------------------------

@tessera.kernel(mode="eager", config=tessera.Config(block_sizes=[4]))
def load_first(x: torch.Tensor, n: int) -> torch.Tensor:
    """out[i] = x[i] for i < n, and what a masked load gives elsewhere."""
    out = torch.full_like(x, -1.0)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.load(x, [tile], extra_mask=tile.index < n)
    return out


def test_load_with_extra_mask_reads_zero_in_masked_lanes(device):
    x = torch.arange(1.0, 9.0, device=device)
    expected = torch.tensor([1.0, 2, 3, 4, 5, 0, 0, 0], device=device)
    assert torch.equal(load_first(x, 5), expected)


def test_store_with_extra_mask_does_not_write_masked_lanes(device):
    @eager_kernel(tessera.Config(block_sizes=[4]))
    def store_odd(x: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(x, -1.0)
        for tile in hl.tile(x.size(0)):
            hl.store(out, [tile], x[tile], extra_mask=tile.index % 2 == 1)
        return out

    x = torch.arange(1.0, 7.0, device=device)
    assert torch.equal(store_odd(x), torch.tensor([-1.0, 2, -1, 4, -1, 6], device=device))


def test_load_without_mask_equals_tensor_indexing(device):
    @eager_kernel()
    def copy(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            hl.store(out, [tile_m, tile_n], hl.load(x, [tile_m, tile_n]))
        return out

    x = torch.randn(33, 65, device=device)
    assert torch.equal(copy(x), x)


def test_load_with_an_index_tensor_gathers_rows(device):
    @eager_kernel()
    def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        out = torch.empty(rows.size(0), x.size(1), dtype=x.dtype, device=x.device)
        for tile_r, tile_c in hl.tile([rows.size(0), x.size(1)]):
            out[tile_r, tile_c] = hl.load(x, [rows[tile_r], tile_c])
        return out

    x = torch.randn(6, 3, device=device)
    rows = torch.tensor([5, 0, 0, 2], device=device)
    assert torch.equal(gather_rows(x, rows), x[rows])


def test_subscript_with_an_index_tensor_gathers(device):
    @eager_kernel()
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = x[index[tile]]
        return out

    x = torch.randn(10, device=device)
    index = torch.tensor([9, 3, 3, 0, 7], device=device)
    assert torch.equal(gather(x, index), x[index])


def test_store_with_an_index_tensor_scatters(device):
    @eager_kernel()
    def scatter(values: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=values.dtype, device=values.device)
        for tile in hl.tile(index.size(0)):
            hl.store(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 2.0, 3.0], device=device)
    index = torch.tensor([4, 0, 2], device=device)
    assert torch.equal(scatter(values, index, 5), torch.tensor([2.0, 0, 3, 0, 1], device=device))


def test_masked_lanes_may_hold_out_of_range_indices(device):
    @eager_kernel()
    def gather_in_range(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            i = index[tile]
            out[tile] = hl.load(x, [i], extra_mask=i < x.size(0))
        return out

    x = torch.tensor([1.0, 2, 3, 4], device=device)
    index = torch.tensor([0, 4, 3, 9], device=device)
    assert torch.equal(gather_in_range(x, index), torch.tensor([1.0, 0, 4, 0], device=device))


def test_atomic_add_accumulates_every_repeated_index(device):
    @eager_kernel()
    def histogram(values: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=values.dtype, device=values.device)
        for tile in hl.tile(index.size(0)):
            hl.atomic_add(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    index = torch.tensor([1, 1, 3, 1], device=device)
    assert torch.equal(histogram(values, index, 4), torch.tensor([0.0, 7, 0, 3], device=device))


def test_atomic_add_from_every_tile_into_one_element_sums_them_all(device):
    @eager_kernel(tessera.Config(block_sizes=[8]))
    def count_tiles(n: int, out: torch.Tensor) -> torch.Tensor:
        for _ in hl.tile(n):
            hl.atomic_add(out, [0], 1.0)
        return out

    assert count_tiles(100, torch.zeros(1, device=device)).item() == 13


def test_atomic_max_keeps_the_largest_of_repeated_indices_and_the_old_value(device):
    @eager_kernel()
    def scatter_max(values: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(index.size(0)):
            hl.atomic_max(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 5.0, 3.0, -4.0], device=device)
    index = torch.tensor([1, 1, 1, 2], device=device)
    out = scatter_max(values, index, torch.zeros(4, device=device))
    assert torch.equal(out, torch.tensor([0.0, 5.0, 0.0, 0.0], device=device))


def test_atomic_min_keeps_the_smallest_of_repeated_indices_and_the_old_value(device):
    @eager_kernel()
    def scatter_min(values: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(index.size(0)):
            hl.atomic_min(out, [index[tile]], values[tile])
        return out

    values = torch.tensor([1.0, 5.0, -3.0, 4.0], device=device)
    index = torch.tensor([1, 1, 1, 2], device=device)
    out = scatter_min(values, index, torch.zeros(4, device=device))
    assert torch.equal(out, torch.tensor([0.0, -3.0, 0.0, 0.0], device=device))


def test_tile_past_the_end_of_a_smaller_tensor_raises_indexing_error(device):
    @eager_kernel()
    def copy_n(x: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=x.dtype, device=x.device)
        for tile in hl.tile(n):
            out[tile] = x[tile]
        return out

    with pytest.raises(tessera.exc.IndexingError, match=r"out of bounds for dimension 0 of size 64"):
        copy_n(torch.zeros(64, device=device), 100)


def test_store_of_a_tile_past_the_end_raises_indexing_error(device):
    @eager_kernel()
    def fill(out: torch.Tensor, n: int) -> None:
        for tile in hl.tile(n):
            hl.store(out, [tile], 1.0)

    with pytest.raises(tessera.exc.IndexingError):
        fill(torch.zeros(10, device=device), 40)


def test_unmasked_out_of_range_index_reads_zero_and_checked_indices_report_it(device):
    """As generated code: an out-of-range lane reads 0 (nothing outside the tensor is read);
    TESSERA_CHECK_INDICES turns it into a located IndexingError."""
    @eager_kernel()
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = hl.load(x, [index[tile]])
        return out

    x = torch.arange(1.0, 5.0, device=device)
    torch.testing.assert_close(gather(x, torch.tensor([0, 4], device=device)), torch.tensor([1.0, 0.0], device=device))
    with settings.override(check_indices=True), pytest.raises(tessera.exc.IndexingError, match="not masked"):
        gather(x, torch.tensor([0, 4], device=device))


def test_negative_index_counts_from_the_end_and_below_minus_size_is_out_of_range(device):
    @eager_kernel()
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype, device=x.device)
        for tile in hl.tile(index.size(0)):
            out[tile] = hl.load(x, [index[tile]])
        return out

    x = torch.arange(1.0, 5.0, device=device)
    torch.testing.assert_close(gather(x, torch.tensor([0, -1, -4], device=device)), x[[0, -1, -4]])  # as torch
    torch.testing.assert_close(gather(x, torch.tensor([0, -5], device=device)), torch.tensor([1.0, 0.0], device=device))
    with settings.override(check_indices=True), pytest.raises(tessera.exc.IndexingError):
        gather(x, torch.tensor([0, -5], device=device))


def test_unmasked_out_of_range_scatter_index_writes_nothing_and_checked_indices_report_it(device):
    @eager_kernel()
    def scatter_ones(index: torch.Tensor, out: torch.Tensor) -> None:
        for tile in hl.tile(index.size(0)):
            hl.store(out, [index[tile]], 1.0)

    out = torch.zeros(4, device=device)
    scatter_ones(torch.tensor([0, 4, -5, 2], device=device), out)
    torch.testing.assert_close(out, torch.tensor([1.0, 0.0, 1.0, 0.0], device=device))
    with settings.override(check_indices=True), pytest.raises(tessera.exc.IndexingError):
        scatter_ones(torch.tensor([0, 4], device=device), out)


# ---------------------------------------------------------------------------------------------
# Creation: hl.zeros / hl.full / hl.arange
# ---------------------------------------------------------------------------------------------

def test_zeros_takes_its_shape_from_tiles_and_ints(device):
    shapes = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(n: int) -> None:
        for tile in hl.tile(n):
            block = hl.zeros([tile, 3], dtype=torch.float16)
            shapes.append((tuple(block.shape), block.dtype, bool((block == 0).all())))

    record(20)
    assert shapes == [((16, 3), torch.float16, True), ((4, 3), torch.float16, True)]


def test_zeros_is_float32_by_default(device):
    dtypes = []

    @eager_kernel()
    def record(n: int) -> None:
        for tile in hl.tile(n):
            dtypes.append(hl.zeros([tile]).dtype)

    record(4)
    assert dtypes == [torch.float32]


def test_full_fills_the_tile_with_the_value(device):
    @eager_kernel()
    def filled(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile(x.size()):
            out[tile_m, tile_n] = hl.full([tile_m, tile_n], 2.5, dtype=x.dtype)
        return out

    out = filled(torch.zeros(40, 3, device=device))
    assert torch.equal(out, torch.full([40, 3], 2.5, device=device))


def test_allocations_live_on_the_kernel_device(device):
    devices = []

    @eager_kernel()
    def record(x: torch.Tensor) -> None:
        for tile in hl.tile(x.size(0)):
            devices.append(hl.zeros([tile]).device)
            devices.append(hl.arange(4).device)

    x = torch.zeros(4, device=device)
    record(x)
    assert devices == [x.device, x.device]


def test_arange_is_int32_by_default(device):
    @eager_kernel()
    def positions(out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size(0)):
            out[tile] = hl.arange(tile.begin, tile.end)
        return out

    out = positions(torch.zeros(40, dtype=torch.int32, device=device))
    assert torch.equal(out, torch.arange(40, dtype=torch.int32, device=device))


def test_arange_of_the_block_size_has_block_size_elements(device):
    lengths = []

    @eager_kernel(tessera.Config(block_sizes=[16]))
    def record(n: int) -> None:
        for tile in hl.tile(n):
            lengths.append(hl.arange(tile.block_size).numel())

    record(20)
    assert lengths == [16, 16]


def test_helper_function_called_from_a_tile_loop_may_use_hl(device):
    def ones_like_tile(tile: hl.Tile) -> torch.Tensor:
        return hl.full([tile], 1.0)

    @eager_kernel()
    def ones(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = ones_like_tile(tile)
        return out

    assert torch.equal(ones(torch.zeros(50, device=device)), torch.ones(50, device=device))


# ---------------------------------------------------------------------------------------------
# Products: hl.dot and torch.addmm on tiles
# ---------------------------------------------------------------------------------------------

def test_dot_of_bf16_tiles_returns_float32(device):
    dtypes = []

    @eager_kernel()
    def record(a: torch.Tensor, b: torch.Tensor) -> None:
        for tile_m, tile_n in hl.tile([a.size(0), b.size(1)]):
            dtypes.append(hl.dot(a[tile_m, :], b[:, tile_n]).dtype)

    a = torch.randn(4, 8, device=device).bfloat16()
    record(a, a.T.contiguous())
    assert dtypes == [torch.float32]


def dot_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` as float32 through hl.dot with a float32 accumulator (made a kernel per test)."""
    m, k = a.size()
    out = torch.empty(m, b.size(1), dtype=torch.float32, device=a.device)
    for tile_m, tile_n in hl.tile([m, b.size(1)]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = hl.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc
    return out


def test_dot_accumulates_bf16_products_in_float32(device):
    _assert_sums_512_ones_in_float32(eager_kernel(tessera.Config(block_sizes=[16, 16, 64]))(dot_matmul), device)


def _assert_sums_512_ones_in_float32(matmul: Callable[..., torch.Tensor], device: torch.device) -> None:
    """512 products of 1 * 1: a bf16 sum stops growing at 256, a float32 sum reaches 512."""
    a = torch.ones(2, 512, dtype=torch.bfloat16, device=device)
    b = torch.ones(512, 3, dtype=torch.bfloat16, device=device)
    out = matmul(a, b)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.full([2, 3], 512.0, device=device))


def test_dot_matches_a_float32_matmul_of_the_bf16_inputs(device):
    matmul = eager_kernel(tessera.Config(block_sizes=[16, 16, 32]))(dot_matmul)

    a = torch.randn(40, 70, device=device).bfloat16()
    b = torch.randn(70, 20, device=device).bfloat16()
    torch.testing.assert_close(matmul(a, b), a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def test_addmm_of_a_float32_accumulator_and_bf16_tiles_accumulates_in_float32(device):
    # Plain torch rejects addmm(f32, bf16, bf16); inside a kernel it is the canonical K loop.
    @eager_kernel(tessera.Config(block_sizes=[16, 16, 64]))
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = a.size()
        out = torch.empty(m, b.size(1), dtype=torch.float32, device=a.device)
        for tile_m, tile_n in hl.tile([m, b.size(1)]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, a[tile_m, tile_k], b[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    _assert_sums_512_ones_in_float32(matmul, device)


def test_addmm_in_a_kernel_matches_a_float32_reference(device):
    @eager_kernel(tessera.Config(block_sizes=[16, 16, 32]))
    def matmul_into(acc_in: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(acc_in)
        for tile_m, tile_n in hl.tile(acc_in.size()):
            acc = acc_in[tile_m, tile_n]
            for tile_k in hl.tile(a.size(1)):
                acc = torch.addmm(acc, a[tile_m, tile_k], b[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    acc = torch.randn(40, 20, device=device)
    a = torch.randn(40, 70, device=device).bfloat16()
    b = torch.randn(70, 20, device=device).bfloat16()
    torch.testing.assert_close(matmul_into(acc, a, b), acc + a.float() @ b.float(),
                               rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Compile-time values
# ---------------------------------------------------------------------------------------------

def test_specialize_returns_a_python_int(device):
    @eager_kernel()
    def width(x: torch.Tensor) -> object:
        return hl.specialize(x.size(1))

    n = width(torch.zeros(3, 7, device=device))
    assert isinstance(n, int) and n == 7


def test_specialize_of_a_shape_returns_ints(device):
    @eager_kernel()
    def shape(x: torch.Tensor) -> object:
        return hl.specialize(x.shape)

    dims = shape(torch.zeros(3, 7, device=device))
    assert all(isinstance(d, int) for d in dims) and list(dims) == [3, 7]


def test_specialized_size_may_size_an_allocation_in_a_tile_loop(device):
    @eager_kernel()
    def row_copy(x: torch.Tensor) -> torch.Tensor:
        n = hl.specialize(x.size(1))
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = hl.zeros([tile, n]) + x[tile, :]
        return out

    x = torch.randn(40, 6, device=device)
    assert torch.equal(row_copy(x), x)
