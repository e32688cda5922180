"""The Pallas backend (backend='pallas'), run by Pallas's interpreter on CPU, against PyTorch and eager.

Kernels come from examples/ (re-wrapped with backend='pallas') or are written here; shapes have
tails of the block and size 1. The pre-broadcast pass is checked on the printed IR (seed 002's
widening at head_dim 256 and 512) and end to end at head_dim 64, 128 and 256.
"""
from __future__ import annotations

import sys

import pytest
import torch

pytest.importorskip("jax")

import tessera  # noqa: E402
import tessera.language as hl  # noqa: E402
from examples import attention as attention_example  # noqa: E402
from examples import grouped_gemm as grouped_gemm_example  # noqa: E402
from examples import layer_norm, rms_norm, softmax  # noqa: E402
from examples.add import add  # noqa: E402
from examples.embedding import embedding  # noqa: E402
from examples.matmul import matmul  # noqa: E402
from tessera import exc, settings  # noqa: E402
from tessera.runtime.kernel_settings import Settings  # noqa: E402
from tessera.backends.pallas.prebroadcast import pre_broadcast  # noqa: E402
from tessera.backends.pallas.tpu_export import export_for_tpu, recorded_launches  # noqa: E402


def on_pallas(kernel: tessera.Kernel, **changes) -> tessera.Kernel:
    """The same kernel function with backend='pallas' (and other settings changed)."""
    return tessera.Kernel(kernel.fn, Settings(**{**kernel.settings.to_dict(), "backend": "pallas", **changes}))


def eager(kernel: tessera.Kernel, *args):
    with settings.override(mode="eager"):
        return kernel(*args)


def run_lowering_for_tpu(kernel: tessera.Kernel, *args):
    """`kernel(*args)` in Pallas's interpreter, and every launch it made lowered for TPU with
    `jax.export(..., platforms=["tpu"])` (Pallas's Mosaic lowering, on this CPU host)."""
    with recorded_launches() as launches:
        result = kernel(*args)
    assert launches
    for launch in launches:
        exported = export_for_tpu(launch)
        assert exported.platforms == ("tpu",) and "tpu_custom_call" in exported.mlir_module()
    return result


def check(kernel: tessera.Kernel, args: tuple, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5,
          tpu: bool = True) -> None:
    """Pallas against `expected` and eager; with `tpu`, each launch also lowers for TPU."""
    pallas = on_pallas(kernel)
    got = run_lowering_for_tpu(pallas, *args) if tpu else pallas(*args)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    torch.testing.assert_close(got, eager(kernel, *args), atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (33, 3)])
def test_add_with_broadcasting(shape: tuple[int, int]) -> None:
    x, y = torch.randn(shape), torch.randn(shape[-1])
    check(add, (x, y), x + y)


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (3, 130)])
def test_softmax(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    check(softmax.softmax, (x,), torch.softmax(x, -1))


@pytest.mark.parametrize("shape", [(1, 1), (7, 13)])
def test_rms_norm(shape: tuple[int, int]) -> None:
    x, w = torch.randn(shape), torch.randn(shape[-1])
    check(rms_norm.rms_norm, (x, w), rms_norm.reference(x, w))


@pytest.mark.parametrize("shape", [(1, 1), (9, 37)])
def test_layer_norm_forward(shape: tuple[int, int]) -> None:
    x, w, b = torch.randn(shape), torch.randn(shape[-1]), torch.randn(shape[-1])
    check(layer_norm.layer_norm_fwd, (x, w, b), layer_norm.reference_fwd(x, w, b), atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (33, 40, 17)])
def test_matmul_with_tails(mkn: tuple[int, int, int], dtype: torch.dtype) -> None:
    m, k, n = mkn
    x, y = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    expected = (x.float() @ y.float()).to(dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    check(matmul, (x, y), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("causal", [False, True], ids=["non_causal", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_attention_forward(head_dim: int, causal: bool) -> None:
    q, k, v = (torch.randn(1, 2, length, head_dim) for length in (17, 33, 33))
    kernel = attention_example.attention
    expected = attention_example.reference(q, k, v, causal)
    check(kernel, (q, k, v, causal), expected, atol=1e-4, rtol=1e-4)


@tessera.kernel(static_shapes=True)
def outer_chain_scale(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Seed 002's reviewer kernel: a per-row running sum used inside the loop and, indirectly, after it."""
    batch, m, k = a.size()
    head_dim = hl.specialize(b.size(-1))
    out = torch.empty([batch, m, head_dim], device=a.device, dtype=a.dtype)
    for tile_b, tile_m in hl.tile([batch, m]):
        running = hl.zeros([tile_b, tile_m], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        for tile_k in hl.tile(k):
            chunk = a[tile_b, tile_m, tile_k]
            running = running + torch.sum(chunk, -1)
            acc = acc + running[:, :, None]
        scale = torch.rsqrt(running[:, :, None] + 1.0)
        out[tile_b, tile_m, :] = (acc * scale).to(out.dtype)
    return out


_SEED_CONFIG = tessera.Config(block_sizes=[1, 8, 16])


def outer_chain_reference(a: torch.Tensor, head_dim: int, block_k: int = 16) -> torch.Tensor:
    running = torch.zeros(a.shape[:2])
    acc = torch.zeros(*a.shape[:2], head_dim)
    for begin in range(0, a.size(2), block_k):
        running = running + a[:, :, begin:begin + block_k].sum(-1)
        acc = acc + running[:, :, None]
    return acc * torch.rsqrt(running[:, :, None] + 1.0)


@pytest.mark.parametrize("pre_broadcast_on", [True, False], ids=["pre_broadcast", "plain"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_seed_002_outer_chain_scale(head_dim: int, pre_broadcast_on: bool) -> None:
    a, b = torch.rand(2, 5, 37), torch.randn(3, head_dim)
    config = tessera.Config(block_sizes=[1, 8, 16], pallas_pre_broadcast=pre_broadcast_on)
    kernel = on_pallas(outer_chain_scale, config=config)
    got = run_lowering_for_tpu(kernel, a, b)
    torch.testing.assert_close(got, outer_chain_reference(a, head_dim), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kernel(a, b), eager(kernel, a, b), atol=1e-5, rtol=1e-5)  # eager: same blocks


_WIDENED_256 = """\
  pb1: f32[t0, t1, lane128] = view(v0) what='lanes' how='widen' lanes=128
  v4: none = loop(pb1, v1) loops=(k2_0 in range(0, 37, 16) -> t2) carried=(v2, v3) outputs=(v7, v9)
    v5: f32[t0, t1, t2] = load(None) tensor=a accesses=(t0, t1, t2) eviction_policy=None
    v6: f32[t0, t1] = reduce(v5) fn='sum' dim=2 keepdim=False axis=t2 accumulate=f32
    pb2: f32[t0, t1, 1] = view(v6) what='lanes' how='unit' lanes=128
    v7: f32[t0, t1, lane128] = elementwise(v2, pb2) fn='add' compute=f32
    v8: f32[t0, t1, lane128] = view(v7) what='lanes' how='relabel' lanes=128
    pb3: f32[t0, t1, r0] = view(v8) what='lanes' how='fit' lanes=128
    v9: f32[t0, t1, r0] = elementwise(v3, pb3) fn='add' compute=f32
  v10: f32[t0, t1, lane128] = view(v2) what='lanes' how='relabel' lanes=128
  v11: f32[t0, t1, lane128] = elementwise(v10, 1.0) fn='add' compute=f32
  v12: f32[t0, t1, lane128] = elementwise(v11) fn='rsqrt' compute=f32
  pb4: f32[t0, t1, r0] = view(v12) what='lanes' how='fit' lanes=128
  v13: f32[t0, t1, r0] = elementwise(v3, pb4) fn='mul' compute=f32"""


@pytest.mark.parametrize("head_dim", [256, 512])
def test_pre_broadcast_pass_widens_per_row_values_for_every_consumer(head_dim: int) -> None:
    a, b = torch.rand(2, 5, 37), torch.randn(3, head_dim)
    before = on_pallas(outer_chain_scale).bind(a, b).to_ir(_SEED_CONFIG)
    after = str(pre_broadcast(before))
    assert "lane128" not in str(before)
    assert "  axis r0: whole [0 + %d) < %d" % (head_dim, head_dim) in after
    # the running sum is carried with 128 lanes; its uses inside the loop (acc + running[:, :, None])
    # and after it (rsqrt(running[:, :, None] + 1) * acc) are fitted to the head_dim lanes
    assert _WIDENED_256 in after
    code = on_pallas(outer_chain_scale, config=_SEED_CONFIG).bind(a, b).to_code()
    assert f"jnp.tile(v8, (1, 1, {head_dim // 128}))" in code
    assert f"jnp.tile(v12, (1, 1, {head_dim // 128}))" in code


def test_pre_broadcast_slices_lanes_for_a_narrower_head_dim() -> None:
    a, b = torch.rand(2, 5, 37), torch.randn(3, 64)
    code = on_pallas(outer_chain_scale, config=_SEED_CONFIG).bind(a, b).to_code()
    assert "pb3 = v8[..., :64]" in code


@tessera.kernel
def row_sums_by_loop(x: torch.Tensor) -> torch.Tensor:
    """A reduction loop with two carried values (a sum and a max) over column tiles."""
    m, n = x.size()
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        total = hl.zeros([tile_m], dtype=torch.float32)
        largest = hl.full([tile_m], float("-inf"), dtype=torch.float32)
        for tile_n in hl.tile(n):
            chunk = x[tile_m, tile_n]
            total = total + torch.sum(chunk, -1)
            largest = torch.maximum(largest, torch.amax(chunk, -1))
        out[tile_m, 0] = total
        out[tile_m, 1] = largest
    return out


@pytest.mark.parametrize("shape", [(1, 1), (7, 45)])
def test_reduction_loop_with_carried_values(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    expected = torch.stack([x.sum(-1), x.amax(-1)], -1)
    check(row_sums_by_loop, (x,), expected)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_gather(dtype: torch.dtype) -> None:
    """A gather runs (flat form) but does not lower for TPU: refused at the line that needs it."""
    table, ids = torch.randn(13, 37), torch.randint(0, 13, (3, 7), dtype=dtype)
    check(embedding, (ids, table), table[ids], tpu=False)
    wide = dtype == torch.int64
    why = "is int64: a TPU has no 64-bit vector types" if wide else "gathers from weight at indices loaded"
    line = "ids = flat_indices[tile_b]" if wide else "out[tile_b, tile_e] = weight[ids, tile_e]"
    with pytest.raises(exc.UnsupportedOperationError, match=why) as caught:
        run_lowering_for_tpu(on_pallas(embedding), ids, table)
    assert caught.value.location.filename.endswith("embedding.py") and line in caught.value.location.source_line()


def test_seed_000_grouped_gemm() -> None:
    shapes = ((1, 1, 1), (7, 13, 37), (0, 5, 3), (33, 40, 17))
    a_list = [torch.randn(m, k) for m, _, k in shapes]
    b_list = [torch.randn(k, n) for _, n, k in shapes]
    module = sys.modules[grouped_gemm_example.__name__]
    kernel = module.grouped_gemm_impl if hasattr(module, "grouped_gemm_impl") else None
    assert isinstance(kernel, tessera.Kernel)
    original = kernel
    module.grouped_gemm_impl = on_pallas(kernel)
    try:
        with recorded_launches() as launches:
            results = module.grouped_gemm(a_list, b_list)
    finally:
        module.grouped_gemm_impl = original
    for got, a, b in zip(results, a_list, b_list):
        torch.testing.assert_close(got, a @ b, atol=1e-4, rtol=1e-4)
    # the groups' sizes and offsets are loaded on the device: no BlockSpec or pl.ds slice addresses them
    with pytest.raises(exc.UnsupportedOperationError, match="does not lower for TPU") as caught:
        export_for_tpu(launches[0])
    assert caught.value.location.filename.endswith("grouped_gemm.py")


def test_generated_source_is_readable_jax_with_source_lines() -> None:
    x, y = torch.randn(5, 37), torch.randn(37)
    code = on_pallas(add).bind(x, y).to_code(tessera.Config(block_sizes=[8, 16]))
    assert "pl.pallas_call(add_kernel, grid=grid" in code
    assert "# add.py:" in code
    assert "pid_0 = pl.program_id(0)" in code
    code = on_pallas(row_sums_by_loop).bind(torch.randn(3, 40)).to_code(tessera.Config(block_sizes=[8, 16]))
    assert "lax.fori_loop(" in code


def test_backend_environment_variable_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_BACKEND", "pallas")
    kernel = tessera.kernel(add.fn)
    assert kernel.settings.backend == "pallas"
    monkeypatch.delenv("TESSERA_BACKEND")
    assert tessera.kernel(add.fn).settings.backend == "triton"


def test_what_pallas_cannot_lower_is_refused_at_the_kernel_line() -> None:
    x = torch.randn(3, 40)
    kernel = on_pallas(softmax.softmax, config=tessera.Config(block_sizes=[1], reduction_loops=[16]))
    with pytest.raises(exc.UnsupportedOperationError, match="Pallas backend processes a whole row") as caught:
        kernel(x)
    assert caught.value.location is not None and caught.value.location.filename.endswith("softmax.py")


def test_compiled_mode_is_refused_with_the_reason() -> None:
    ir_backend = tessera.backends.get("pallas")
    ir = on_pallas(add).bind(torch.randn(3, 4), torch.randn(4)).to_ir()
    from tessera.backends.base import LoweringOptions
    with pytest.raises(exc.UnsupportedOperationError, match="interpret mode only"):
        ir_backend.check(ir, LoweringOptions(interpret=False))


def test_tpu_layout_check_names_the_line_and_the_block_size_to_change() -> None:
    x, y = torch.randn(8, 256), torch.randn(256)
    bad = on_pallas(add, config=tessera.Config(block_sizes=[8, 64], pallas_tpu_layout_check=True))
    with pytest.raises(exc.ConfigError, match="multiple of 128") as caught:
        bad(x, y)
    assert "block_sizes[1] (now 64) to 128" in caught.value.hint
    assert caught.value.location is not None and caught.value.location.filename.endswith("add.py")
    good = on_pallas(add, config=tessera.Config(block_sizes=[8, 128], pallas_tpu_layout_check=True))
    torch.testing.assert_close(good(x, y), x + y)


def test_the_committed_support_table_is_what_the_script_writes() -> None:
    from docs import support_table
    assert support_table.PATH.read_text() == support_table.rendered(support_table.PATH.read_text())
    assert "| pallas |" in support_table.PATH.read_text()


def test_autotune_runs_the_machinery_in_interpret_mode(capsys: pytest.CaptureFixture[str]) -> None:
    configs = [tessera.Config(block_sizes=[1]), tessera.Config(block_sizes=[4])]
    kernel = on_pallas(softmax.softmax, configs=tuple(configs), autotune_budget_seconds=60.0)
    x = torch.randn(7, 45)
    chosen = kernel.autotune(x)
    assert chosen in configs
    assert "Interpreter timings say nothing about device speed" in capsys.readouterr().err
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))


def test_inputs_cross_into_jax_without_a_copy_when_64_byte_aligned() -> None:
    from tessera.backends.pallas.runner import shares_memory, storage_view, to_jax
    base = torch.randn(1000)
    aligned = storage_view(base[16:26])  # 64 bytes in
    assert shares_memory(to_jax(aligned), aligned)
    unaligned = storage_view(base[4:14])  # 16 bytes in: JAX's CPU client copies
    assert not shares_memory(to_jax(unaligned), unaligned)


def test_print_code_prints_the_pallas_source(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(3, 5)
    with settings.override(print_code=True):
        on_pallas(softmax.softmax)(x)
    assert "pl.pallas_call(softmax_kernel" in capsys.readouterr().err


def test_seed_002_with_a_head_dim_that_is_no_multiple_of_128() -> None:
    a, b = torch.rand(2, 5, 37), torch.randn(3, 384)  # whole dim 384 in a block of 512: tiled, then sliced
    kernel = on_pallas(outer_chain_scale, config=_SEED_CONFIG)
    assert "jnp.tile(v8, (1, 1, 4))" in kernel.bind(a, b).to_code()
    torch.testing.assert_close(kernel(a, b), outer_chain_reference(a, 384), atol=1e-5, rtol=1e-5)


def _strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same values in a NaN-filled larger buffer: a storage offset, a wide row stride, an inner stride of 2."""
    buffer = torch.full((tensor.size(0) + 1, 2 * tensor.size(1) + 1), float("nan"), dtype=tensor.dtype)
    view = buffer[1:, 1::2]
    view.copy_(tensor)
    return view


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_strided_views_and_16_bit_inputs(dtype: torch.dtype) -> None:
    x = _strided(torch.randn(7, 13).to(dtype))
    got = run_lowering_for_tpu(on_pallas(softmax.softmax), x)
    torch.testing.assert_close(got, torch.softmax(x.float(), -1).to(dtype), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(got, eager(softmax.softmax, x))
    out = _strided(torch.zeros(7, 13, dtype=dtype))
    y = torch.randn(13).to(dtype)

    @tessera.kernel(backend="pallas")
    def add_into(out: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size()):
            out[tile] = x[tile] + y[tile[1]]
        return out

    before = out._base.clone()
    run_lowering_for_tpu(add_into, out, x, y)  # the blocked form takes a contiguous copy, written back
    torch.testing.assert_close(out, x + y)
    gaps = torch.ones_like(before, dtype=torch.bool)
    gaps[1:, 1::2] = False
    assert torch.equal(out._base[gaps].isnan(), before[gaps].isnan())  # the buffer around the view is untouched


def test_the_tpu_semantics_interpreter_runs_on_the_cpu_too() -> None:
    x = torch.randn(7, 45)
    kernel = on_pallas(softmax.softmax, config=tessera.Config(block_sizes=[4], pallas_interpreter="tpu"))
    assert "INTERPRET = pltpu.InterpretParams()" in kernel.bind(x).to_code()
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))


@tessera.kernel(backend="pallas")
def to_fp8(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile].to(torch.float8_e4m3fn)  # line: fp8 cast
    return out


def test_a_dtype_pallas_has_no_type_for_is_refused_at_its_line() -> None:
    from marked_lines import marked_line
    with pytest.raises(exc.UnsupportedOperationError, match="Pallas backend has no torch.float8_e4m3fn") as caught:
        to_fp8(torch.randn(5), torch.empty(5, dtype=torch.float8_e4m3fn))
    assert caught.value.location.lineno == marked_line(__file__, "fp8 cast")[0]


@tessera.kernel(backend="pallas")
def floor_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for tile in hl.tile(a.size(0)):
        out[tile] = a[tile] // b[tile]
    return out


def test_float_floor_division_follows_torch_on_edge_values() -> None:
    a = torch.tensor([1.0, -0.5, 0.5, -7.0, 7.0, float("inf"), 3.0, -3.0, 0.0])
    b = torch.tensor([0.1, 2.0, -2.0, float("inf"), 2.0, 2.0, 0.0, float("-inf"), -1.0])
    expected = torch.floor_divide(a, b)
    got = run_lowering_for_tpu(floor_divide, a, b)
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert torch.equal(torch.signbit(got), torch.signbit(expected))  # -0.0 where torch gives it


# -- the blocked form and TPU lowering -------------------------------------------------------------


def test_tpu_sized_blocks_are_addressed_by_blockspecs_with_int32_index_math() -> None:
    """Blocks of 8 x 128 are the BlockSpecs' (index map: the program ids); tails are padded on
    the host and masked by int32 iota compares; the kernel lowers for TPU."""
    x, y = torch.randn(9, 130), torch.randn(130)
    kernel = on_pallas(add, config=tessera.Config(block_sizes=[8, 128]))
    code = kernel.bind(x, y).to_code()
    assert "# Blocked form" in code and "(2, (0, 1), (8, 128), (8, 128), (0, 0))" in code
    assert "lax.broadcasted_iota(jnp.int32, (8,), 0)" in code
    assert "jnp.take" not in code and "int64" not in code
    torch.testing.assert_close(run_lowering_for_tpu(kernel, x, y), x + y)


def test_a_size_one_leading_tile_is_a_squeezed_blockspec_dim() -> None:
    q, k, v = (torch.randn(2, 3, length, 64) for length in (9, 20, 20))
    kernel = on_pallas(attention_example.attention)
    code = kernel.bind(q, k, v, False).to_code()
    assert "(3, (0, 1, None), (None, 32, None)," in code  # dim 0: program id 0's index, squeezed
    got = run_lowering_for_tpu(kernel, q, k, v, False)
    torch.testing.assert_close(got, attention_example.reference(q, k, v, False), atol=1e-4, rtol=1e-4)


@tessera.kernel(backend="pallas")
def scale_from(x: torch.Tensor, start: int) -> torch.Tensor:
    """A 1-D tile loop that starts off a block boundary (3 with blocks of 4)."""
    out = torch.zeros_like(x)
    for tile in hl.tile(start, x.size(0)):
        out[tile] = x[tile] * 2.0
    return out


@pytest.mark.parametrize("n", [4, 5, 23])
def test_a_rank_1_tile_loop_from_an_offset(n: int) -> None:
    x = torch.randn(n)
    expected = torch.cat([torch.zeros(3), x[3:] * 2.0])
    kernel = on_pallas(scale_from, config=tessera.Config(block_sizes=[4]))
    # passed as (1, n), padded to whole blocks of 4 plus one block (the last tile starts at 3 + 4k)
    assert "(1, (None, None), (None, None), (1, 4), (0, 4))" in kernel.bind(x, 3).to_code()
    torch.testing.assert_close(run_lowering_for_tpu(kernel, x, 3), expected)
    torch.testing.assert_close(eager(kernel, x, 3), expected)
    # the TPU-semantics interpreter leaves an output block uninitialized, as a TPU does: the lanes
    # 0..2 the first tile masks off keep their values only because the block is copied in first
    for addressing in ("blocks", "flat"):
        config = tessera.Config(block_sizes=[4], pallas_interpreter="tpu", pallas_addressing=addressing)
        on_tpu_interpreter = on_pallas(scale_from, config=config)
        assert "@pl.when((pid_0 == 0))" in on_tpu_interpreter.bind(x, 3).to_code()
        torch.testing.assert_close(on_tpu_interpreter(x, 3), expected)


def test_the_flat_form_on_request_runs_and_says_why_it_does_not_lower() -> None:
    x = torch.randn(7, 45)
    kernel = on_pallas(softmax.softmax, config=tessera.Config(pallas_addressing="flat"))
    assert "jnp.take" in kernel.bind(x).to_code()
    with pytest.raises(exc.UnsupportedOperationError, match="pallas_addressing='flat' asks for the flat form"):
        run_lowering_for_tpu(kernel, x)
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))


def test_asking_for_the_blocked_form_of_a_gather_is_refused_at_its_line() -> None:
    table, ids = torch.randn(13, 37), torch.randint(0, 13, (3, 7), dtype=torch.int32)
    kernel = on_pallas(embedding, config=tessera.Config(pallas_addressing="blocks"))
    with pytest.raises(exc.UnsupportedOperationError, match="no blocked .TPU. form .* gathers from weight") as caught:
        kernel(ids, table)
    assert "weight[ids, tile_e]" in caught.value.location.source_line()
    with pytest.raises(exc.ConfigError, match="not one of Pallas's addressing forms"):
        tessera.Config(pallas_addressing="tiles")


@tessera.kernel(backend="pallas")
def column_pair(x: torch.Tensor) -> torch.Tensor:
    """Scalar indices into the last dim (0 and a runtime 1), stored at a scalar index."""
    out = torch.empty([x.size(0), 2], dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, 1] = x[tile, 0] - x[tile, x.size(1) - 1]
        out[tile, 0] = x[tile, 0]
    return out


@pytest.mark.parametrize("shape", [(1, 1), (11, 6)])
def test_scalar_indices_in_the_blocked_form(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    expected = torch.stack([x[:, 0], x[:, 0] - x[:, -1]], -1)
    torch.testing.assert_close(run_lowering_for_tpu(column_pair, x), expected)


@tessera.kernel(backend="pallas")
def half_row_sums(x: torch.Tensor) -> torch.Tensor:
    """An inner loop bound with a floor division of a size (int32 `int_floordiv` in the blocked form)."""
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(n // 2):
            total = total + torch.sum(x[tile_m, tile_n], -1)
        out[tile_m] = total
    return out


@pytest.mark.parametrize("shape", [(1, 1), (5, 37)])
def test_integer_floor_division_in_the_blocked_form(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    assert "int_floordiv(n, 2)" in half_row_sums.bind(x).to_code()
    torch.testing.assert_close(run_lowering_for_tpu(half_row_sums, x), x[:, :shape[1] // 2].sum(-1))
    a = torch.tensor([7, -7, 7, -7, 0, 5, -1, 9], dtype=torch.int32)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 4, -4], dtype=torch.int32)
    assert "int_floordiv(v0, v1)" in floor_divide.bind(a, b).to_code()
    torch.testing.assert_close(run_lowering_for_tpu(floor_divide, a, b), torch.floor_divide(a, b))


@tessera.kernel(backend="pallas", static_shapes=True)
def doubled_view(x: torch.Tensor) -> torch.Tensor:
    """A view made inside the tile loop: with static shapes its sizes are constants like an argument's."""
    out = torch.empty([5, 4], dtype=x.dtype, device=x.device)
    for tile in hl.tile([5, 4]):
        out[tile] = x.view(5, 4)[tile] * 2  # line: view inside
    return out


def test_a_view_made_inside_the_kernel_runs_flat_and_is_refused_for_tpu() -> None:
    """The blocked form cannot tell `x.view(5, 4)` of a (4, 5) argument from a (5, 4) argument, so
    the launch checks the argument's sizes and strides: 'auto' runs its flat form, 'blocks' refuses."""
    from marked_lines import marked_line
    x = torch.randn(4, 5)
    with pytest.raises(exc.UnsupportedOperationError, match="view made inside the kernel.*ran the flat form") as caught:
        run_lowering_for_tpu(doubled_view, x)
    assert caught.value.location.lineno == marked_line(__file__, "view inside")[0] - 1  # its tile loop
    torch.testing.assert_close(doubled_view(x), x.view(5, 4) * 2)
    blocked = on_pallas(doubled_view, config=tessera.Config(pallas_addressing="blocks"))
    with pytest.raises(exc.UnsupportedOperationError, match="argument is .4, 5. with strides .5, 1.: a view made"):
        blocked(x)


def stack_sum(dev_ptrs: torch.Tensor, example: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(example)
    for tile in hl.tile(example.size(0)):
        out[tile] = hl.stacktensor_like(example, dev_ptrs[:])[tile].sum(0)
    return out


def test_a_stack_of_tensors_by_pointer_is_refused_on_pallas() -> None:
    tensors = [torch.randn(8) for _ in range(2)]
    pointers = torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)
    with pytest.raises(exc.UnsupportedOperationError, match="pointer-valued accesses"):
        tessera.kernel(stack_sum, backend="pallas", mode="interpret")(pointers, tensors[0])
