"""Issue 15 §3: the rest of torch on tile values: lanes moved within whole dims (flip, roll, repeat,
tile, index_select, tensor_split), vector products and einsum, running extremes and order
statistics. Each against torch in eager and interpret modes at size 1, non-powers of two and tail
tiles; what cannot be computed is refused with the same located error in every mode."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from marked_lines import marked_line

T = torch.Tensor
MODES = ("eager", "interpret")
SHAPES = ((1, 1), (5, 7), (6, 16))
CONFIG = tessera.Config(block_sizes=[4])


def rows(out: T, x: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = op(x[tile, :])
    return out


def per_row(out: T, x: T, op: Callable[..., Any]) -> T:
    for i in hl.grid(x.size(0)):
        out[i, :] = op(x[i, :])
    return out


def _inputs(shape: tuple[int, int], dtype: torch.dtype) -> T:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 8
    return x.to(dtype)


def _check(op: Callable[..., Any], x: T, *, exact: bool = True, layout: Callable[..., T] = rows) -> None:
    expected = op(x) if layout is rows else torch.stack([op(row) for row in x])
    for mode in MODES:
        kernel = tessera.kernel(layout, mode=mode, config=CONFIG)
        got = kernel(torch.empty_like(expected), x, op)
        tolerance = 0.0 if exact else (1e-2 if x.dtype in (torch.bfloat16, torch.float16) else 1e-4)
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True, msg=mode)


# -- lanes moved within whole dims ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_flip_roll_repeat_and_tile_move_lanes_as_torch(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = _inputs(shape, dtype)
    _check(lambda v: torch.flip(v, [1]), x)
    _check(lambda v: torch.roll(v, 3, 1) + v.roll(-9, dims=-1), x)
    _check(lambda v: v.repeat(1, 3).flip([1]).roll(1, 1)[:, ::3], x)
    _check(lambda v: torch.tile(v, (2,))[:, 1::2], x)


@pytest.mark.parametrize("shape", SHAPES)
def test_index_select_by_an_arange_a_constant_and_a_loaded_index(shape: tuple[int, int]) -> None:
    x = _inputs(shape, torch.float16)
    _check(lambda v: torch.index_select(v, 1, v.size(1) - 1 - torch.arange(v.size(1))), x)
    _check(lambda v: v.index_select(1, torch.tensor([0])).expand_as(v), x)
    if shape[1] >= 7:
        _check(lambda v: v.index_select(1, torch.tensor([6, 0, 3, 3, 1, 2, 5])), x)
    index = torch.randint(0, shape[1], (shape[1],), generator=torch.Generator().manual_seed(2))

    def by_loaded_index(out: T, x: T, index: T) -> T:
        for tile in hl.tile(x.size(0)):
            out[tile, :] = torch.index_select(x[tile, :], 1, index[:])
        return out
    for mode in MODES:
        got = tessera.kernel(by_loaded_index, mode=mode, config=CONFIG)(torch.empty_like(x), x, index)
        torch.testing.assert_close(got, x.index_select(1, index), rtol=0, atol=0, msg=mode)


def test_tensor_split_by_sections_and_by_indices() -> None:
    x = _inputs((5, 7), torch.float32)
    _check(lambda v: torch.cat(list(reversed(torch.tensor_split(v, 3, 1))), 1), x)
    _check(lambda v: torch.cat(list(reversed(v.tensor_split([2, -2], dim=1))), 1), x)


@pytest.mark.parametrize("shape", SHAPES)
def test_tensor_split_with_empty_pieces_as_torch(shape: tuple[int, int]) -> None:
    # more pieces than lanes, and repeated cuts: empty pieces (of no lanes) were refused when traced
    x = _inputs(shape, torch.float32)
    _check(lambda v: torch.stack([p.sum(1) for p in torch.tensor_split(v, 9, 1)], 1), x)
    _check(lambda v: torch.cat([*torch.tensor_split(v, [3, 3, 1], 1)], 1) + v[:, 2:2].sum(1, keepdim=True), x)


def constant_index_out_of_range(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :].index_select(1, torch.tensor([0, 9]))  # line: out-of-range
    return out


@pytest.mark.parametrize("kernel, error, line, words", [
    (constant_index_out_of_range, exc.IndexingError, "out-of-range", "out of range")])
def test_pieces_and_indices_torch_refuses_or_registers_cannot_hold_are_located_errors(
        kernel: Callable[..., T], error: type[Exception], line: str, words: str) -> None:
    with pytest.raises(error, match=words) as info:
        tessera.kernel(kernel, mode="interpret")(torch.empty(5, 7), torch.randn(5, 7))
    assert info.value.location.lineno == marked_line(__file__, line)[0]


def first_rows_of_a_tile(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        out[:4, :] = v[:4]  # line: tile-slice
    return out


def flipped_tile(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.flip(x[tile, :], [0])  # line: tile-flip
    return out


@pytest.mark.parametrize("kernel, line", [(first_rows_of_a_tile, "tile-slice"), (flipped_tile, "tile-flip")])
def test_lanes_of_a_tile_dim_are_refused_alike_in_every_mode(kernel: Callable[..., T], line: str) -> None:
    """Eager held the tile as a real slice and answered `v[:4]` (the first tile's rows, silently
    per-tile in a compiled run it cannot express); now it refuses it as tracing does."""
    messages = []
    for mode in MODES:
        with pytest.raises(exc.UnsupportedOperationError, match="which is a tile") as info:
            tessera.kernel(kernel, mode=mode, config=CONFIG)(torch.zeros(8, 5), torch.randn(8, 5))
        assert info.value.location.lineno == marked_line(__file__, line)[0], mode
        messages.append(str(info.value).split("\n")[0])
    assert messages[0] == messages[1]


# -- vector products and einsum ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_vector_products_and_einsum_forms(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = _inputs(shape, dtype)
    weights = _inputs((3, shape[1]), dtype)

    def products(out: T, x: T, w: T, op: Callable[..., Any]) -> T:
        for tile in hl.tile(x.size(0)):
            out[tile, :] = op(x[tile, :], w[:, :])
        return out
    forms = [
        lambda v, w: (v @ w[0, :])[:, None] + torch.mv(v, w[1, :])[:, None],
        lambda v, w: torch.outer(v @ w[2, :], w[0, :]),
        lambda v, w: (w[0, :] @ v.t())[:, None] * v,
        lambda v, w: torch.einsum("ik,jk->ij", v, w),           # a product (matmul)
        lambda v, w: torch.einsum("ik,jk", v, w),               # the implicit result: "ij"
        lambda v, w: torch.einsum("ij->ji", v).t() + torch.einsum("ij,j->ij", v, w[0, :]),
        lambda v, w: torch.einsum("ij,kj->ik", v, w).sum(1, keepdim=True) + torch.einsum("ij->i", v)[:, None],
    ]
    for form in forms:
        expected = form(x.double(), weights.double()).to(dtype)
        for mode in MODES:
            got = tessera.kernel(products, mode=mode, config=CONFIG, dot_precision="ieee")(
                torch.empty_like(expected), x, weights, form)
            tolerance = 5e-2 if dtype == torch.bfloat16 else 1e-4
            torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance, msg=mode)


def diagonal_einsum(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.einsum("ii->i", x[tile, :])  # line: diagonal
    return out


def ellipsis_einsum(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.einsum("...j->...j", x[tile, :])  # line: ellipsis
    return out


@pytest.mark.parametrize("kernel, line, form", [(diagonal_einsum, "diagonal", "diagonal"),
                                                (ellipsis_einsum, "ellipsis", "ellipsis")])
def test_einsum_forms_outside_products_are_refused_naming_the_form(kernel: Callable[..., T], line: str,
                                                                   form: str) -> None:
    for mode in MODES:
        with pytest.raises(exc.UnsupportedOperationError, match=form) as info:
            tessera.kernel(kernel, mode=mode, config=CONFIG)(torch.empty(4, 4), torch.randn(4, 4))
        assert info.value.location.lineno == marked_line(__file__, line)[0], mode


# -- running extremes and order statistics ----------------------------------------------------------
def _with_nans_and_ties(shape: tuple[int, int]) -> T:
    x = torch.round(_inputs(shape, torch.float32) / 4)  # small integers: many ties
    if shape[1] > 3:
        x[1, 2] = float("nan")
        x[2, 0] = float("inf")
        x[3, 5] = float("-inf")
    return x


@pytest.mark.parametrize("shape", SHAPES)
def test_cummax_and_cummin_keep_torchs_later_index_on_ties_and_nan(shape: tuple[int, int]) -> None:
    x = _with_nans_and_ties(shape)
    _check(lambda v: torch.cummax(v, 1).values, x)
    _check(lambda v: torch.cummax(v, 1).indices, x)
    _check(lambda v: v.cummin(-1)[0] + v.cummin(-1)[1], x)
    _check(lambda v: torch.cummax(v, 1).indices, x.to(torch.int32).nan_to_num(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logcumsumexp_over_a_wide_range_and_infinities(dtype: torch.dtype) -> None:
    x = _inputs((6, 16), torch.float32) * 20  # spans hundreds: a shift by the row max would underflow
    x[0, 3], x[1, 0], x[2, 5] = float("inf"), float("-inf"), float("nan")
    x[4, :] = float("-inf")
    _check(lambda v: torch.logcumsumexp(v, 1), x.to(dtype), exact=False)


@pytest.mark.parametrize("shape", SHAPES)
def test_kthvalue_median_and_argsort(shape: tuple[int, int]) -> None:
    x = _inputs(shape, torch.float32)  # no ties: torch's own index is the only one
    _check(lambda v: torch.kthvalue(v, 1, 1, keepdim=True).values + v.kthvalue(v.size(1), 1, True).indices, x)
    _check(lambda v: v.median(1, keepdim=True).values * 100 + torch.median(v, -1, True).indices, x)
    _check(lambda v: torch.argsort(v, 1) * 10 + v.argsort(dim=-1, descending=True), x)
    _check(lambda v: v.median() + v * 0, x, layout=per_row)
    nans = _with_nans_and_ties(shape)
    _check(lambda v: torch.where(torch.isnan(v.median(1, True).values), -1.0, 0.0) + v.median(1, True).indices, nans)
    _check(lambda v: v.median(1, True).values.nan_to_num(-5.0), nans.to(torch.bfloat16))


def test_std_and_var_of_every_element_of_a_row(device: torch.device) -> None:
    x = _inputs((5, 7), torch.float32)
    _check(lambda v: v.std() + v.var() * 0.5 + v * 0, x, exact=False, layout=per_row)


def sorted_rows(values: T, indices: T, x: T, descending: bool) -> tuple[T, T]:
    for tile in hl.tile(x.size(0)):
        ordered = torch.sort(x[tile, :], dim=1, descending=descending)
        values[tile, :] = ordered.values
        indices[tile, :] = ordered.indices
    return values, indices


@pytest.mark.parametrize("descending", [False, True])
def test_sort_ties_negative_and_positive_zero_in_lane_order_keeping_their_signs(descending: bool) -> None:
    """The sort key put -0.0 below 0.0, so their indices came back swapped against torch (silent);
    torch's stable sort ties them. Now they tie, and each keeps its sign."""
    x = torch.tensor([[0.0, -0.0, 1.0, -0.0, 0.0, float("nan"), -1.0], [3.0, -0.0, 2.0, 0.0, -5.0, 0.0, -float("inf")]])
    expected = torch.sort(x, dim=1, descending=descending, stable=True)
    for mode in MODES:
        values, indices = tessera.kernel(sorted_rows, mode=mode)(torch.empty_like(x), torch.empty(x.shape, dtype=torch.int64),
                                                                 x, descending)
        assert indices.tolist() == expected.indices.tolist(), mode
        assert torch.equal(torch.signbit(values), torch.signbit(expected.values)), mode
        torch.testing.assert_close(values, expected.values, equal_nan=True, msg=mode)


def smallest_two(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = torch.topk(x[tile, :], 2, 1, largest=False).indices
    return out


def test_topk_names_the_earliest_tied_lane_in_every_mode() -> None:
    x = torch.tensor([[2.0, 1.0, 1.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    for mode in MODES:
        got = tessera.kernel(smallest_two, mode=mode)(torch.empty(2, 2, dtype=torch.int64), x)
        assert got.tolist() == [[1, 2], [0, 1]], mode


def row_dots_by_tile(out: T, x: T, w: T, y: T) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = y[tile_m, tile_n] + x[tile_m, :] @ w[:]
    return out


def test_a_matrix_vector_product_keeps_its_rows_tile_for_broadcast_by_tile() -> None:
    """`r = v @ w` runs over tile_m; Helion's broadcast by tile lines it up with tile_m of
    `y[tile_m, tile_n]`. Eager lost the tile of a 1-D product's result and lined r up with tile_n."""
    x, w, y = torch.randn(8, 5), torch.randn(5), torch.randn(8, 8)
    for mode in MODES:
        got = tessera.kernel(row_dots_by_tile, mode=mode, config=tessera.Config(block_sizes=[4, 4]))(
            torch.empty(8, 8), x, w, y)
        torch.testing.assert_close(got, y + (x @ w)[:, None], msg=mode)


def indexed_by_tensors(out: T, x: T, index: T) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        out[tile, :] = v[:, index[:]] + v[:, torch.arange(v.size(1))] * 10 + v[:, torch.tensor([-1] * 7)] * 100
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_a_tile_value_indexed_by_an_int_tensor_along_a_whole_dim(dtype: torch.dtype) -> None:
    """`v[:, idx]` picks lanes as torch's advanced indexing does, negative indices from the end."""
    x = _inputs((5, 7), dtype)
    index = torch.tensor([6, -1, 0, 3, 3, -7, 2])
    expected = x[:, index] + x * 10 + x[:, [-1] * 7] * 100
    for mode in MODES:
        got = tessera.kernel(indexed_by_tensors, mode=mode, config=CONFIG)(torch.empty_like(x), x, index)
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=mode)


def tile_dim_indexed_by_a_tensor(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :][torch.arange(2), :]  # line: tile-tensor-index
    return out


def test_a_tile_dim_indexed_by_a_tensor_is_refused_alike_in_every_mode() -> None:
    for mode in MODES:
        with pytest.raises(exc.UnsupportedOperationError, match="which is a tile") as info:
            tessera.kernel(tile_dim_indexed_by_a_tensor, mode=mode, config=CONFIG)(torch.empty(8, 3), torch.randn(8, 3))
        assert info.value.location.lineno == marked_line(__file__, "tile-tensor-index")[0], mode


def first_two_picked(x: T) -> T:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :2] = x[tile, :].index_select(1, torch.tensor([2, 0]))
    return out


def test_a_constant_index_made_in_the_loop_lives_on_the_kernels_device(device: torch.device) -> None:
    # eager mode on a GPU made `torch.tensor([2, 0])` on the CPU beside CUDA tile values: a raw
    # device error where generated code computed (found by the H100 suite)
    x = torch.randn(5, 3, device=device)
    expected = torch.zeros_like(x)
    expected[:, :2] = x[:, [2, 0]]
    for mode in ("eager", "compiled" if device.type == "cuda" else "interpret"):
        torch.testing.assert_close(tessera.kernel(first_two_picked, mode=mode)(x), expected, msg=mode)
