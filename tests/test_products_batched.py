"""Batched 3-D products (`torch.bmm`, `baddbmm`, their methods, `@`), attention against
`scaled_dot_product_attention`, and every call form torch's products accept, generated and eager
against PyTorch (test_products.py has the 2-D forms)."""
from __future__ import annotations

import re
from typing import Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from product_checks import _DTYPE_IDS, _DTYPES, _TOL, _at, _dot, _dot_acc, _matmul, _mode, _operands, _randn, _run


# Batched 3-D products.

def bmm_k_loop(a: torch.Tensor, b: torch.Tensor,
               product: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.empty([batch, m, n], dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = product(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc.to(out.dtype)
    return out


def _bmm(acc, a, b):
    return acc + torch.bmm(a, b)


def _tensor_bmm(acc, a, b):
    return acc + a.bmm(b)


def _baddbmm(acc, a, b):
    return torch.baddbmm(acc, a, b)


def _tensor_baddbmm(acc, a, b):
    return acc.baddbmm(a, b)


_FORMS_3D = [_bmm, _tensor_bmm, _matmul, _at, _baddbmm, _tensor_baddbmm, _dot, _dot_acc]


def _reference_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(torch.promote_types(a.dtype, b.dtype))


@pytest.mark.parametrize("blocks", [[1, 16, 16, 16], [2, 16, 16, 16], [2, 8, 4, 4]],
                         ids=["b1-dot-blocks", "b2-dot-blocks", "b2-small-blocks"])
@pytest.mark.parametrize("product", _FORMS_3D, ids=lambda f: f.__name__.lstrip("_"))
def test_3d_product_forms_in_a_k_loop(product: Callable, blocks: list[int], device: torch.device) -> None:
    a = _randn(3, 21, 19, dtype=torch.float32, device=device)
    b = _randn(3, 19, 13, dtype=torch.float32, device=device, scale=19 ** -0.5)
    _run(bmm_k_loop, (a, b, product), _reference_bmm(a, b), _TOL[torch.float32], device, blocks,
         product.__name__)


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize(("batch", "m", "k", "n"), [(1, 1, 1, 1), (3, 1, 20, 17), (2, 17, 1, 1)],
                         ids=lambda v: str(v))
def test_3d_products_in_each_dtype_and_size_one_dims(batch: int, m: int, k: int, n: int, dtype: torch.dtype,
                                                     device: torch.device) -> None:
    a = _randn(batch, m, k, dtype=dtype, device=device)
    b = _randn(batch, k, n, dtype=dtype, device=device, scale=max(k, 1) ** -0.5)
    _run(bmm_k_loop, (a, b, _baddbmm), _reference_bmm(a, b), _TOL[dtype], device, [1, 16, 16, 16])


def test_3d_mixed_input_dtypes(device: torch.device) -> None:
    a = _randn(2, 21, 19, dtype=torch.float16, device=device)
    b = _randn(2, 19, 13, dtype=torch.float32, device=device, scale=19 ** -0.5)
    for product in (_bmm, _baddbmm, _dot_acc):
        result = _run(bmm_k_loop, (a, b, product), _reference_bmm(a, b), _TOL[torch.float32], device,
                      [1, 16, 16, 16], product.__name__)
        assert result.dtype == torch.float32


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """`q @ k.transpose(1, 2)` per batch, the key tile transposed in the kernel."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        out[tile_b, tile_m, tile_n] = torch.bmm(q[tile_b, tile_m, :], k[tile_b, tile_n, :].transpose(1, 2)).float()
    return out


def scores_dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same with `hl.dot`, a K loop over the head dimension and `permute` for the transpose."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_d in hl.tile(d):
            acc = hl.dot(q[tile_b, tile_m, tile_d], k[tile_b, tile_n, tile_d].permute(0, 2, 1), acc=acc)
        out[tile_b, tile_m, tile_n] = acc
    return out


def scores_matmul_operator(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same with `@` and `.mT` on whole-head tiles."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=q.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        out[tile_b, tile_m, tile_n] = (q[tile_b, tile_m, :] @ k[tile_b, tile_n, :].mT).float()
    return out


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("blocks", [[16, 16, 16], [8, 4, 4]], ids=["dot-blocks", "small-blocks"])
def test_3d_transposed_key_tiles(dtype: torch.dtype, blocks: list[int], device: torch.device) -> None:
    q = _randn(2, 21, 16, dtype=dtype, device=device)
    k = _randn(2, 13, 16, dtype=dtype, device=device, scale=0.25)
    expected = (q.float() @ k.float().transpose(1, 2)).to(dtype).float()
    _run(scores, (q, k), expected, _TOL[dtype], device, blocks[:2])
    _run(scores_matmul_operator, (q, k), expected, _TOL[dtype], device, blocks[:2])
    _run(scores_dot, (q, k), (q.float() @ k.float().transpose(1, 2)), _TOL[dtype], device, blocks)


# --------------------------------------------------------------------------------------------
# Attention against scaled_dot_product_attention.

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_attention_matches_sdpa(head_dim: int, causal: bool, device: torch.device) -> None:
    from examples.attention import attention

    q, k, v = (_randn(1, 2, 37, head_dim, dtype=torch.float32, device=device) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    _run(attention.fn, (q, k, v, causal), expected, (2e-4, 2e-4), device, [16, 16],
         f"attention d={head_dim} causal={causal}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_attention_low_precision_with_more_keys_than_queries(dtype: torch.dtype, device: torch.device) -> None:
    from examples.attention import attention

    q = _randn(1, 2, 21, 64, dtype=dtype, device=device)
    k, v = (_randn(1, 2, 37, 64, dtype=dtype, device=device) for _ in range(2))
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(dtype)
    _run(attention.fn, (q, k, v, False), expected, _TOL[dtype], device, [16, 16], "attention")


# Issue 15: every call form torch's products accept (positional out_dtype, keyword operands,
# beta/alpha), in eager and generated code alike.

def product_call_forms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, m, d = q.shape
    d = hl.specialize(d)
    out = torch.empty([b, m, d], dtype=torch.float32, device=q.device)
    for tile_b, tile_m in hl.tile([b, m]):
        acc = hl.zeros([tile_b, tile_m, d], dtype=torch.float32)
        for tile_n in hl.tile(k.size(1)):
            scores = torch.bmm(q[tile_b, tile_m, :], k[tile_b, tile_n, :].transpose(1, 2), torch.float32)
            again = torch.bmm(input=q[tile_b, tile_m, :], mat2=k[tile_b, tile_n, :].transpose(1, 2),
                              out_dtype=torch.float32)
            probabilities = ((scores + again) * 0.25).to(v.dtype)
            acc = torch.baddbmm(acc, probabilities, v[tile_b, tile_n, :], torch.float32, beta=0.5, alpha=2.0)
        out[tile_b, tile_m, :] = acc
    return out


def _reference_call_forms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_n: int) -> torch.Tensor:
    acc = torch.zeros(q.shape[0], q.shape[1], v.shape[2])
    for begin in range(0, k.shape[1], block_n):
        scores = q.float() @ k[:, begin:begin + block_n].float().transpose(1, 2)
        probabilities = (scores * 0.5).to(v.dtype).float()
        acc = 0.5 * acc + 2.0 * (probabilities @ v[:, begin:begin + block_n].float())
    return acc


@pytest.mark.parametrize(("batch", "m", "n", "blocks"), [(1, 1, 1, [1, 16, 16]), (2, 5, 7, [1, 4, 4]),
                                                        (3, 17, 20, [2, 16, 16])])
def test_positional_out_dtype_keyword_operands_and_scaled_baddbmm(batch: int, m: int, n: int, blocks: list[int],
                                                                  device: torch.device) -> None:
    q = _randn(batch, m, 16, dtype=torch.float16, device=device, scale=0.5)
    k = _randn(batch, n, 16, dtype=torch.float16, device=device, scale=0.5)
    v = _randn(batch, n, 16, dtype=torch.float16, device=device)
    expected = _reference_call_forms(q.cpu(), k.cpu(), v.cpu(), blocks[2]).to(device)
    _run(product_call_forms, (q, k, v), expected, (1e-2, 1e-2), device, blocks)


def addmm_keywords(x: torch.Tensor, y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    m, n = c.size()
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        product = torch.addmm(c[tile_m, tile_n], mat1=x[tile_m, :], mat2=y[:, tile_n], beta=0, alpha=3)
        out[tile_m, tile_n] = product + torch.addmm(input=c[tile_m, tile_n], mat1=x[tile_m, :], mat2=y[:, tile_n])
    return out


@pytest.mark.parametrize(("m", "n"), [(1, 1), (13, 9)])
def test_addmm_by_keyword_with_beta_zero_ignores_the_input(m: int, n: int, device: torch.device) -> None:
    x, y = _operands(m, 16, n, torch.float32, device)
    c = torch.randn(m, n, device=device)
    expected = 3 * (x @ y) + (c + x @ y)
    _run(addmm_keywords, (x, y, c), expected, _TOL[torch.float32], device, [16, 16])


def mm_into_out(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m in hl.tile(x.size(0)):
        torch.mm(x[tile_m, :], y, out=out[tile_m, :])  # line: mm-out
    return out


def test_a_product_into_out_inside_a_tile_loop_is_refused_with_its_line(device: torch.device) -> None:
    from marked_lines import marked_line
    x, y = _operands(4, 8, 4, torch.float32, device)
    for mode in ("eager", _mode(device)):
        with pytest.raises(tessera.exc.UnsupportedOperationError, match="out=") as caught:
            tessera.kernel(mm_into_out, mode=mode)(x, y)
        assert caught.value.location.lineno == marked_line(__file__, "mm-out")[0]


def diagonal_block_product(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(v)
    for tile_m, tile_n in hl.tile(v.size()):
        out[tile_m, tile_n] = hl.dot(s[tile_m, tile_m], v[tile_m, tile_n])
    return out


def test_a_product_over_one_tile_used_twice_is_a_located_refusal() -> None:
    s, v = torch.randn(32, 32), torch.randn(32, 16)
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="same tile") as info:
        tessera.kernel(diagonal_block_product, mode="interpret", config=tessera.Config(block_sizes=[16, 16]))(s, v)
    assert "hl.dot(s[tile_m, tile_m], v[tile_m, tile_n])" in str(info.value)


@pytest.mark.parametrize("m, n, k, blocks, operands", [
    (1, 4096, 4096, [16, 64, 128], "bf16"),        # fewer 128 x 128 tiles than SMs: narrow, deep K
    (128, 4096, 14336, [64, 64, 128], "bf16"),
    (4096, 4096, 4096, [128, 256, 64], "bf16"),    # a wave of 128 x 256 tiles: wide N
    (1024, 4096, 4096, [128, 256, 64], "bf16"),    # 128 x 256 tiles: 128 programs, 97% of a wave
    (512, 4096, 4096, [128, 128, 64], "bf16"),     # 128 x 256 tiles would be half a wave; 4 rows of M blocks
    (128, 14336, 4096, [128, 64, 64], "bf16"),     # one row of M blocks over half a wave: 64-wide N
    (1, 28672, 4096, [16, 128, 64], "bf16"),
    # 8-bit operands take 128-deep K steps whatever the tiles (fp8 M128 N11008 K4096 with 64-deep
    # steps: 0.56x torch._scaled_mm)
    (128, 11008, 4096, [128, 64, 128], "fp8"),
    (4096, 4096, 4096, [128, 256, 128], "fp8"),
    (16, 4096, 4096, [16, 64, 128], "fp8"),
    (128, 4096, 11008, [64, 64, 256], "fp8"),     # 64 x 64 tiles: 256-deep
])
def test_heuristic_gemm_blocks_follow_the_grid(m: int, n: int, k: int, blocks: list[int], operands: str) -> None:
    # Planned on the CPU for the H100 (132 SMs); measured effect in benchmarks/results/issue17/gemm_sweep*.
    from benchmarks.gemm_sweep import fp8_kernel
    from examples.matmul import matmul
    from tessera.runtime.tuning import heuristic_for

    dtype = torch.float8_e4m3fn if operands == "fp8" else torch.bfloat16
    x, y = torch.empty(m, k, dtype=dtype), torch.empty(k, n, dtype=dtype)
    kernel, args = (fp8_kernel(), (x, y, torch.ones(m, 1), torch.ones(1, n))) if operands == "fp8" else (matmul, (x, y))
    config = heuristic_for(tessera.kernel(kernel.fn, mode="interpret").bind(*args))
    assert config["block_sizes"] == blocks


def test_heuristic_runs_batch_dims_slowest() -> None:
    # bmm's batch dim (block 1) varies slowest, so programs running together share one matrix's
    # operands in L2 (H100: B32 1024^3 0.64x -> 0.84x torch.bmm).
    from examples.bmm import bmm
    from tessera.runtime.tuning import heuristic_for

    a = torch.empty(32, 1024, 1024, dtype=torch.bfloat16)
    config = heuristic_for(tessera.kernel(bmm.fn, mode="interpret").bind(a, a))
    assert config["loop_orders"] == [[1, 2, 0]]
    # its two tiled dims are grouped (attention's one tiled dim and batch index are not)
    assert config["l2_grouping"] == 8


@pytest.mark.parametrize("batch, m, n, k", [(1, 1, 1, 1), (3, 17, 33, 20), (2, 64, 48, 96)])
def test_bmm_with_batch_slowest_matches_torch(device: torch.device, batch: int, m: int, n: int, k: int) -> None:
    from examples.bmm import bmm

    a = torch.randn(batch, m, k, device=device)
    b = torch.randn(batch, k, n, device=device)
    kernel = tessera.kernel(bmm.fn, dot_precision="ieee")  # the GPU's default tf32 rounds apart from torch's fp32
    torch.testing.assert_close(kernel(a, b), torch.bmm(a, b), rtol=1e-4, atol=1e-4)


@tessera.kernel
def _bmm_acc_read_in_loop(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bmm whose K loop also reads the carried accumulator (a running max): it stays 3-D."""
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    peak = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        top = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            top = torch.maximum(top, acc)
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = acc
        peak[tile_b, tile_m, tile_n] = top
    return out, peak


@tessera.kernel
def _bmm_of_batch_window(a: torch.Tensor, b: torch.Tensor, first: int) -> torch.Tensor:
    """bmm of matrices first.. of a and b (batch tiles of one matrix from an offset): the batch
    index is a scalar of the 2-D operand loads."""
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.zeros([batch, m, n], dtype=a.dtype, device=a.device)
    for tile_b, tile_m, tile_n in hl.tile([first, 0, 0], [batch, m, n], block_size=[1, None, None]):
        acc = hl.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.baddbmm(acc, a[tile_b, tile_m, tile_k], b[tile_b, tile_k, tile_n])
        out[tile_b, tile_m, tile_n] = (acc * 2.0).to(out.dtype)
    return out


@pytest.mark.parametrize("batch, m, n, k", [(1, 1, 1, 1), (3, 17, 33, 40), (2, 32, 16, 48)])
def test_bmm_whose_loop_reads_its_accumulator(device: torch.device, batch: int, m: int, n: int, k: int) -> None:
    a = _randn(batch, m, k, dtype=torch.float32, device=device)
    b = _randn(batch, k, n, dtype=torch.float32, device=device, scale=k ** -0.5)
    out, peak = tessera.kernel(_bmm_acc_read_in_loop.fn, config=tessera.Config(block_sizes=[16, 16, 16]),
                               mode=_mode(device), dot_precision="ieee")(a, b)
    torch.testing.assert_close(out, torch.bmm(a, b), rtol=1e-4, atol=1e-4)
    partial = [torch.bmm(a[:, :, :start], b[:, :start, :]) for start in range(0, k, 16)]
    expected_peak = torch.stack([torch.zeros_like(out)] + partial).amax(0)
    torch.testing.assert_close(peak, expected_peak, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("blocks", [[16, 16, 16], [32, 16, 32]])
def test_bmm_of_a_batch_window(device: torch.device, dtype: torch.dtype, blocks: list[int]) -> None:
    a = _randn(5, 19, 37, dtype=dtype, device=device)
    b = _randn(5, 37, 21, dtype=dtype, device=device, scale=37 ** -0.5)
    expected = torch.zeros(5, 19, 21, dtype=torch.float32, device=device)
    expected[2:] = torch.bmm(a[2:].float(), b[2:].float()) * 2.0
    _run(_bmm_of_batch_window.fn, (a, b, 2), expected.to(dtype), _TOL[dtype], device, block_sizes=blocks)


def test_bmm_loads_and_accumulates_in_2d() -> None:
    # One matrix per program: the operand tiles load as 2-D blocks and the K loop carries a 2-D
    # accumulator, so the product is the loads' own (no reshape between them for Triton to fold).
    from examples.bmm import bmm

    a, b = torch.empty(4, 256, 128, dtype=torch.bfloat16), torch.empty(4, 128, 96, dtype=torch.bfloat16)
    source = tessera.kernel(bmm.fn, mode="interpret").bind(a, b).to_triton_code(
        tessera.Config(block_sizes=[64, 64, 32]))
    loop = source[source.index("for k1_0"):source.index("tl.store")]
    carried = re.search(r"(\w+) = tl\.dot\(.*acc=(\w+)", loop)
    assert carried is not None and f"{carried.group(2)} = {carried.group(1)}" in loop
    assert "[:, None, None]" not in loop and "tl.reshape(tl.load" not in loop  # 2-D pointer blocks, loaded as such


def test_bmm_compiles_to_one_warpgroup_product_per_k_step() -> None:
    # H100 (sm_90), compiled on the CPU: with 3-D operand loads Triton 3.6 copied bmm's first
    # operand from shared memory into registers and split each K step into four wgmma of K=16
    # (bmm B32 1024^3 at 0.86x torch.bmm, matmul 4096^3 at 0.97x); with TMA descriptors its
    # pipeliner failed ("operand #0 does not dominate this use").
    from examples.bmm import bmm
    from sm90_compile import sm90_ttgir

    a = torch.empty(8, 2048, 2048, dtype=torch.bfloat16)
    config = tessera.Config(block_sizes=[128, 256, 64], num_warps=8, num_stages=3, l2_grouping=8,
                            loop_orders=[[1, 2, 0]])
    for indexing in ("pointer", "tensor_descriptor"):
        (ttgir,) = sm90_ttgir(tessera.kernel(bmm.fn, mode="interpret"), (a, a), config.merged(indexing=indexing))
        assert ttgir.count("ttng.warp_group_dot ") == 1, indexing
        assert "tt.split" not in ttgir and "ttg.local_load" not in ttgir, indexing


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_addmm_of_float8_operands_into_a_float32_accumulator_is_a_located_refusal(mode: str) -> None:
    # torch.promote_types(float32, float8) raises: it surfaced as a raw RuntimeError from inside the trace
    from examples.matmul import matmul

    x = torch.randn(32, 32).to(torch.float8_e4m3fn)
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="no common dtype") as info:
        tessera.kernel(matmul.fn, mode=mode)(x, x)
    assert "matmul.py" in str(info.value) and "hl.dot" in str(info.value)


def int8_product(x, y, acc_dtype):
    out = torch.empty([x.size(0), y.size(1)], dtype=acc_dtype, device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n], dtype=acc_dtype)
        for tile_k in hl.tile(x.size(1)):
            acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("acc_dtype", [torch.float16, torch.float32])
def test_int8_dot_into_a_float_accumulator_is_refused(mode, acc_dtype):
    x = torch.randint(-10, 10, (20, 33), dtype=torch.int8)
    kernel = tessera.kernel(int8_product, mode=mode)
    with pytest.raises(exc.AccumulatorDtypeError, match="int8 operands into a torch.float") as info:
        kernel(x, x.t().contiguous(), acc_dtype)
    assert isinstance(info.value, TypeError) and "hl.dot(" in info.value.location.render()


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (20, 33, 17)])
def test_int8_dot_into_an_int32_accumulator(mode, shape):
    m, k, n = shape
    x, y = torch.randint(-10, 10, (m, k), dtype=torch.int8), torch.randint(-10, 10, (k, n), dtype=torch.int8)
    result = tessera.kernel(int8_product, mode=mode)(x, y, torch.int32)
    torch.testing.assert_close(result, (x.int() @ y.int()), atol=0, rtol=0)


def _batch_one_right(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(0), x.size(1), w.size(1))
    for tile in hl.tile(x.size(0)):
        out[tile, :, :] = x[tile, :, :] @ w[None, :, :]
    return out


def _batch_one_left(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(0), w.size(0), x.size(2))
    for tile in hl.tile(x.size(0)):
        out[tile, :, :] = torch.matmul(w[None, :, :], x[tile, :, :])
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("sizes", [(3, 4, 8, 5), (5, 32, 32, 16), (1, 1, 1, 1)])
def test_a_batch_of_one_meets_a_tiled_batch(mode: str, sizes: tuple[int, int, int, int]) -> None:
    # the batch-1 operand is broadcast before tl.dot (which does not broadcast): was a "Tessera bug" error
    batch, m, k, n = sizes
    x, w = torch.randn(batch, m, k), torch.randn(k, n)
    config = tessera.Config(block_sizes=[4])
    torch.testing.assert_close(tessera.kernel(_batch_one_right, mode=mode, config=config)(x, w), x @ w,
                               rtol=1e-4, atol=1e-4)
    y = torch.randn(batch, k, n)
    left = torch.randn(m, k)
    torch.testing.assert_close(tessera.kernel(_batch_one_left, mode=mode, config=config)(left, y), left @ y,
                               rtol=1e-4, atol=1e-4)


def fp8_product(x, y):
    out = torch.empty([x.size(0), y.size(1)], dtype=torch.float16, device=x.device)
    for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(x.size(1)):
            acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc.to(torch.float16)
    return out


@pytest.mark.parametrize("block_k, fast, interval", [(128, False, 128), (64, False, 64), (256, False, 128),
                                                     (128, True, 1073741824)])
def test_float8_products_add_each_step_into_float32_on_hopper(block_k: int, fast: bool, interval: int) -> None:
    # Triton's sm_90 default adds a whole fp8 K in the tensor cores' reduced-precision accumulator
    # (torch._scaled_mm's use_fast_accum=True): Helion's fp8_gemm at 1024^3 fell outside its
    # tolerance on the H100. Compiled for sm_90 on the CPU: wgmma, each 128-deep sum (or the K
    # block) promoted to float32, unless the kernel asks for fp8_fast_accum (Triton's default).
    from sm90_compile import sm90_ttgir

    x = torch.randn(256, 256).to(torch.float8_e4m3fn)
    y = torch.randn(256, 256).to(torch.float8_e4m3fn).T.contiguous().T
    config = tessera.Config(block_sizes=[64, 64, block_k], num_warps=4, num_stages=3)
    kernel = tessera.kernel(fp8_product, mode="interpret", fp8_fast_accum=fast)
    (ttgir,) = sm90_ttgir(kernel, (x, y), config)
    dots = re.findall(r"ttng.warp_group_dot .*", ttgir)
    assert dots and all(f"maxNumImpreciseAcc = {interval} " in dot for dot in dots), dots


@pytest.mark.parametrize("size", [32, 96, 160])
def test_float8_product_matches_a_float32_product(size: int, device: torch.device) -> None:
    x = (torch.randn(size, size) * 2).to(torch.float8_e4m3fn).to(device)
    y = torch.randn(size, size).to(torch.float8_e4m3fn).to(device)
    for mode in ("eager", "interpret") if device.type == "cpu" else ("eager", "compiled"):
        result = tessera.kernel(fp8_product, mode=mode)(x, y)
        # compiled: Hopper's fp8 products add up to 128 terms in reduced precision before each
        # float32 promotion (cuBLAS's precise mode does the same)
        tolerance = 2e-3 if mode != "compiled" else 3e-2
        torch.testing.assert_close(result.float(), (x.float() @ y.float()).half().float(), rtol=tolerance, atol=tolerance)
