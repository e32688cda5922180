"""Hand-written Triton kernels the benchmarks compare Tessera with (imported after the mode is set)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_2d(x, y, out, m, n, stride_xm, stride_ym, stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = x + y for row-major-within-rows `[m, n]` tensors, one BLOCK_M x BLOCK_N tile per program."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    a = tl.load(x + rows[:, None] * stride_xm + cols[None, :], mask=mask)
    b = tl.load(y + rows[:, None] * stride_ym + cols[None, :], mask=mask)
    tl.store(out + rows[:, None] * stride_om + cols[None, :], a + b, mask=mask)
