"""Host locals bound once to int literals (`block_m = 8`, `block_n = block_m // 2 + 1`) are
compile-time constants inside the tile loop, as in Helion: register sizes (`hl.arange(block_m)`,
`hl.zeros([block_m])`, `torch.zeros(block_m, block_n)`), unrolled `range(block_n)`. A local bound
twice, or to a size, stays a runtime value. Eager and interpret against PyTorch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.frontend.host_constants import constant_locals
from tessera.frontend.source import KernelSource

T = torch.Tensor
MODES = ("eager", "interpret")


def grouped_rows(x: T, offsets: T) -> T:
    block_m = 8
    block_n = block_m // 2 + 1
    out = torch.zeros(x.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for g in hl.grid(offsets.size(0) - 1):
        start = offsets[g]
        end = offsets[g + 1]
        rows = start + hl.arange(block_m)
        cols = hl.arange(block_n)
        counts = hl.zeros([block_m])
        for _ in range(block_n):
            counts = counts + 1
        payload = torch.ones(block_m, block_n, dtype=x.dtype) * (g + 1) + counts[:, None]
        mask = (rows < end)[:, None] & (cols < x.size(1))[None, :]
        hl.store(out, [rows, cols], payload, extra_mask=mask)
    return out


def grouped_rows_reference(x: T, offsets: T) -> T:
    out = torch.zeros_like(x)
    width = min(5, x.size(1))
    for g in range(offsets.numel() - 1):
        start, end = int(offsets[g]), int(offsets[g + 1])
        end = min(end, start + 8)
        out[start:end, :width] = g + 1 + 5
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows, cuts, width", [(1, [0, 1], 1), (10, [0, 3, 10], 5), (21, [0, 0, 9, 21], 7)])
def test_literal_locals_size_registers(mode, rows, cuts, width):
    x = torch.randn(rows, width)
    offsets = torch.tensor(cuts)
    kernel = tessera.kernel(grouped_rows, mode=mode)
    torch.testing.assert_close(kernel(x, offsets), grouped_rows_reference(x, offsets))


def _locals_of(fn) -> list[str]:
    return sorted(constant_locals(KernelSource(fn).tree))


def test_which_locals_are_constants():
    def kernel(x: T, k: int) -> T:
        a = 4
        b = -a * 2 + (1 << 3)
        c = x.size(0)  # a size: runtime
        d = 3
        d = 5  # bound twice
        e = k + 1  # from an argument
        if k:
            f = 2  # not at the top level
        return x

    assert _locals_of(kernel) == ["a", "b"]


def _closure_kernel(block: int):
    def rows_of_block(x: T) -> T:
        out = torch.zeros(x.size(0) // block, block, device=x.device)
        for g in hl.grid(x.size(0) // block):
            out[g, :] = x[g * block + hl.arange(block)] + hl.zeros([block])
        return out
    return rows_of_block


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("block, rows", [(1, 1), (4, 3), (8, 5)])
def test_closure_ints_are_constants(mode, block, rows):
    x = torch.randn(block * rows)
    kernel = tessera.kernel(_closure_kernel(block), mode=mode)
    torch.testing.assert_close(kernel(x), x.view(rows, block))
