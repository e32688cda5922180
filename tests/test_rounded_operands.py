"""Tile-value formulas see the rounded operand torch sees, also where a product made it.

A GPU compiler contracts a multiply into a following add or subtract (one FMA: the product is not
rounded). A formula that subtracts from its operand (`1 - x`, `x - 1`, `x - floor(x)`) then works
on `v * c` unrounded when the user wrote `f(v * c)`, and near a domain edge or a rounding boundary
that changes the answer, not its last bit: `asin(1000 * 1e-3)` (the product rounds to 1.0, exactly
it is 1 + 4.7e-8) was NaN on the H100, `round(5 * 0.1)` 1 instead of 0. The formulas read |x|
(language/transcendentals.py, language/arithmetic.py), which no FMA can absorb. Triton's CPU
interpreter never contracts, so these tests discriminate with `--device cuda` (compiled mode).
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor


def _elementwise(out: T, x: T, op: Callable[..., Any]) -> T:
    for tile in hl.tile(out.size()):
        out[tile] = op(x[tile])
    return out


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


# integers whose product with the constant rounds onto the edge: 1000 * 1e-3 is 1 + 4.7e-8 exactly
# and 1.0 rounded; 100 * 0.01 is 1 - 2.2e-9 exactly and 1.0 rounded; 5 * 0.1, 25 * 0.1, ... are
# just above the ties 0.5, 2.5, ... exactly and on them rounded
_EDGES = [1000, -1000, 999, -999, 100, -100, 0, 1, 5, -5, 25, -25, 35, 45, 7, 13, 1001, -1001, 500]
CASES = [
    ("asin", lambda x: torch.asin(x * 1e-3), 1e-5),
    ("acos", lambda x: torch.acos(x * 1e-3), 1e-5),
    ("acosh", lambda x: torch.acosh(x * 0.01), 1e-5),
    ("frac", lambda x: torch.frac(x * 0.1), 0.0),     # exact: y - trunc(y) loses nothing
    ("round", lambda x: torch.round(x * 0.1), 0.0),   # exact: half to even of the rounded product
    ("round_decimals", lambda x: torch.round(x * 0.01, decimals=1), 0.0),
]


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name, op, tolerance", CASES, ids=[c[0] for c in CASES])
def test_formula_sees_the_rounded_product(name: str, op: Callable[..., Any], tolerance: float,
                                          dtype: torch.dtype, device: torch.device) -> None:
    values = torch.tensor(_EDGES + list(range(-60, 60, 3)), dtype=dtype)
    x = values.reshape(1, -1).expand(3, -1).contiguous()  # 3 x 59: tails with blocks of 2 x 16
    expected = op(x)
    for mode in _modes(device):
        kernel = tessera.kernel(_elementwise, mode=mode, config=tessera.Config(block_sizes=[2, 16]))
        result = kernel(torch.zeros_like(expected, device=device), x.to(device), op)
        torch.testing.assert_close(result.cpu(), expected, rtol=tolerance, atol=tolerance, equal_nan=True,
                                   msg=lambda text: f"{name} on {dtype} in {mode} mode: {text}")


def test_rounding_keeps_the_sign_of_zero(device: torch.device) -> None:
    """round and frac read |x| and put x's sign back: -0.3 rounds to -0.0 and -0.0 stays -0.0, as in torch."""
    x = torch.tensor([[-0.3, -0.0, 0.0, -2.5, 2.5, -3.5, -7.0, 7.25, -7.25, float("nan"), float("-inf")]])
    for mode in _modes(device):
        for op in (torch.round, torch.frac):
            kernel = tessera.kernel(_elementwise, mode=mode, config=tessera.Config(block_sizes=[1, 16]))
            result = kernel(torch.zeros_like(x, device=device), x.to(device), op).cpu()
            expected = op(x)
            torch.testing.assert_close(result, expected, rtol=0, atol=0, equal_nan=True)
            numbers = ~expected.isnan()
            assert torch.equal(result.signbit()[numbers], expected.signbit()[numbers]), \
                f"{op.__name__} in {mode}: {result} vs {expected}"
