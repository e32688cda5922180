"""A careful user's campaign against silent wrong answers: bad and unusual inputs at call time.

Each test runs a kernel in eager mode and in the device's compiled mode (interpret on CPU) and
checks the result against PyTorch, or checks that what Tessera cannot run is a located
`TesseraError` (never a raw Python exception, never a race that silently gives a wrong answer).
Named after the behaviour each bug broke.
"""
from __future__ import annotations

import os
import warnings

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

CONFIG = tessera.Config(block_sizes=[4, 16])
T = torch.Tensor


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


def _assert_located(error: BaseException, kind: type[exc.TesseraError] = exc.TesseraError) -> None:
    assert isinstance(error, kind), f"{type(error).__name__}: {error}"
    assert "internal error" not in str(error) and "HostScalar" not in str(error), str(error)
    assert error.location is not None and os.path.basename(error.location.filename) == os.path.basename(__file__), \
        f"located at {error.location}"
    assert error.hint, str(error)


# -- a scalar argument indexed in a tile loop: a raw TypeError naming the trace's HostScalar -----
def scale_by_first(x: T, scale: float) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * scale[0]
    return out


@pytest.mark.parametrize("scale", [2.0, 2, True])
def test_indexing_a_scalar_argument_in_a_tile_loop_is_a_located_error(scale: object, device: torch.device) -> None:
    for mode in _modes(device):
        with pytest.raises(exc.IndexingError) as caught:
            tessera.kernel(scale_by_first, mode=mode)(torch.ones(8, device=device), scale)
        _assert_located(caught.value)
        assert "not subscriptable" in str(caught.value)


def add_then_fail(x: T, y: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + y
    return out


def test_a_python_int_past_int64_is_a_located_argument_error(device: torch.device) -> None:
    for mode in _modes(device):
        with pytest.raises(exc.KernelArgumentError) as caught:
            tessera.kernel(add_then_fail, mode=mode)(torch.ones(8, device=device), 2**70)
        assert "int64" in str(caught.value) and caught.value.location is not None
        assert os.path.basename(caught.value.location.filename) == os.path.basename(__file__)
    # within int64: computed as torch does (wrapping into the tensor's dtype)
    for mode in _modes(device):
        x = torch.arange(8, dtype=torch.int8, device=device)
        torch.testing.assert_close(tessera.kernel(add_then_fail, mode=mode)(x, 300), x + 300)


# -- an output partially overlapping an input (two views of one storage) raced: each mode gave a
# -- different wrong answer where torch refuses; the same view passed twice is in place and fine -
def add_into(x: T, y: T, out: T) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


def _views(kind: str, device: torch.device) -> tuple[T, T]:
    base = torch.randn(7, 38, generator=torch.Generator().manual_seed(3)).to(device)
    if kind == "shifted":
        return base[:, :37], base[:, 1:]
    if kind == "transposed":
        square = base[:, :7].contiguous()
        return square, square.t()
    rows = torch.randn(8, 37, generator=torch.Generator().manual_seed(3)).to(device)
    return rows[:7], rows[1:]


@pytest.mark.parametrize("kind", ["shifted", "transposed", "rows"])
def test_an_output_partially_overlapping_an_input_is_refused(kind: str, device: torch.device) -> None:
    for mode in _modes(device):
        for call in range(2):  # the second call takes the exact-facts memo's path
            x, out = _views(kind, device)
            before = out.clone()
            y = torch.randn(out.shape, device=device)
            with pytest.raises(exc.KernelArgumentError) as caught:
                tessera.kernel(add_into, mode=mode, config=CONFIG)(x, y, out)
            _assert_located(caught.value)
            assert "'out'" in str(caught.value) and "'x'" in str(caught.value)
            if mode != "eager":  # refused before it ran
                torch.testing.assert_close(out, before)


def test_aliasing_the_memo_has_seen_apart_is_refused(device: torch.device) -> None:
    """The exact facts hold no pointers: a launch that aliases where the remembered one did not
    must still be refused."""
    for mode in _modes(device):
        kernel = tessera.kernel(add_into, mode=mode, config=CONFIG)
        base = torch.zeros(7, 38, device=device)
        for _ in range(2):
            kernel(torch.ones(7, 37, device=device), torch.ones(7, 37, device=device), base[:, 1:])
        with pytest.raises(exc.KernelArgumentError):
            kernel(base[:, :37], torch.ones(7, 37, device=device), base[:, 1:])


@pytest.mark.parametrize("kind", ["same", "disjoint", "interleaved", "reshaped"])
def test_operands_sharing_memory_without_a_race_match_torch(kind: str, device: torch.device) -> None:
    for mode in _modes(device):
        base = torch.randn(7, 74, generator=torch.Generator().manual_seed(5)).to(device)
        y = torch.randn(7, 37, generator=torch.Generator().manual_seed(6)).to(device)
        if kind == "same":
            x = out = base[:, :37]
        elif kind == "disjoint":
            x, out = base[:, :37], base[:, 37:]
        elif kind == "interleaved":
            x, out = base[:, ::2], base[:, 1::2]
        else:
            x, out = base[:, :37].contiguous(), None
            out = x.view(-1).view(7, 37)
        expected = x + y
        tessera.kernel(add_into, mode=mode, config=CONFIG)(x, y, out)
        torch.testing.assert_close(out, expected, msg=lambda text: f"{mode}: {text}")


def test_overlapping_operands_that_are_only_read_match_torch(device: torch.device) -> None:
    base = torch.randn(7, 38, generator=torch.Generator().manual_seed(7)).to(device)
    x, y = base[:, :37], base[:, 1:]
    for mode in _modes(device):
        out = torch.zeros(7, 37, device=device)
        torch.testing.assert_close(tessera.kernel(add_into, mode=mode, config=CONFIG)(x, y, out), x + y)


# -- augmented assignments on tile values: the trace gave the promoted result where torch (and eager
# -- mode) keep the value's dtype: int8 += int32 gave 200 for torch's -56 ---------------------------
def add_in_place(x: T, y: T, scale: float) -> T:
    out = torch.empty(x.size(0), dtype=torch.float32, device=x.device)
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        v += y[tile] * scale
        out[tile] = v * 1.0
    return out


@pytest.mark.parametrize("dtypes", [(torch.int8, torch.int32), (torch.float16, torch.float32),
                                    (torch.float32, torch.float32), (torch.int32, torch.int64)])
def test_augmented_assignments_on_tile_values_keep_the_dtype_as_torch(dtypes: tuple[torch.dtype, torch.dtype],
                                                                      device: torch.device) -> None:
    x = torch.full((37,), 100, dtype=dtypes[0], device=device)
    y = torch.arange(37, device=device).to(dtypes[1]) + (0.0001 if dtypes[1].is_floating_point else 0)
    expected = x.clone()
    expected += y
    for mode in _modes(device):
        result = tessera.kernel(add_in_place, mode=mode, config=CONFIG)(x.clone(), y, 1)
        torch.testing.assert_close(result, expected.float(), msg=lambda text: f"{mode}: {text}")


def add_in_branch(x: T, flags: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0), block_size=4):
        v = x[tile]
        if flags[tile.begin] > 0:
            v += 100
        else:
            v -= 100
        out[tile] = v
    return out


def test_augmented_assignments_in_the_branches_of_a_device_if_match_eager(device: torch.device) -> None:
    x = torch.arange(8.0, device=device)
    flags = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0], device=device)
    expected = torch.tensor([100.0, 101, 102, 103, -96, -95, -94, -93], device=device)
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(add_in_branch, mode=mode)(x, flags), expected)


def test_an_in_place_result_torch_cannot_cast_back_is_a_located_dtype_error(device: torch.device) -> None:
    x = torch.arange(8, dtype=torch.int32, device=device)
    for mode in _modes(device):
        with pytest.raises(exc.DtypeError) as caught:
            tessera.kernel(add_in_place, mode=mode)(x.clone(), torch.ones(8, device=device), 1.5)
        assert caught.value.location is not None and caught.value.location.lineno == _line("v += y[tile] * scale")


def _line(text: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if line.strip() == text)


# -- `row = x[i, :]` in a grid loop is a load when traced, but eager mode gave a view of x: an in-place
# -- op on it wrote through to the caller's input in eager mode only -------------------------------
def double_rows(x: T) -> T:
    out = torch.empty_like(x)
    for i in hl.grid(x.size(0)):
        row = x[i, :]
        row *= 2
        out[i, :] = row
    return out


def test_a_grid_row_read_is_a_value_in_every_mode(device: torch.device) -> None:
    x = torch.arange(12.0, device=device).reshape(3, 4)
    for mode in _modes(device):
        given = x.clone()
        torch.testing.assert_close(tessera.kernel(double_rows, mode=mode)(given), x * 2)
        torch.testing.assert_close(given, x, msg=f"{mode} wrote into its input")


def assign_into_value(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(1)):
        v = x[:, tile]
        v[0] = 5.0
        out[:, tile] = v
    return out


def test_item_assignment_into_a_tile_value_is_a_located_error_in_every_mode(device: torch.device) -> None:
    for mode in _modes(device):
        with pytest.raises(exc.UnsupportedOperationError) as caught:
            tessera.kernel(assign_into_value, mode=mode)(torch.zeros(3, 4, device=device))
        _assert_located(caught.value)
        assert "TileValue" not in str(caught.value)


# -- integer products other than int8 x int8: an internal error (Triton's dot refuses them) in
# -- compiled modes while eager mode multiplied them ----------------------------------------------
def product(a: T, b: T, spelling: str) -> T:
    out = torch.empty(a.size(0), b.size(1), dtype=torch.int64, device=a.device)
    for tile_m, tile_n in hl.tile([a.size(0), b.size(1)]):
        if spelling == "matmul":
            out[tile_m, tile_n] = (a[tile_m, :] @ b[:, tile_n]).to(torch.int64)
        else:
            out[tile_m, tile_n] = hl.dot(a[tile_m, :], b[:, tile_n]).to(torch.int64)
    return out


@pytest.mark.parametrize("spelling", ["matmul", "dot"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8, torch.bool])
def test_integer_products_the_gpu_lacks_are_located_dtype_errors(dtype: torch.dtype, spelling: str,
                                                                 device: torch.device) -> None:
    a = torch.ones(16, 16, device=device).to(dtype)
    for mode in _modes(device):
        with pytest.raises(exc.DtypeError) as caught:
            tessera.kernel(product, mode=mode)(a, a, spelling)
        _assert_located(caught.value)


@pytest.mark.parametrize("spelling", ["matmul", "dot"])
def test_int8_products_match_torch(spelling: str, device: torch.device) -> None:
    generator = torch.Generator().manual_seed(9)
    a = torch.randint(-128, 128, (17, 16), generator=generator, dtype=torch.int8).to(device)
    b = torch.randint(-128, 128, (16, 5), generator=generator, dtype=torch.int8).to(device)
    wide = (a.cpu().long() @ b.cpu().long()).to(device)  # CUDA has no int64 matmul
    expected = wide.to(torch.int8).long() if spelling == "matmul" else wide  # torch's int8 @ int8 wraps to int8
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(product, mode=mode)(a, b, spelling), expected,
                                   msg=lambda text: f"{mode}: {text}")


# -- torch.add/sub(..., alpha=) scaled `other` in its own dtype before promoting: an int8 + uint8 sum
# -- wrapped the scaled uint8 operand (389 came out as 133) ----------------------------------------
def add_scaled(x: T, y: T, out: T, subtract: bool) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.sub(x[tile], y[tile], alpha=3) if subtract else torch.add(x[tile], y[tile], alpha=2)
    return out


@pytest.mark.parametrize("subtract", [False, True])
@pytest.mark.parametrize("dtypes", [(torch.int8, torch.uint8), (torch.float32, torch.float16),
                                    (torch.int32, torch.int8), (torch.float16, torch.int32)])
def test_alpha_scales_the_promoted_operand_as_torch(dtypes: tuple[torch.dtype, torch.dtype], subtract: bool,
                                                    device: torch.device) -> None:
    generator = torch.Generator().manual_seed(11)
    x = torch.randint(-100, 100, (37,), generator=generator).to(dtypes[0]).to(device)
    y = torch.randint(0, 250, (37,), generator=generator).to(dtypes[1]).to(device)
    expected = torch.sub(x, y, alpha=3) if subtract else torch.add(x, y, alpha=2)
    for mode in _modes(device):
        out = torch.zeros(37, dtype=expected.dtype, device=device)
        torch.testing.assert_close(tessera.kernel(add_scaled, mode=mode)(x, y, out, subtract), expected,
                                   msg=lambda text: f"{mode}: {text}")


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_a_lambda_kernel_is_a_located_error(mode: str) -> None:
    # was a raw AttributeError ('Assign' object has no attribute 'args') from the frontend
    kernel = tessera.kernel(lambda x: x, mode=mode)
    with pytest.raises(exc.TesseraError, match="not a `def` function") as raised:
        kernel(torch.zeros(3))
    assert raised.value.location is not None and raised.value.location.filename == __file__
