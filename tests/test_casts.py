"""`.to(dtype)` between every pair of dtypes, in every mode, against torch.

Triton 3.6's interpreter gets some casts wrong on its own (int and bool -> bf16 gave NaN or
garbage, fp32 -> bf16 truncated): the generated code routes them through fp32 and rounds as
PyTorch does. Float -> int of values outside the int's range is undefined in C and on the GPU,
so those values are left out.
"""
from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool)
VALUES = (-300.7, -129.5, -2.5, -1.0, -0.0, 0.0, 0.49, 1.0, 2.5, 3.7, 127.2, 255.9, 1e4 + 0.3, 7e4)


def cast_into(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile].to(out.dtype)
    return out


def _source(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    base = torch.tensor(VALUES, dtype=torch.float64)
    if dtype == torch.bool:
        return (base > 1).to(device)
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return base.to(torch.int64).clamp(info.min, info.max).to(dtype).to(device)
    return base.to(dtype).to(device)


@pytest.mark.parametrize(("source", "target"), [pair for pair in itertools.product(DTYPES, DTYPES) if pair[0] != pair[1]],
                         ids=lambda d: str(d).replace("torch.", ""))
def test_a_cast_matches_torch_in_every_mode(source: torch.dtype, target: torch.dtype, device: torch.device) -> None:
    x = _source(source, device)
    expected = x.cpu().to(target)
    keep = torch.ones(len(VALUES), dtype=torch.bool)
    if source.is_floating_point and not target.is_floating_point and target != torch.bool:
        info = torch.iinfo(target)
        keep = (x.cpu().double() >= info.min) & (x.cpu().double() <= info.max)
    for mode in ("eager", None):
        kernel = tessera.kernel(cast_into, mode=mode, config=tessera.Config(block_sizes=[8]))
        result = kernel(torch.empty(len(VALUES), dtype=target, device=device), x).cpu()
        assert torch.equal(result[keep], expected[keep]), f"{mode or 'default'} mode: {result} vs {expected}"


def test_integer_host_expressions_stay_integers(device: torch.device) -> None:
    # sympy cannot tell that floor(n / floor(a / b)) is an int (the divisor might be 0): such index
    # math became float32 (a float pointer offset; `loaded * cdiv(n, 16)` silently float32)
    def gather_blocks(out: torch.Tensor, x: torch.Tensor, scaled: torch.Tensor, groups: torch.Tensor, n: int) -> Any:
        a, b = 8, 2
        for tile in hl.tile(out.size(0), block_size=4):
            out[tile] = x[tile.begin // (a // b) + tile.index * 0]
        for g in hl.grid(groups.size(0)):
            scaled[g] = hl.load(groups, [g]) * ((n + 15) // 16)
        return out, scaled

    x = torch.arange(40.0, device=device)
    groups = torch.tensor([1, 2, 3], dtype=torch.int32, device=device)
    for mode in ("eager", None):
        kernel = tessera.kernel(gather_blocks, mode=mode)
        out, scaled = kernel(torch.zeros(8, device=device), x, torch.zeros(3, dtype=torch.int64, device=device),
                             groups, 100)
        assert torch.equal(out.cpu(), torch.tensor([0.0] * 4 + [1.0] * 4))
        assert torch.equal(scaled.cpu(), torch.tensor([7, 14, 21]))


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_VALUES = (-240.0, -3.0, -1.0, -0.0, 0.0, 1.0, 2.0, 7.0, 96.0, 224.0)  # exact in both fp8 formats and int8


@pytest.mark.parametrize(("source", "target"),
                         [(a, b) for a in FP8 for b in DTYPES + FP8 if a != b] +
                         [(b, a) for a in FP8 for b in DTYPES],
                         ids=lambda d: str(d).replace("torch.", ""))
def test_fp8_casts_to_and_from_every_dtype(source: torch.dtype, target: torch.dtype, device: torch.device) -> None:
    """Triton casts fp8 only from and to wider floats ("cannot cast int32 to fp8e4nv", Helion's
    fp8_attention): ints, bools and the other fp8 format go through fp32, as torch does."""
    base = torch.tensor(FP8_VALUES)
    if not source.is_floating_point:
        base = base if source != torch.bool else base > 1
        if source in (torch.int8, torch.uint8):
            base = base.clamp(-128 if source == torch.int8 else 0, 127)
    x = base.to(source).to(device)
    expected = x.cpu().to(target)
    keep = torch.ones(len(FP8_VALUES), dtype=torch.bool)
    if target in (torch.int8, torch.uint8):  # outside the int's range: undefined, left out
        keep = (base >= (-128 if target == torch.int8 else 0)) & (base <= 127)
    for mode in ("eager", None):
        kernel = tessera.kernel(cast_into, mode=mode, config=tessera.Config(block_sizes=[8]))
        result = kernel(torch.empty(len(FP8_VALUES), dtype=target, device=device), x).cpu()
        assert torch.equal(result[keep].float(), expected[keep].float()), f"{mode or 'default'} mode: {result} vs {expected}"
