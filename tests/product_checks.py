"""Shared parts of the product tests (`test_products*.py`): tolerances, block sizes, operands, the
2-D K-loop kernel with its product forms, and `_run`, which runs a kernel generated and eager and
checks both against PyTorch."""
from __future__ import annotations

from typing import Any, Callable

import torch

import tessera
import tessera.language as hl
from examples._harness import assert_close

# (atol, rtol) for fp32-accumulated products of O(1) values, by output dtype.
_TOL: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (3e-2, 3e-2),
}
_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_DTYPE_IDS = ["fp32", "fp16", "bf16"]
# Block sizes [m, n, k]: tl.dot blocks (>= 16) and multiply-and-sum blocks (< 16).
_DOT_BLOCKS = [16, 16, 16]
_SMALL_BLOCKS = [8, 4, 4]


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _run(fn: Callable[..., Any], args: tuple, expected: Any, tolerance: tuple[float, float],
         device: torch.device, block_sizes: list[int] | None = None, name: str = "") -> Any:
    """Run `fn` generated (exact fp32 dots) and eager; check both against `expected` and each other."""
    config = tessera.Config(block_sizes=block_sizes) if block_sizes is not None else None
    name = name or fn.__name__
    generated = tessera.kernel(fn, config=config, mode=_mode(device), dot_precision="ieee")(*args)
    eager = tessera.kernel(fn, config=config, mode="eager")(*args)
    assert_close(eager, expected, tolerance, f"{name} (eager vs PyTorch)")
    assert_close(generated, expected, tolerance, f"{name} ({_mode(device)} vs PyTorch)")
    assert_close(generated, eager, tolerance, f"{name} ({_mode(device)} vs eager)")
    return generated


def _randn(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(dtype).to(device)


def _operands(m: int, k: int, n: int, dtype: torch.dtype, device: torch.device,
              y_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` `[m, k]` and `y` `[k, n]` scaled so products are O(1)."""
    x = _randn(m, k, dtype=dtype, device=device)
    y = _randn(k, n, dtype=y_dtype or dtype, device=device, scale=max(k, 1) ** -0.5)
    return x, y


def _reference_mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.float() @ y.float()).to(torch.promote_types(x.dtype, y.dtype))


# --------------------------------------------------------------------------------------------
# 2-D products in a K loop: one kernel, the product form passed in as a compile-time callable.

def mm_k_loop(x: torch.Tensor, y: torch.Tensor,
              product: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    m, k = x.size()
    n = y.size(1)
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = product(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def _mm(acc, a, b):
    return acc + torch.mm(a, b)


def _matmul(acc, a, b):
    return acc + torch.matmul(a, b)


def _at(acc, a, b):
    return acc + a @ b


def _tensor_mm(acc, a, b):
    return acc + a.mm(b)


def _tensor_matmul(acc, a, b):
    return acc + a.matmul(b)


def _addmm(acc, a, b):
    return torch.addmm(acc, a, b)


def _tensor_addmm(acc, a, b):
    return acc.addmm(a, b)


def _dot_default(acc, a, b):
    return acc + hl.dot(a, b)


def _dot(acc, a, b):
    return acc + hl.dot(a, b, out_dtype=torch.float32)


def _dot_acc(acc, a, b):
    return hl.dot(a, b, acc=acc)


def _dot_acc_out(acc, a, b):
    return hl.dot(a, b, acc=acc, out_dtype=torch.float32)


_FORMS_2D = [_mm, _matmul, _at, _tensor_mm, _tensor_matmul, _addmm, _tensor_addmm, _dot_default, _dot,
             _dot_acc, _dot_acc_out]
