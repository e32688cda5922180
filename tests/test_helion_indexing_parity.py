"""Issue 15: indexing and broadcasting as Helion's unit tests use them, in eager and interpret
(compiled: same code), against torch at shapes with size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")
T = torch.Tensor


def _run(fn, config, *args, modes=MODES):
    return {mode: tessera.kernel(fn, mode=mode, config=config)(*args) for mode in modes}


# -- a tile reading a dimension of size 1 broadcasts its one element ---------------------------
def add_size_one_biases(x: T, rows: T, cols: T) -> T:
    out = torch.empty_like(x)
    for tile_a, tile_b, tile_c in hl.tile(x.size()):
        out[tile_a, tile_b, tile_c] = x[tile_a, tile_b, tile_c] + rows[tile_a, tile_b, tile_c] \
            + cols[tile_a, tile_b, tile_c]
    return out


@pytest.mark.parametrize("shape", [(16, 24, 32), (5, 3, 7), (1, 1, 1), (2, 1, 9)])
def test_tile_over_size_one_dim_broadcasts(shape: tuple[int, int, int]) -> None:
    x = torch.randn(shape)
    rows, cols = torch.randn(1, *shape[1:]), torch.randn(shape[0], 1, shape[2])
    for mode, result in _run(add_size_one_biases, tessera.Config(block_sizes=[4, 2, 8]), x, rows, cols).items():
        torch.testing.assert_close(result, x + rows + cols, msg=lambda m: f"{mode}: {m}")


def masked_copy(x: T, mask: T) -> T:
    out = torch.zeros_like(x)
    for tile_a, tile_b, tile_c in hl.tile(x.size()):
        out[tile_a, tile_b, tile_c] = hl.load(x, [tile_a, tile_b, tile_c], extra_mask=mask[tile_a, tile_b, tile_c])
    return out


@pytest.mark.parametrize("mask_shape", [(1, 5, 1), (7, 1, 9), (7, 5, 9)])
def test_size_one_extra_mask_broadcasts(mask_shape: tuple[int, int, int]) -> None:
    x = torch.randn(7, 5, 9)
    mask = torch.rand(mask_shape) > 0.5
    for mode, result in _run(masked_copy, tessera.Config(block_sizes=[4, 4, 8]), x, mask).items():
        torch.testing.assert_close(result, torch.where(mask, x, 0), msg=lambda m: f"{mode}: {m}")


def store_into_size_one(x: T, out: T) -> T:
    for tile_a, tile_b in hl.tile(x.size()):
        out[tile_a, tile_b] = x[tile_a, tile_b]
    return out


def test_tile_storing_past_size_one_dim_is_an_error() -> None:
    # only reads broadcast: a store past a dimension of size 1 stays a located error
    for mode in MODES:
        with pytest.raises(tessera.exc.IndexingError):
            tessera.kernel(store_into_size_one, mode=mode, config=tessera.Config(block_sizes=[4, 4]))(
                torch.randn(3, 5), torch.empty(1, 5))


# -- Helion's implicit broadcast by tile (traced modes; eager keeps torch's right alignment) -------
def add_row_bias(a: T, row: T, col: T) -> T:
    out = torch.empty_like(a)
    for tile_m, tile_n in hl.tile(a.size()):
        out[tile_m, tile_n] = a[tile_m, tile_n] * col[tile_n] + row[tile_m]
    return out


def add_middle(a: T, b: T) -> T:
    out = torch.empty_like(a)
    for tile_a, tile_b, tile_c in hl.tile(a.size()):
        out[tile_a, tile_b, tile_c] = a[tile_a, tile_b, tile_c] + b[tile_b]
    return out


def add_tile_and_slice(a: T, b: T) -> T:
    k = a.size(2)
    out = torch.empty_like(a)
    for tile_m, tile_n in hl.tile([a.size(0), a.size(1)]):
        out[tile_m, tile_n, 0:k] = a[tile_m, tile_n, 0:k] + b[tile_m, 0:k]
    return out


def scale_expand_as(a: T, scale: T) -> T:
    out = torch.empty_like(a)
    for tile_m, tile_n in hl.tile(a.size()):
        loaded = a[tile_m, tile_n]
        out[tile_m, tile_n] = loaded * scale[tile_m].expand_as(loaded)
    return out


def store_rows(a: T, row: T) -> T:
    out = torch.empty_like(a)
    for tile_m, tile_n in hl.tile(a.size()):
        out[tile_m, tile_n] = row[tile_m]
    return out


@pytest.mark.parametrize("m, n", [(37, 20), (1, 1), (16, 16), (5, 33)])
def test_implicit_broadcast_by_tile(m: int, n: int) -> None:
    config = tessera.Config(block_sizes=[16, 8])
    a, row, col = torch.randn(m, n), torch.randn(m), torch.randn(n)
    run = lambda fn: tessera.kernel(fn, mode="interpret", config=config)  # noqa: E731
    torch.testing.assert_close(run(add_row_bias)(a, row, col), a * col + row[:, None])
    torch.testing.assert_close(run(scale_expand_as)(a, row), a * row[:, None])
    torch.testing.assert_close(run(store_rows)(a, row), row[:, None].expand_as(a))
    a3 = torch.randn(3, m, 5)
    torch.testing.assert_close(tessera.kernel(add_middle, mode="interpret", config=tessera.Config(
        block_sizes=[2, 16, 4]))(a3, row), a3 + row[None, :, None])
    a3, b = torch.randn(m, n, 2), torch.randn(m, 4)
    torch.testing.assert_close(run(add_tile_and_slice)(a3, b), a3 + b[:, 0:2].unsqueeze(1))



# -- index tensors of different ranks broadcast from the right, as in torch ----------------------
def gather_rows_by_tile(col: T, table: T) -> T:
    out = torch.empty(col.size(0), col.size(1), table.size(1))
    for tile_m, tile_p in hl.tile([col.size(0), table.size(1)]):
        for tile_k in hl.tile(col.size(1)):
            rows = col[tile_m, tile_k]
            out[tile_m, tile_k, tile_p] = table[rows[:, :, None], tile_p.index[None, :]]
    return out


@pytest.mark.parametrize("m, k, p", [(4, 4, 4), (5, 7, 9), (1, 1, 1), (16, 3, 2)])
def test_gather_index_tensors_of_lower_rank_align_right(m: int, k: int, p: int) -> None:
    col, table = torch.randint(0, 6, (m, k)), torch.randn(6, p)
    # silent before: the lower-rank index `tile_p.index[None, :]` was placed from the left
    for mode, result in _run(gather_rows_by_tile, tessera.Config(block_sizes=[4, 4, 2]), col, table).items():
        torch.testing.assert_close(result, table[col], msg=lambda m: f"{mode}: {m}")


def test_gather_index_alignment_on_pallas() -> None:
    pytest.importorskip("jax")
    col, table = torch.randint(0, 6, (5, 7)), torch.randn(6, 9)
    result = tessera.kernel(gather_rows_by_tile, backend="pallas", config=tessera.Config(block_sizes=[4, 4, 2]))(
        col, table)
    torch.testing.assert_close(result, table[col])


# -- torch.lerp with a float argument as its weight ----------------------------------------------
def lerp_in_place(a: T, b: T, weight: float) -> T:
    for tile_m, tile_n in hl.tile(a.shape):
        a[tile_m, tile_n] = torch.lerp(a[tile_m, tile_n], b[tile_m, tile_n], weight)
    return a


@pytest.mark.parametrize("shape", [(37, 20), (1, 1), (16, 5)])
def test_lerp_with_float_weight(shape: tuple[int, int]) -> None:
    a, b = torch.randn(shape), torch.randn(shape)
    for mode in MODES:
        kernel = tessera.kernel(lerp_in_place, mode=mode)
        for weight in (0.25, 0.5, 1.0, -2.0):  # both of torch's formulas, one kernel
            torch.testing.assert_close(kernel(a.clone(), b, weight), torch.lerp(a, b, weight), msg=lambda m: f"{mode}: {m}")


# -- torch.gather of tile values in registers --------------------------------------------------
def gather_along_rows(src: T, index: T) -> T:
    out = torch.empty(index.shape, dtype=src.dtype)
    for tile_n, tile_k in hl.tile(index.shape):
        out[tile_n, tile_k] = torch.gather(src[tile_n, :], 1, index[tile_n, tile_k])
    return out


def gather_along_columns(src: T, index: T) -> T:
    out = torch.empty(index.shape, dtype=src.dtype)
    for tile_k, tile_m in hl.tile(index.shape):
        out[tile_k, tile_m] = src[:, tile_m].gather(0, index[tile_k, tile_m])
    return out


@pytest.mark.parametrize("n, m, k", [(16, 32, 8), (5, 37, 3), (1, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_gather_from_registers(n: int, m: int, k: int, dtype: torch.dtype) -> None:
    src = (torch.randn(n, m) * 10).to(dtype)
    rows, columns = torch.randint(0, m, (n, k)), torch.randint(0, n, (k, m))
    for mode, result in _run(gather_along_rows, tessera.Config(block_sizes=[4, 4]), src, rows).items():
        assert torch.equal(result, torch.gather(src, 1, rows)), mode
    for mode, result in _run(gather_along_columns, tessera.Config(block_sizes=[4, 8]), src, columns).items():
        assert torch.equal(result, torch.gather(src, 0, columns)), mode


def gather_along_a_tile(src: T, index: T) -> T:
    out = torch.empty(index.shape, dtype=src.dtype)
    for tile_n, tile_k in hl.tile(index.shape):
        out[tile_n, tile_k] = torch.gather(src[tile_n, tile_k], 1, index[tile_n, tile_k])
    return out


def test_gather_refusals_are_located() -> None:
    src = torch.randn(8, 8)
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="whole dimension"):
        tessera.kernel(gather_along_a_tile, mode="interpret")(src, torch.zeros(8, 8, dtype=torch.int64))
    for mode in MODES:  # torch's own rule: an integer index
        with pytest.raises(tessera.exc.TesseraError):
            tessera.kernel(gather_along_rows, mode=mode)(src, torch.zeros(8, 4, dtype=torch.float32))
    index = torch.randint(0, 8, (8, 4), dtype=torch.int32)  # int32 indices, as torch takes them
    for mode, result in _run(gather_along_rows, tessera.Config(block_sizes=[4, 4]), src, index).items():
        assert torch.equal(result, torch.gather(src, 1, index)), mode


# -- arange with bounds that move per tile (their distance a compile-time int) -----------------
def arange_scatter_doubled(x: T) -> T:
    out = torch.zeros([x.size(0) * 2], dtype=torch.int32)
    for tile in hl.tile(x.size(0)):
        indices = hl.arange(tile.begin * 2, tile.begin * 2 + tile.block_size * 2)
        out[indices] = indices
    return out


def torch_arange_forms(x: T) -> T:
    shifted, counted, stepped = (torch.zeros([x.size(0)], dtype=torch.int32) for _ in range(3))
    for tile in hl.tile(x.size(0)):
        shifted[tile] = torch.arange(tile.begin, tile.begin + tile.block_size, device=x.device)
        counted[tile] = torch.arange(tile.block_size)
        stepped[tile] = torch.arange(tile.begin * 2, (tile.begin + tile.block_size) * 2, step=2)
    return torch.stack([shifted, counted, stepped], dim=1)


@pytest.mark.parametrize("n", [64, 40, 1])
def test_arange_with_moving_bounds(n: int) -> None:
    x = torch.randn(n)
    lanes = torch.arange(n)
    expected = torch.stack([lanes, lanes % 16, lanes * 2], dim=1).int()
    for mode, result in _run(torch_arange_forms, tessera.Config(block_sizes=[16]), x).items():
        assert torch.equal(result, expected), mode
    if n % 16 == 0:  # the scattered arange runs past a tail tile's end (eager refuses that too)
        for mode, result in _run(arange_scatter_doubled, tessera.Config(block_sizes=[16]), x).items():
            assert torch.equal(result, torch.arange(2 * n, dtype=torch.int32)), mode


def arange_of_varying_length(x: T) -> T:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.arange(tile.begin, tile.end).float()
    return out


def test_arange_of_runtime_length_is_located() -> None:
    with pytest.raises(tessera.exc.DynamicAllocationError, match="compile-time int"):
        tessera.kernel(arange_of_varying_length, mode="interpret")(torch.randn(40))


# -- torch's index arity: trailing dims implied, one `...`, not too many ------------------------
def copy_rows_from_argument(src: T, dst: T, val: T) -> tuple[T, T]:
    for i in hl.grid(src.shape[0]):
        dst[i] = val  # a tensor argument, read whole; `dst[i]` is `dst[i, :]`
        src[i] = dst[i]
    return src, dst


@pytest.mark.parametrize("shape", [(5, 4), (1, 1), (3, 7, 2)])
def test_fewer_indices_than_dims_and_tensor_values(shape: tuple[int, ...]) -> None:
    val = torch.randn(shape[1:])
    for mode in MODES:
        src, dst = tessera.kernel(copy_rows_from_argument, mode=mode)(torch.zeros(shape), torch.zeros(shape), val)
        torch.testing.assert_close(src, val.expand(shape), msg=lambda m: f"{mode}: {m}")
        torch.testing.assert_close(dst, val.expand(shape), msg=lambda m: f"{mode}: {m}")


def two_ellipses(x: T) -> T:
    for _ in hl.grid(1):
        x[..., ...] = 1.0
    return x


def too_many_indices(x: T) -> T:
    for i in hl.grid(x.size(0)):
        x[i, 0, 0, ...] = 1.0
    return x


@pytest.mark.parametrize("kernel, message", [(two_ellipses, "single ellipsis"), (too_many_indices, "too many indices")])
def test_index_arity_errors_are_type_inference_errors(kernel, message) -> None:
    for mode in MODES:
        with pytest.raises(tessera.exc.TypeInferenceError, match=message):
            tessera.kernel(kernel, mode=mode)(torch.zeros(4, 8))


# -- torch.reshape spelled as a function ------------------------------------------------------
def softmax_with_reshapes(x: T) -> T:
    out = torch.empty_like(x)
    for tile_n in hl.tile(x.size(0)):
        values = x[tile_n, :]
        amax = torch.amax(values, dim=1).view(tile_n, 1)
        exp = torch.exp(values - amax)
        out[tile_n, :] = exp / torch.reshape(torch.sum(exp, dim=1), [tile_n, 1])
    return out


@pytest.mark.parametrize("shape", [(9, 37), (1, 1), (4, 64)])
def test_torch_reshape_function(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    for mode, result in _run(softmax_with_reshapes, tessera.Config(block_sizes=[2]), x).items():
        torch.testing.assert_close(result, torch.softmax(x, dim=1), msg=lambda m: f"{mode}: {m}")


def test_config_spec_has_no_flatten_choices() -> None:
    # every N-D tile loop is one flat program id already: nothing for a tuner to flatten
    bound = tessera.kernel(add_row_bias, mode="interpret").bind((torch.randn(8, 4), torch.randn(8), torch.randn(4)))
    assert bound.config_spec.flatten_loops == []


# -- v.view(dtype): the same bits as a dtype of the same size ---------------------------------
def bump_raw_bits(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        raw = x[tile].view(dtype=torch.int16) + 1
        out[tile] = raw.view(dtype=torch.bfloat16)
    return out


def float_exponents(x: T) -> T:
    out = torch.empty(x.shape, dtype=torch.int32)
    for tile in hl.tile(x.size(0)):
        out[tile] = (x[tile].view(torch.int32) >> 23) & 255
    return out


@pytest.mark.parametrize("n", [100, 1, 64])
def test_view_dtype_reinterprets_bits(n: int) -> None:
    x = torch.randn(n, dtype=torch.bfloat16)
    for mode, result in _run(bump_raw_bits, None, x).items():
        assert torch.equal(result, (x.view(torch.int16) + 1).view(torch.bfloat16)), mode
    xf = torch.randn(n) * 1e3
    for mode, result in _run(float_exponents, None, xf).items():
        assert torch.equal(result, (xf.view(torch.int32) >> 23) & 255), mode
    if __import__("importlib").util.find_spec("jax"):
        assert torch.equal(tessera.kernel(float_exponents, backend="pallas")(xf), (xf.view(torch.int32) >> 23) & 255)


def view_as_wider(x: T) -> T:
    out = torch.empty(x.shape, dtype=torch.int32)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile].view(torch.int32)
    return out


def test_view_dtype_of_another_size_is_located() -> None:
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="same size"):
        tessera.kernel(view_as_wider, mode="interpret")(torch.randn(8, dtype=torch.float16))


# -- slices with a step inside tile loops -----------------------------------------------------
def strided_copies(src1: T, dst1: T, src2: T, dst2: T) -> tuple[T, T, T, T]:
    for _ in hl.grid(1):
        dst1[::2] = 1.0
        src1[::2] = dst1[::2]
        dst2[1::3] = 2.0
        src2[1::3] = dst2[1::3]
    return src1, dst1, src2, dst2


def odd_columns(x: T, out: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, 1::2] * 2
    return out


@pytest.mark.parametrize("n", [128, 7, 1])
def test_slices_with_a_step(n: int) -> None:
    expected = [torch.zeros(n) for _ in range(4)]
    expected[0][::2] = expected[1][::2] = 1.0
    expected[2][1::3] = expected[3][1::3] = 2.0
    x = torch.randn(5, n)
    for mode in MODES:
        results = tessera.kernel(strided_copies, mode=mode)(*(torch.zeros(n) for _ in range(4)))
        assert all(torch.equal(got, want) for got, want in zip(results, expected)), mode
        got = tessera.kernel(odd_columns, mode=mode)(x, torch.zeros(5, n // 2))
        assert torch.equal(got, x[:, 1::2] * 2), mode


def negative_step(x: T) -> T:
    for _ in hl.grid(1):
        x[::-1] = 1.0
    return x


def test_a_non_positive_step_is_located() -> None:
    with pytest.raises(tessera.exc.IndexingError, match="step"):
        tessera.kernel(negative_step, mode="interpret")(torch.zeros(4))


# -- torch.stack of more than two tile values ---------------------------------------------------
def stack_middle(a: T, b: T, c: T) -> T:
    out = torch.zeros(a.size(0), 3, a.size(1), dtype=a.dtype)
    for tile_m in hl.tile(a.size(0)):
        for tile_n in hl.tile(a.size(1)):
            out[tile_m, :, tile_n] = torch.stack([a[tile_m, tile_n], b[tile_m, tile_n], c[tile_m, tile_n]], dim=1)
    return out


def stack_first_and_sum(a: T, b: T, c: T, d: T, e: T) -> T:
    out = torch.zeros(a.shape)
    for tile_m, tile_n in hl.tile(a.shape):
        stacked = torch.stack([a[tile_m, tile_n], b[tile_m, tile_n], c[tile_m, tile_n], d[tile_m, tile_n],
                               e[tile_m, tile_n]], dim=0)
        out[tile_m, tile_n] = stacked.sum(0) + stacked.amax(0)
    return out


@pytest.mark.parametrize("shape", [(5, 9), (1, 1), (16, 32)])
def test_stack_of_three_and_five(shape: tuple[int, int]) -> None:
    a, b, c, d, e = (torch.randn(shape) for _ in range(5))
    for mode, result in _run(stack_middle, tessera.Config(block_sizes=[4, 8]), a, b, c).items():
        assert torch.equal(result, torch.stack([a, b, c], 1)), mode
    for mode, result in _run(stack_first_and_sum, tessera.Config(block_sizes=[4, 8]), a, b, c, d, e).items():
        expected = a + b + c + d + e + torch.stack([a, b, c, d, e]).amax(0)
        torch.testing.assert_close(result, expected, msg=lambda m: f"{mode}: {m}")
