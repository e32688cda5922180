"""The public `hl.` functions take their arguments by Helion's parameter names (a Helion kernel
that passes `hl.atomic_add(target=...)`, `hl.dot(mat1=..., mat2=...)`, `hl.cumsum(input_tensor=...)`
or `hl.arange(start=, end=)` ports unchanged), checked in eager and interpret modes at size 1, a
non-power of two and tails."""
from __future__ import annotations

import inspect

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
MODES = ("eager", "interpret")

# Helion's names for each function's parameters (helion/language/*.py), in order
HELION_PARAMETERS = {
    "atomic_add": ("target", "index", "value", "sem"), "atomic_cas": ("target", "index", "expected", "value", "sem"),
    **{f"atomic_{op}": ("target", "index", "value", "sem") for op in ("and", "or", "xor", "xchg", "max", "min")},
    "dot": ("mat1", "mat2", "acc", "out_dtype"), "reduce": ("combine_fn", "input_tensor", "dim", "other", "keep_dims"),
    "associative_scan": ("combine_fn", "input_tensor", "dim", "reverse"), "cumsum": ("input_tensor", "dim", "reverse"),
    "cumprod": ("input_tensor", "dim", "reverse"), "static_range": ("begin_or_end", "end_or_none", "step"),
    "tile": ("begin_or_end", "end_or_none", "block_size"), "grid": ("begin_or_end", "end_or_none", "step"),
    "load": ("tensor", "index", "extra_mask", "eviction_policy"), "store": ("tensor", "index", "value", "extra_mask"),
    "full": ("shape", "value", "dtype", "device"), "zeros": ("shape", "dtype", "device"),
}


@pytest.mark.parametrize("name", sorted(HELION_PARAMETERS))
def test_parameters_have_helions_names(name: str) -> None:
    assert tuple(inspect.signature(getattr(hl, name)).parameters) == HELION_PARAMETERS[name]


def by_keyword(out: T, x: T, w: T) -> T:
    for tile in hl.tile(x.size(0)):
        row = x[tile, :]
        total = hl.reduce(lambda a, b: a + b, input_tensor=row, dim=1)
        prefix = hl.cumsum(input_tensor=row, dim=1) + hl.cumprod(input_tensor=row, dim=1, reverse=True)
        scanned = hl.associative_scan(torch.maximum, input_tensor=row, dim=1)
        product = hl.dot(mat1=row, mat2=w[:, :], out_dtype=torch.float32)
        out[tile, :] = prefix + scanned + total[:, None] + product
        hl.atomic_add(target=out, index=[tile, 0], value=torch.ones_like(total))
        for j in hl.static_range(1, end_or_none=3):
            hl.atomic_max(target=out, index=[tile, j], value=total)
    return out


@pytest.mark.parametrize("rows", [1, 5, 9])
def test_functions_called_by_helions_keywords(rows: int) -> None:
    generator = torch.Generator().manual_seed(21)
    x, w = torch.rand(rows, 7, generator=generator) + 0.5, torch.randn(7, 7, generator=generator)
    expected = x.cumsum(1) + x.flip(1).cumprod(1).flip(1) + x.cummax(1).values + x.sum(1, keepdim=True) + x @ w
    expected[:, 0] += 1
    expected[:, 1:3] = torch.maximum(expected[:, 1:3], x.sum(1, keepdim=True))
    for mode in MODES:
        got = tessera.kernel(by_keyword, mode=mode, config=tessera.Config(block_sizes=[4]))(torch.empty_like(x), x, w)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m: f"{mode}: {m}")


def aranges(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        lanes = hl.arange(8) + hl.arange(start=2, end=10) + hl.arange(0, 16, 2) + hl.arange(end=24, start=16, step=1)
        out[tile, :] = x[tile, :] + lanes.float() + hl.arange(1, 9, dtype=torch.float64).float()
    return out


@pytest.mark.parametrize("rows", [1, 5])
def test_arange_takes_torchs_positional_and_keyword_forms(rows: int) -> None:
    x = torch.randn(rows, 8)
    lanes = torch.arange(8) + torch.arange(2, 10) + torch.arange(0, 16, 2) + torch.arange(16, 24) + torch.arange(1, 9)
    for mode in MODES:
        got = tessera.kernel(aranges, mode=mode, config=tessera.Config(block_sizes=[4]))(torch.empty_like(x), x)
        torch.testing.assert_close(got, x + lanes.float(), msg=lambda m: f"{mode}: {m}")


def arange_without_end(out: T, x: T) -> T:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] + hl.arange(start=2).float()
    return out


@pytest.mark.parametrize("mode", MODES)
def test_arange_without_an_end_is_a_located_error(mode: str) -> None:
    x = torch.randn(5, 8)
    with pytest.raises(exc.TesseraError, match="without an end") as info:
        tessera.kernel(arange_without_end, mode=mode)(torch.empty_like(x), x)
    assert info.value.location is not None and info.value.location.filename == __file__
