"""Split-K matmul (`examples/split_k_matmul.py`), gathered and narrow products, generated and
eager against PyTorch."""
from __future__ import annotations


import pytest
import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close
from tessera import settings
from product_checks import _DTYPE_IDS, _DTYPES, _TOL, _mode, _randn, _run


# Split-K matmul (examples/split_k_matmul.py): the atomics add every split's partial product.



def _check_split_k(m: int, k: int, n: int, splits: int, dtype: torch.dtype, device: torch.device,
                   monkeypatch: pytest.MonkeyPatch, block_sizes: list[int] | None) -> None:
    from examples import split_k_matmul as module

    if block_sizes is not None:  # the host wrapper looks the kernel up in its module
        configured = tessera.kernel(module.split_k_matmul_kernel.fn, config=tessera.Config(block_sizes=block_sizes),
                                    dot_precision="ieee")
        monkeypatch.setattr(module, "split_k_matmul_kernel", configured)
    x, y, splits = module.EXAMPLE.inputs(str(device), dtype, m=m, k=k, n=n, splits=splits)
    expected = module.reference(x, y, splits)
    with settings.override(mode="eager"):
        eager = module.split_k_matmul(x, y, splits)
    with settings.override(mode=_mode(device)):
        generated = module.split_k_matmul(x, y, splits)
    tolerance = module.EXAMPLE.tolerances[dtype] if block_sizes is None else _TOL[dtype]
    assert_close(eager, expected, tolerance, "split_k_matmul (eager vs PyTorch)")
    assert_close(generated, expected, tolerance, f"split_k_matmul ({_mode(device)} vs PyTorch)")
    assert_close(generated, eager, tolerance, f"split_k_matmul ({_mode(device)} vs eager)")


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("blocks", [[16, 16, 16], [8, 4, 4]], ids=["dot-blocks", "small-blocks"])
@pytest.mark.parametrize(("m", "k", "n", "splits"), [(1, 1, 1, 1), (21, 70, 13, 3), (5, 100, 9, 8)],
                         ids=lambda v: str(v))
def test_split_k_matmul(m: int, k: int, n: int, splits: int, blocks: list[int], dtype: torch.dtype,
                        device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_split_k(m, k, n, splits, dtype, device, monkeypatch, blocks)


def test_split_k_splits_the_k_loop_across_programs(device: torch.device) -> None:
    from examples.split_k_matmul import split_k_matmul_kernel, split_length

    assert [split_length(k, splits) for k, splits in [(1, 1), (70, 3), (100, 8), (1024, 4)]] == [16, 32, 16, 256]
    x, y = torch.randn(8, 64, device=device), torch.randn(64, 8, device=device)
    config = tessera.Config(block_sizes=[16, 16, 16])
    bound = tessera.kernel(split_k_matmul_kernel.fn, config=config, mode=_mode(device)).bind(
        x, y, torch.zeros(8, 8, device=device), 16)
    code = bound.to_triton_code(config)
    assert "tl.atomic_add(out" in code and "offset_2 + 16" in code


def test_split_k_matmul_with_its_heuristic_config(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_split_k(21, 70, 13, 3, torch.float32, device, monkeypatch, None)


@pytest.mark.parametrize("static_shapes", [True, False], ids=["static", "specialized"])
def test_a_square_weight_read_whole_keeps_its_two_dims_apart(device: torch.device, static_shapes: bool) -> None:
    # two whole dims of equal size are two axes: sharing one (keyed by size) read w's diagonal
    # pattern under static shapes (Helion's se_block: most of the output wrong, silently)
    def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        n = hl.specialize(w.size(1))
        hl.specialize(w.size(0))
        out = torch.empty([x.size(0), n], dtype=torch.float32, device=x.device)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = x[tile, :] @ w[:, :]
        return out
    x, w = torch.randn(37, 32, device=device), torch.randn(32, 32, device=device)
    for mode in ("eager", None):
        kernel = tessera.kernel(project, static_shapes=static_shapes, mode=mode)
        torch.testing.assert_close(kernel(x, w), x @ w, rtol=1e-2, atol=1e-2)


@tessera.kernel(static_shapes=True, dot_precision="ieee")  # tf32 on the GPU would need a loose tolerance
def gated_by_own_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Helion's se_block: the row is a product's operand and then multiplies its result, so the
    product's reduced dim and output dim (both `:` of equal size) are combined elementwise."""
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        row = x[tile_m, :]
        out[tile_m, :] = (2.0 * row * torch.sigmoid(row @ w[:, :])).to(x.dtype)
    return out


@pytest.mark.parametrize("m, n", [(1, 16), (13, 16), (40, 20)])
def test_a_product_whose_row_also_multiplies_its_result_keeps_its_dims_apart(m: int, n: int,
                                                                              device: torch.device) -> None:
    x, w = torch.randn(m, n, device=device), torch.randn(n, n, device=device)
    expected = 2.0 * x * torch.sigmoid(x @ w)
    modes = ["eager", "compiled" if device.type == "cuda" else "interpret"]
    for mode in modes:
        gated_by_own_product.reset()
        with settings.override(mode=mode):
            torch.testing.assert_close(gated_by_own_product(x, w), expected, rtol=1e-3, atol=1e-3, msg=mode)


# -- a causal block product whose inner loop ends at the row tile's end (mamba2_chunk_scan's shape) --
def causal_block_product(scores: torch.Tensor, values: torch.Tensor, scale: torch.Tensor, start: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    m, n = scores.size(0), values.size(1)
    out = torch.empty(m, n, dtype=values.dtype, device=values.device)
    block_m = hl.register_block_size(m)
    block_k = hl.register_block_size(16, 16)
    for tile_m, tile_n in hl.tile([m, n], block_size=[block_m, None]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc = hl.dot(start[tile_m, :], state[tile_n, :].T, acc=acc)  # the carried-in state, whole dims
        for tile_k in hl.tile(min((tile_m.id + 1) * block_m, m), block_size=block_k):
            weights = scores[tile_m, tile_k] * torch.exp(scale[tile_m][:, None] - scale[tile_k][None, :])
            keep = tile_m.index[:, None] >= tile_k.index[None, :]
            weights = torch.where(keep, weights, torch.zeros_like(weights))
            acc = hl.dot(weights.to(values.dtype), values[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("m, n, blocks", [(40, 24, [32, 16, 16]), (37, 5, [16, 16, 8]), (1, 1, [16, 16, 1]),
                                          (64, 33, [64, 16, 32]), (50, 16, [8, 16, 16])], ids=str)
def test_a_causal_inner_loop_to_the_row_tiles_end(m: int, n: int, blocks: list[int], mode: str) -> None:
    scores, values, scale = torch.randn(m, m), torch.randn(m, n), torch.rand(m)
    start, state = torch.randn(m, 16), torch.randn(n, 16)
    out = tessera.kernel(causal_block_product, mode=mode, config=tessera.Config(block_sizes=blocks))(
        scores, values, scale, start, state)
    weights = torch.tril(scores * torch.exp(scale[:, None] - scale[None, :]))
    torch.testing.assert_close(out, start @ state.T + weights @ values, rtol=1e-4, atol=1e-4)


def gemv_gathered(w: torch.Tensor, rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Helion's gather_gemv shape: a product whose N (and the accumulator's) is a whole dim of 1."""
    out = torch.empty([rows.size(0), 1], dtype=torch.float32, device=w.device)
    for tile in hl.tile(rows.size(0)):
        acc = hl.zeros([tile, 1], dtype=torch.float32)
        picked = rows[tile]
        for tile_k in hl.tile(w.size(1)):
            acc += hl.dot(w[picked, tile_k], x[tile_k, :])
        out[tile, :] = acc
    return out


def batched_narrow(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty([a.size(0), a.size(1), b.size(2)], dtype=torch.float32, device=a.device)
    for tile_b in hl.tile(a.size(0)):
        out[tile_b, :, :] = torch.bmm(a[tile_b, :, :], b[tile_b, :, :]).to(torch.float32)
    return out


def test_a_gathered_gemv_with_a_whole_dim_of_one(device: torch.device) -> None:
    """N = 1 (and the accumulator's literal 1) padded to tl.dot's 16 and cut off again."""
    w = _randn(37, 50, dtype=torch.float16, device=device)
    rows = torch.tensor([3, 0, 36, 5, 5], device=device)
    x = _randn(50, 1, dtype=torch.float16, device=device, scale=0.2)
    _run(gemv_gathered, (w, rows, x), w[rows].float() @ x.float(), _TOL[torch.float16], device, [16, 16])


@pytest.mark.parametrize(("m", "k", "n"), [(1, 7, 3), (3, 1, 8), (8, 3, 1), (5, 16, 2)])
def test_narrow_whole_dims_are_padded_to_the_products_minimum(m: int, k: int, n: int, device: torch.device) -> None:
    """Whole dims below tl.dot's 16 (M, N or K of a batched product) are padded with zeros to 16
    and the padding cut off the result, in every mode (compiled mode refused them before)."""
    a = _randn(5, m, k, dtype=torch.float32, device=device)
    b = _randn(5, k, n, dtype=torch.float32, device=device, scale=0.5)
    _run(batched_narrow, (a, b), torch.bmm(a, b), _TOL[torch.float32], device, [1])
    _run(batched_narrow, (a, b), torch.bmm(a, b), _TOL[torch.float32], device, [2])


# --------------------------------------------------------------------------------------------
