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
