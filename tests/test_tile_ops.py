"""Issue 15, item 3: torch spellings inside tile loops, in eager and interpret (compiled: same
code), against torch at shapes with size 1, non-powers of two and tail tiles."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")
T = torch.Tensor


def _run(fn, config, *args, modes=MODES):
    return {mode: tessera.kernel(fn, mode=mode, config=config)(*args) for mode in modes}


# -- allocations shaped like a tile value ----------------------------------------------------------
def new_from_tiles(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        v = x[tile_m, tile_n]
        out[tile_m, tile_n] = v + v.new_full([tile_m, tile_n], 2.0) + v.new_zeros([tile_m, tile_n])
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (1, 17)])
def test_new_full_with_tile_sizes(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    # eager: a Tile used as a size is its element count (Tile.__index__)
    for mode, result in _run(new_from_tiles, tessera.Config(block_sizes=[4, 16]), x).items():
        torch.testing.assert_close(result, x + 2, msg=lambda m: f"{mode}: {m}")


# -- products with an output dtype -------------------------------------------------------------
def bmm_out_dtype(a: T, b: T) -> T:
    out = torch.empty(a.size(0), a.size(1), b.size(2), dtype=torch.float32)
    for tile_b, tile_m, tile_n in hl.tile(out.size()):
        out[tile_b, tile_m, tile_n] = torch.bmm(a[tile_b, tile_m, :], b[tile_b, :, tile_n], out_dtype=torch.float32)
    return out


def baddbmm_out_dtype(c: T, a: T, b: T) -> T:
    out = torch.empty(a.size(0), a.size(1), b.size(2), dtype=torch.float32)
    for tile_b, tile_m, tile_n in hl.tile(out.size()):
        out[tile_b, tile_m, tile_n] = torch.baddbmm(c[tile_b, tile_m, tile_n], a[tile_b, tile_m, :],
                                                    b[tile_b, :, tile_n], out_dtype=torch.float32)
    return out


def mm_out_dtype(a: T, b: T) -> T:
    out = torch.empty(a.size(0), b.size(1), dtype=torch.float32)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = torch.mm(a[tile_m, :], b[:, tile_n], out_dtype=torch.float32)
    return out


def addmm_out_dtype(c: T, a: T, b: T) -> T:
    out = torch.empty(a.size(0), b.size(1), dtype=torch.float32)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = torch.addmm(c[tile_m, tile_n], a[tile_m, :], b[:, tile_n], out_dtype=torch.float32)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,k,n", [(5, 16, 7), (1, 16, 1), (33, 24, 19)])
def test_products_with_out_dtype(dtype: torch.dtype, m: int, k: int, n: int) -> None:
    a, b = torch.randn(3, m, k).to(dtype), torch.randn(3, k, n).to(dtype)
    c2, c3 = torch.randn(m, n), torch.randn(3, m, n)
    expected3 = a.double() @ b.double()
    cases = [
        (bmm_out_dtype, tessera.Config(block_sizes=[1, 16, 16]), (a, b), expected3),
        (baddbmm_out_dtype, tessera.Config(block_sizes=[1, 16, 16]), (c3, a, b), c3.double() + expected3),
        (mm_out_dtype, tessera.Config(block_sizes=[16, 16]), (a[0], b[0]), expected3[0]),
        (addmm_out_dtype, tessera.Config(block_sizes=[16, 16]), (c2, a[0], b[0]), c2.double() + expected3[0]),
    ]
    for fn, config, args, expected in cases:
        for mode, result in _run(fn, config, *args).items():
            assert result.dtype == torch.float32
            torch.testing.assert_close(result.double(), expected, rtol=1e-3, atol=1e-3,
                                       msg=lambda text: f"{fn.__name__} {mode}: {text}")


def test_out_dtype_is_the_result_dtype_of_the_product() -> None:
    def mm_to_half(a: T, b: T) -> T:
        out = torch.empty(a.size(0), b.size(1), dtype=torch.float32)
        for tile_m, tile_n in hl.tile(out.size()):
            product = torch.mm(a[tile_m, :], b[:, tile_n], out_dtype=torch.float16)
            out[tile_m, tile_n] = product.float()
        return out
    a, b = torch.randn(5, 16), torch.randn(16, 7)
    for mode, result in _run(mm_to_half, tessera.Config(block_sizes=[16, 16]), a, b).items():
        torch.testing.assert_close(result, (a @ b).half().float(), msg=lambda m: f"{mode}: {m}")


# -- reshapes of tile values ---------------------------------------------------------------------
def reshape_roundtrip(x: T) -> T:
    out = torch.empty(x.size(0), 1, x.size(1))
    for tile_m in hl.tile(x.size(0)):
        v = x[tile_m, :]
        w = v.view(v.size(0), 1, 1, v.size(1)).reshape(-1, v.size(1))       # add unit dims, drop them
        out[tile_m, :, :] = w.reshape([w.shape[0], 1, x.size(1)]) * 2   # a whole dim named by the tensor's size
    return out


def reshape_tile_block(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        v = x[tile_m, tile_n].view(1, v_size := x[tile_m, tile_n].size(0), -1)
        out[tile_m, tile_n] = v.reshape(v_size, -1) + 1
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (7, 1)])
def test_reshape_of_a_tile_value_adds_or_drops_unit_dims(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    for mode, result in _run(reshape_roundtrip, tessera.Config(block_sizes=[4]), x).items():
        torch.testing.assert_close(result, x[:, None, :] * 2, msg=lambda m: f"{mode}: {m}")
    for mode, result in _run(reshape_tile_block, tessera.Config(block_sizes=[4, 16]), x).items():
        torch.testing.assert_close(result, x + 1, msg=lambda m: f"{mode}: {m}")


def test_reshape_of_a_tile_value_that_regroups_elements_is_a_located_error() -> None:
    def flatten(x: T) -> T:
        out = torch.empty(x.numel())
        for tile_m in hl.tile(x.size(0)):
            out[tile_m] = x[tile_m, :].reshape(3, -1)[:]  # 4 x 8 lanes do not split into rows of 3
        return out
    kernel = tessera.kernel(flatten, mode="interpret", config=tessera.Config(block_sizes=[4]))
    with pytest.raises(tessera.exc.UnsupportedOperationError) as caught:
        kernel(torch.randn(5, 8))
    text = str(caught.value)
    assert "changes how elements are grouped" in text and "reshape(3, -1)" in text and "hint:" in text


# -- fp8 casts both ways -------------------------------------------------------------------------
FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def fp8_roundtrip(x: T, dtype: torch.dtype) -> tuple[T, T]:
    narrow = torch.empty(x.shape, dtype=dtype)
    wide = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        v = x[tile_m, tile_n].to(dtype)
        narrow[tile_m, tile_n] = v
        wide[tile_m, tile_n] = v.to(torch.float32)
    return narrow, wide


def fp8_load(x: T) -> T:
    out = torch.empty(x.shape, dtype=torch.float32)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n].float() * 2
    return out


@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("shape", [(5, 37), (1, 1)])
def test_fp8_casts_round_to_nearest_even_both_ways(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    generator = torch.Generator().manual_seed(1)
    # normals, subnormals and exact ties, within range (past it the GPU saturates, torch gives NaN)
    x = torch.randn(shape, generator=generator) * torch.tensor([1e-3, 0.05, 1.0, 30.0]).repeat(shape[1])[:shape[1]]
    x.view(-1)[:4] = torch.tensor([0.0, 1.0625, -0.0, 2.0 ** -9 * 1.5])[:x.numel()]
    expected = x.to(dtype)
    config = tessera.Config(block_sizes=[4, 16])
    for mode, (narrow, wide) in _run(fp8_roundtrip, config, x, dtype).items():
        torch.testing.assert_close(narrow.float(), expected.float(), rtol=0, atol=0, msg=lambda m: f"{mode}: {m}")
        torch.testing.assert_close(wide, expected.float(), rtol=0, atol=0, msg=lambda m: f"{mode}: {m}")
    for mode, result in _run(fp8_load, config, expected).items():
        torch.testing.assert_close(result, expected.float() * 2, rtol=0, atol=0, msg=lambda m: f"{mode}: {m}")


def test_amd_fp8_formats_are_a_located_error_when_traced() -> None:
    x = torch.randn(5, 37)
    kernel = tessera.kernel(fp8_roundtrip, mode="interpret", config=tessera.Config(block_sizes=[4, 16]))
    with pytest.raises(tessera.exc.DtypeError) as caught:
        kernel(x, torch.float8_e4m3fnuz)
    # refused where it first reaches compiled code: the host-made fnuz output entering the tile loop
    assert "only on AMD GPUs" in str(caught.value) and caught.value.location is not None
    narrow, wide = tessera.kernel(fp8_roundtrip, mode="eager", config=tessera.Config(block_sizes=[4, 16]))(
        x, torch.float8_e4m3fnuz)
    torch.testing.assert_close(wide, x.to(torch.float8_e4m3fnuz).float(), rtol=0, atol=0)


# -- Python min/max of tile bounds -----------------------------------------------------------------
def clipped_bounds(x: T, limit: int) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        valid = min(tile.end, limit, x.size(0)) - max(tile.begin, 1)   # a symbolic Min/Max
        previous = x[max(tile.begin - 1, 0)]                           # a scalar load at a Max index
        out[tile] = x[tile] + valid + previous * 0.5
    return out


def _clipped_reference(x: T, limit: int, block: int) -> T:
    out = torch.empty_like(x)
    for begin in range(0, x.numel(), block):
        end = min(begin + block, x.numel())
        out[begin:end] = x[begin:end] + (min(end, limit, x.numel()) - max(begin, 1)) + x[max(begin - 1, 0)] * 0.5
    return out


@pytest.mark.parametrize("n,limit", [(37, 30), (1, 5), (16, 16), (5, 2)])
def test_python_min_max_of_tile_bounds(n: int, limit: int) -> None:
    x = torch.randn(n)
    for mode, result in _run(clipped_bounds, tessera.Config(block_sizes=[8]), x, limit).items():
        torch.testing.assert_close(result, _clipped_reference(x, limit, 8), msg=lambda m: f"{mode}: {m}")


# -- clamp with runtime (host scalar) bounds --------------------------------------------------------
def clamp_runtime(x: T, lo: float, hi: float, floor: int) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        v = x[tile_m, tile_n]
        clamped = torch.clamp(v, lo, hi) + torch.clamp(v, min=lo) + v.clamp(max=hi) + torch.clip(v, lo, hi)
        out[tile_m, tile_n] = clamped + torch.where(v > 0, v, lo) + torch.clamp((v * 8).int(), min=floor)
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1)])
def test_clamp_with_runtime_bounds(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    kernels = {mode: tessera.kernel(clamp_runtime, mode=mode, config=tessera.Config(block_sizes=[4, 16]))
               for mode in MODES}
    for lo, hi, floor in ((-0.3, 0.4, -2), (0.1, 0.2, 3)):   # the bounds are runtime arguments
        expected = (2 * x.clamp(lo, hi) + x.clamp(min=lo) + x.clamp(max=hi) + torch.where(x > 0, x, lo)
                    + (x * 8).int().clamp(min=floor))
        for mode, kernel in kernels.items():
            torch.testing.assert_close(kernel(x, lo, hi, floor), expected, msg=lambda m: f"{mode}: {m}")


def clamp_runtime_expressions(x: T, eps_low: float, eps_high: float) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        # arithmetic on scalar arguments is a symbolic expression while tracing, which torch's own
        # argument parser refuses: the call reaches clamp's and where's primitives anyway
        out[tile] = torch.clamp(v, 1 - eps_low, 1 + eps_high) + torch.where(v > 1, v, eps_low * 2)
    return out


@pytest.mark.parametrize("n", [1, 37])
def test_clamp_with_runtime_expression_bounds(n: int) -> None:
    x = torch.randn(n) + 1
    for mode, result in _run(clamp_runtime_expressions, tessera.Config(block_sizes=[16]), x, 0.2, 0.3).items():
        expected = x.clamp(0.8, 1.3) + torch.where(x > 1, x, torch.tensor(0.4))
        torch.testing.assert_close(result, expected, msg=lambda m: f"{mode}: {m}")


# -- register_block_size values as compile-time sizes ------------------------------------------------
def blocked_rows(x: T) -> T:
    n = x.size(0)
    block = hl.register_block_size(n)
    out = torch.empty_like(x)
    for tile in hl.tile(n, block_size=block):
        index = tile.begin + hl.arange(block)           # a register of `block` lanes
        valid = index < n
        values = hl.load(x, [index], extra_mask=valid) + hl.zeros([block]) + hl.full([block], 1.0)
        hl.store(out, [index], values, extra_mask=valid)
    return out


@pytest.mark.parametrize("n", [37, 1, 16])
def test_register_block_size_is_a_compile_time_size(n: int) -> None:
    x = torch.randn(n)
    for mode, result in _run(blocked_rows, tessera.Config(block_sizes=[8]), x).items():
        torch.testing.assert_close(result, x + 1, msg=lambda m: f"{mode}: {m}")


# -- `continue` in tile loops: a predicate on the rest of the iteration ----------------------------------
def skip_rows(x: T) -> T:
    out = torch.zeros(x.size(0))
    for i in hl.grid(x.size(0)):
        first = x[i, 0]
        if first < 0:            # a device condition
            out[i] = -1.0
            continue
        total = hl.zeros([])
        for tile_k in hl.tile(x.size(1)):
            if tile_k.begin == 0:    # a host condition on an inner tile loop: skip its first tile
                continue
            total = total + x[i, tile_k].sum()
            for j in range(3):       # a Python loop's continue stays Python's
                if j == 1:
                    continue
                total = total + 0.0
        out[i] = total.sum() + first
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (3, 16)])
def test_continue_in_tile_loops(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    expected = torch.where(x[:, 0] < 0, torch.tensor(-1.0), x[:, 16:].sum(1) + x[:, 0])
    for mode, result in _run(skip_rows, tessera.Config(block_sizes=[16]), x).items():
        torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{mode}: {m}")


def test_continue_inside_a_with_block_is_still_a_located_error() -> None:
    import contextlib

    def kernel(x: T) -> T:
        out = torch.zeros_like(x)
        for tile in hl.tile(x.size(0)):
            with contextlib.nullcontext():
                continue
            out[tile] = x[tile]
        return out
    with pytest.raises(tessera.exc.UnsupportedSyntaxError, match="continue"):
        tessera.kernel(kernel, mode="interpret")(torch.randn(5))


# -- helpers that capture tensors (Helion's matmul epilogue) ---------------------------------------
def matmul_with_epilogue(x: T, y: T, epilogue=lambda acc, tile: acc) -> T:
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=x.dtype)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


def _scaled_plus_bias(kernel, x: T, y: T, bias: T, alpha: float) -> T:
    def epilogue(acc, tile):  # a fresh closure on every call, capturing a tensor and a float
        return alpha * acc + bias[tile[1]]
    return kernel(x, y, epilogue)


@pytest.mark.parametrize("shape", [(1, 1, 1), (20, 30, 17)])
def test_closure_capturing_tensors(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    x, y = torch.randn(m, k), torch.randn(k, n)
    for mode in MODES:
        kernel = tessera.kernel(matmul_with_epilogue, mode=mode, config=tessera.Config(block_sizes=[16, 16, 16]))
        for call in range(3):  # new bias tensors each call: each call reads its own
            bias, alpha = torch.randn(n), 1.0 + call % 2
            torch.testing.assert_close(_scaled_plus_bias(kernel, x, y, bias, alpha), alpha * (x @ y) + bias,
                                       msg=lambda msg: f"{mode}: {msg}")
        torch.testing.assert_close(kernel(x, y), x @ y)
        if mode == "interpret":  # a fresh closure of the same code and captured kinds reuses its variant
            assert kernel.cache_info().variants == 3


def test_closure_whose_captured_tensor_is_rebound() -> None:
    x, y = torch.randn(9, 5), torch.randn(5, 6)
    bias = torch.zeros(6)

    def epilogue(acc, tile):
        return acc + bias[tile[1]]

    kernel = tessera.kernel(matmul_with_epilogue, mode="interpret", config=tessera.Config(block_sizes=[16, 16, 16]))
    for _ in range(3):
        bias = torch.randn(6)  # the same function object now captures another tensor
        torch.testing.assert_close(kernel(x, y, epilogue), x @ y + bias)


def matmul_with_side_output(x: T, y: T, epilogue) -> T:
    out = torch.empty([x.size(0), y.size(1)], dtype=x.dtype)
    for tile_m, tile_n in hl.tile(out.size()):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(x.size(1)):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


def test_closure_storing_into_a_captured_tensor() -> None:
    x, y = torch.randn(9, 5), torch.randn(5, 6)
    for mode in MODES:
        side = torch.zeros(9, 6)

        def epilogue(acc, tile):
            side[tile[0], tile[1]] = acc * 2  # a store into a tensor the closure captures
            return acc

        kernel = tessera.kernel(matmul_with_side_output, mode=mode, config=tessera.Config(block_sizes=[4, 4, 4]))
        torch.testing.assert_close(kernel(x, y, epilogue), x @ y)
        torch.testing.assert_close(side, 2 * (x @ y), msg=lambda m: f"{mode}: {m}")
        expanded = torch.zeros(1, 6).expand(9, 6)  # elements sharing memory: the stores would race

        def racing(acc, tile):
            expanded[tile[0], tile[1]] = acc
            return acc

        if mode == "interpret":
            with pytest.raises(tessera.exc.KernelArgumentError, match="epilogue__expanded"):
                kernel(x, y, racing)


# -- expand to explicit sizes: a tile value's own sizes, tiles, -1 ----------------------------------
def expand_by_sizes(x: T, flags: T) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        v = x[tile_m, tile_n]
        rows, columns = v.size()
        keep = flags[tile_m].view(rows, 1).expand(rows, columns)  # the block's own sizes
        wide = flags[tile_m][:, None].expand(-1, tile_n)            # -1 and a tile
        out[tile_m, tile_n] = torch.where(keep & wide, v, -v)
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (9, 4)])
def test_expand_to_a_tile_values_own_sizes(shape: tuple[int, int]) -> None:
    x, flags = torch.randn(shape), torch.rand(shape[0]) > 0.5
    for mode, result in _run(expand_by_sizes, tessera.Config(block_sizes=[4, 16]), x, flags).items():
        torch.testing.assert_close(result, torch.where(flags[:, None], x, -x), msg=lambda m: f"{mode}: {m}")


# -- register_block_size values as allocation sizes (Helion's manual reduction loops) --------------
def row_sums_in_block_lanes(x: T, same_block: bool = True) -> T:
    m, n = x.size()
    block_n = hl.register_block_size(n)
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, block_n], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=block_n if same_block else 4):
            acc += x[tile_m, tile_n] * 2 + 1  # the tail's lanes past n must add nothing
        out[tile_m] = acc.sum(-1)
    return out


@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 13), (3, 16), (6, 35)])
def test_an_inner_tile_joins_a_block_size_accumulator_lane_for_lane(m: int, n: int) -> None:
    x = torch.randn(m, n)
    for mode, got in _run(row_sums_in_block_lanes, tessera.Config(block_sizes=[8, 4]), x).items():
        torch.testing.assert_close(got, (x * 2 + 1).sum(-1), msg=mode)


def scratch_per_block(x: T) -> tuple[T, T]:
    """A [block_m, block_n] scratch tile per (launch tile, inner tile): stored through the tail
    tiles of both, and summed into a [tile_m, block_n] total."""
    m, n = x.size()
    block_m = hl.register_block_size(m)
    block_n = hl.register_block_size(n)
    out = torch.empty_like(x)
    sums = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m, block_size=block_m):
        total = hl.zeros([tile_m, block_n], dtype=torch.float32)
        for tile_n in hl.tile(n, block_size=block_n):
            scratch = hl.zeros([block_m, block_n], dtype=torch.float32)
            scratch += x[tile_m, tile_n] * 3
            out[tile_m, tile_n] = scratch
            total += scratch
        sums[tile_m] = total.sum(-1)
    return out, sums


@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 13), (8, 4), (11, 9)])
def test_a_block_size_scratch_tile_meets_launch_and_inner_tail_tiles(m: int, n: int) -> None:
    x = torch.randn(m, n)
    for mode, (out, sums) in _run(scratch_per_block, tessera.Config(block_sizes=[4, 8]), x).items():
        torch.testing.assert_close(out, x * 3, msg=mode)
        torch.testing.assert_close(sums, (x * 3).sum(-1), msg=mode)


def test_a_tile_of_another_block_size_does_not_join_the_allocation() -> None:
    x = torch.randn(3, 13)
    for mode in MODES:
        with pytest.raises(tessera.exc.ShapeMismatchError):
            tessera.kernel(row_sums_in_block_lanes, mode=mode, config=tessera.Config(block_sizes=[8, 2]))(x, False)


# -- out= inside a tile loop: refused in every mode (the trace once dropped it silently) -----------
def exp_into(x: T, y: T) -> T:
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        w = torch.zeros_like(v)
        torch.exp(v, out=w)
        y[tile] = w
    return y


@pytest.mark.parametrize("mode", MODES)
def test_out_argument_inside_a_tile_loop_is_refused(mode: str) -> None:
    x = torch.randn(7)
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="out=") as info:
        tessera.kernel(exp_into, mode=mode)(x, torch.empty(7))
    assert "torch.exp(v, out=w)" in str(info.value)
