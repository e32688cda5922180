"""Kernels the dispatch benchmarks share (no environment set here: dispatch.py runs on a GPU,
dispatch_cases_cpu.py in Triton's interpreter)."""
from __future__ import annotations

from typing import Any, Callable

import torch

import tessera
import tessera.language as hl


def keep(acc: torch.Tensor, tile: Any) -> torch.Tensor:
    """The default epilogue: the accumulator as it is."""
    return acc


@tessera.kernel
def matmul_epilogue(x: torch.Tensor, y: torch.Tensor, epilogue: Callable[..., torch.Tensor] = keep) -> torch.Tensor:
    """A matmul whose epilogue is an argument (the form Helion's examples use)."""
    out = x.new_empty(x.size(0), y.size(1))  # (both of one dtype here)
    for tile_m, tile_n in hl.tile(out.size()):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(x.size(1)):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n)).to(out.dtype)
    return out


def matmul_cases(device: str) -> list[tuple[str, Any, Callable[[], Any], Callable[[], torch.Tensor]]]:
    """(name, kernel, one hit call, its PyTorch reference) for a plain matmul, the same with a
    closure epilogue made on every call, and a split-K matmul: small sizes, so the host's time
    is what a call costs."""
    from examples.matmul import matmul
    a, b, bias = (torch.randn(16, 16, device=device), torch.randn(16, 16, device=device),
                  torch.randn(16, device=device))
    tall_a, tall_b = torch.randn(16, 128, device=device), torch.randn(128, 16, device=device)
    split = tessera.kernel(matmul.fn, config=tessera.Config(block_sizes=[16, 16, 32], split_k=4), dot_precision="ieee")
    plain = tessera.kernel(matmul.fn, dot_precision="ieee")
    with_epilogue = tessera.kernel(matmul_epilogue.fn, dot_precision="ieee")
    return [
        ("matmul", plain, lambda: plain(a, b), lambda: a @ b),
        ("matmul, closure epilogue per call", with_epilogue,
         lambda: with_epilogue(a, b, lambda acc, tile: acc + bias[tile[1]]), lambda: a @ b + bias),
        ("split-K matmul (split_k=4)", split, lambda: split(tall_a, tall_b), lambda: tall_a @ tall_b),
    ]
