"""The Triton backend's decisions, checked on generated code and on results.

Every Config knob (loop order, L2 grouping, program-id mapping, indexing strategy) must change
the generated code and keep results equal; masks appear only where a block may not divide its
extent; a device `if` predicates memory accesses; a Triton failure on generated code is a
located `BackendCompileError`. Kernels run in the device's mode (interpret on CPU).
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc


def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def row_softmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        rows = x[tile_m, :].to(torch.float32)
        shifted = rows - rows.amax(dim=1, keepdim=True)
        out[tile_m, :] = (shifted.exp() / shifted.exp().sum(dim=1, keepdim=True)).to(out.dtype)
    return out


KNOBS = [
    dict(loop_orders=[[1, 0]]),
    dict(l2_grouping=4),
    dict(pid_type="xyz"),
    dict(pid_type="persistent_interleaved"),
    dict(pid_type="persistent_blocked", l2_grouping=2),
    dict(indexing="block_ptr"),
    dict(indexing="tensor_descriptor"),
    dict(indexing=["block_ptr", "pointer", "tensor_descriptor"]),
]


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_each_knob_changes_code_and_keeps_results(device: torch.device, knob: dict) -> None:
    kernel = tessera.kernel(matmul, dot_precision="ieee")  # exact products: only the knob may differ
    x = torch.randn(37, 64, device=device)   # tails in m and n; k a multiple of the block
    y = torch.randn(64, 50, device=device)
    base = tessera.Config(block_sizes=[16, 32, 16])
    tuned = base.merged(**knob)
    bound = kernel.bind(x, y)
    assert bound.to_triton_code(tuned) != bound.to_triton_code(base)
    torch.testing.assert_close(bound.run(tuned), x @ y, atol=1e-4, rtol=1e-4)


def test_tensor_descriptor_falls_back_when_strides_are_not_16_byte_aligned(device: torch.device) -> None:
    kernel = tessera.kernel(matmul, dot_precision="ieee")
    x = torch.randn(20, 50, device=device)   # row stride 200 bytes: TMA cannot describe it
    y = torch.randn(50, 24, device=device)
    config = tessera.Config(block_sizes=[16, 16, 16], indexing="tensor_descriptor")
    code = kernel.bind(x, y).to_triton_code(config)
    assert "tl.make_block_ptr(x" in code and "make_tensor_descriptor(y" in code
    torch.testing.assert_close(kernel.bind(x, y).run(config), x @ y, atol=5e-3, rtol=5e-3)


def test_no_mask_where_the_block_divides_the_extent(device: torch.device) -> None:
    kernel = tessera.kernel(row_softmax, static_shapes=True)
    divisible = kernel.bind(torch.randn(64, 128, device=device)).to_triton_code(tessera.Config(block_sizes=[16]))
    assert "mask_t0" not in divisible and "mask_r0" not in divisible
    tail = kernel.bind(torch.randn(63, 100, device=device)).to_triton_code(tessera.Config(block_sizes=[16]))
    assert "mask_t0 = idx_t0 < 63" in tail and "mask_r0 = idx_r0 < 100" in tail


def test_block_pointers_with_every_check_proven_away(device: torch.device) -> None:
    """Static shapes that the blocks divide: no boundary check, so no padding option (Triton's
    tensor-pointer rewrite rejects padding without a check), and a transposed operand's unit
    stride comes first in `order`."""
    kernel = tessera.kernel(matmul, static_shapes=True, dot_precision="ieee")
    x, y = torch.randn(32, 64, device=device), torch.randn(16, 64, device=device).t()
    config = tessera.Config(block_sizes=[16, 16, 16], indexing="block_ptr")
    code = kernel.bind(x, y).to_triton_code(config)
    assert "boundary_check=()" in code and "padding_option" not in code
    assert "strides=(1, 64), offsets=(k1_0, offset_1), block_shape=(16, 16), order=(0, 1)" in code
    torch.testing.assert_close(kernel.bind(x, y).run(config), x @ y, atol=5e-3, rtol=5e-3)


def test_dynamic_sizes_are_always_masked(device: torch.device) -> None:
    code = tessera.kernel(row_softmax).bind(torch.randn(64, 128, device=device)).to_triton_code(
        tessera.Config(block_sizes=[16]))
    assert "mask_t0 = idx_t0 < end_0" in code


def test_generated_code_names_kernel_lines(device: torch.device) -> None:
    code = tessera.kernel(row_softmax).bind(torch.randn(8, 8, device=device)).to_triton_code()
    assert "# test_codegen.py:" in code and "shifted = rows - rows.amax(dim=1, keepdim=True)" in code


def test_small_blocks_are_padded_to_tl_dots_minimum(device: torch.device) -> None:
    kernel = tessera.kernel(matmul, dot_precision="ieee")  # exact float32 products on the GPU too
    x, y = torch.randn(9, 5, device=device), torch.randn(5, 3, device=device)
    config = tessera.Config(block_sizes=[8, 4, 4])
    code = kernel.bind(x, y).to_triton_code(config)
    assert "tl.join(" in code and "tl.split(" in code and "tl.dot(" in code
    torch.testing.assert_close(kernel.bind(x, y).run(config), x @ y)


def clip_rows(x: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0), block_size=1):
        limit = hl.load(limits, [tile.begin])
        row = x[tile, :]
        if limit > 0:
            kept = torch.clamp(row, max=limit)
            out[tile, :] = kept * 2
        else:
            kept = row
            out[tile, :] = -row
        if x.size(1) > 4:      # a host condition on a runtime size: decided per call, guarded
            kept = kept + 1
        out[tile, :] = out[tile, :] + kept
    return out


def clip_rows_reference(x: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in range(x.size(0)):
        kept = x[i].clamp(max=limits[i]) if limits[i] > 0 else x[i]
        written = kept * 2 if limits[i] > 0 else -x[i]
        out[i] = written + kept + (1 if x.size(1) > 4 else 0)
    return out


@pytest.mark.parametrize("width", [7, 3])
def test_device_if_predicates_stores_and_selects_values(device: torch.device, width: int) -> None:
    kernel = tessera.kernel(clip_rows)
    x = torch.randn(5, width, device=device)
    limits = torch.tensor([0.5, -1.0, 0.2, 1.0, -3.0], device=device)
    torch.testing.assert_close(kernel(x, limits), clip_rows_reference(x, limits))
    eager = tessera.kernel(clip_rows, mode="eager")
    torch.testing.assert_close(eager(x, limits), clip_rows_reference(x, limits))


def test_host_condition_on_a_size_is_a_guard(device: torch.device) -> None:
    kernel = tessera.kernel(clip_rows)
    limits = torch.ones(3, device=device)
    for width in (5, 7, 3, 8, 4):   # two whole-row buckets (8 and 4), one per outcome
        x = torch.randn(3, width, device=device)
        torch.testing.assert_close(kernel(x, limits), clip_rows_reference(x, limits))
    assert kernel.cache_info().variants == 2   # one per outcome of `x.size(1) > 4`


def test_if_on_a_tile_of_conditions_is_an_error(device: torch.device) -> None:
    def kernel_fn(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            values = x[tile]
            if values > 0:
                values = values * 2
            out[tile] = values
        return out
    if device.type == "cpu":
        kernel = tessera.kernel(kernel_fn, mode="interpret")
    else:
        kernel = tessera.kernel(kernel_fn)
    with pytest.raises(exc.ShapeMismatchError, match="needs a single boolean") as info:
        kernel(torch.randn(8, device=device))
    assert "if values > 0:" in str(info.value)


def test_triton_failure_is_a_located_backend_error(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.backends.triton import lowering
    monkeypatch.setitem(lowering.ELEMENTWISE_TEMPLATES, "sin", "tl.no_such_function({0})")

    def uses_sin(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile].sin() + 1
        return out
    with pytest.raises(exc.BackendCompileError) as info:
        tessera.kernel(uses_sin)(torch.randn(10, device=device))
    message = str(info.value)
    assert "out[tile] = x[tile].sin() + 1" in message and "in uses_sin" in message
    assert "tessera_generated" in message and "no_such_function" in message


def centered_rows(x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    rows_per_program = hl.register_block_size(x.size(0))
    for outer in hl.tile(x.size(0), block_size=rows_per_program):
        for rows in hl.tile(outer.begin, outer.end):
            out[rows, :] = x[rows, :] - mean[rows][:, None]
    return out


@pytest.mark.parametrize("inner_rows", [1, 2])
def test_unit_dims_are_inserted_by_indexing_not_reshape(device: torch.device, inner_rows: int) -> None:
    # `mean[rows][:, None]` of a one-row tile became `tl.reshape(v, [1, 1])`, which Triton 3.6
    # lays out with the whole broadcast row in every thread: compiling Helion's layer_norm
    # backward (rows of 10240) took minutes. Indexing with None keeps a normal layout.
    x = torch.randn(7, 300, device=device)
    mean = x.mean(dim=1)
    bound = tessera.kernel(centered_rows).bind(x, mean)
    config = tessera.Config(block_sizes=[4, inner_rows])
    code = bound.to_triton_code(config)
    assert "tl.reshape(" not in code and "[:, None]" in code
    torch.testing.assert_close(bound.run(config), x - mean[:, None])


def block_row_sums(x: torch.Tensor) -> torch.Tensor:
    """Rows summed one at a time inside blocks of rows (the norms' backward loop)."""
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for block in hl.tile(x.size(0)):
        for row in hl.tile(block.begin, block.end):
            out[row] = x[row, :].sum(dim=1) * 2
    return out


@pytest.mark.parametrize("rows", [1, 7, 10])
def test_a_tile_of_one_lane_needs_no_mask(device: torch.device, rows: int) -> None:
    """A tile or loop of block 1 only reaches indices below its extent: no mask on its lane (the
    H100's layer_norm backward loop lost a fifth of its instructions), under dynamic sizes, with
    results as torch's in eager and interpret modes (tails: 7 and 10 rows in blocks of 4)."""
    kernel = tessera.kernel(block_row_sums)
    x = torch.randn(rows, 33, device=device)
    code = kernel.bind(x).to_triton_code(tessera.Config(block_sizes=[4, 1]))
    assert "mask_t0 = idx_t0 < end_0" in code and "mask_t1" not in code
    assert "mask_t0" not in kernel.bind(x).to_triton_code(tessera.Config(block_sizes=[1, 1]))
    for config in (tessera.Config(block_sizes=[4, 1]), tessera.Config(block_sizes=[1, 1]),
                   tessera.Config(block_sizes=[4, 2])):
        torch.testing.assert_close(kernel.bind(x).run(config), x.sum(dim=1) * 2, atol=1e-5, rtol=1e-5)
    with tessera.settings.override(mode="eager"):
        torch.testing.assert_close(kernel(x), x.sum(dim=1) * 2, atol=1e-5, rtol=1e-5)
