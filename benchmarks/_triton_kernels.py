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


@triton.jit
def tiled_matmul(x, y, out, m, n, k, stride_x, stride_y, stride_out, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, TMA: tl.constexpr, STEP: tl.constexpr):
    """out = x @ y (row-major 2-D), fp32 accumulation. Output tiles in groups of GROUP_M tile rows
    (consecutive programs share their K x N operand tiles in L2); program p takes tiles p,
    p + STEP, ... (STEP = the grid: one tile each, or the SM count: persistent). TMA: operand and
    output tiles through tensor descriptors, else masked pointer loads."""
    rows = tl.cdiv(m, BLOCK_M)
    cols = tl.cdiv(n, BLOCK_N)
    if TMA:
        x_desc = tl.make_tensor_descriptor(x, shape=[m, k], strides=[stride_x, 1], block_shape=[BLOCK_M, BLOCK_K])
        y_desc = tl.make_tensor_descriptor(y, shape=[k, n], strides=[stride_y, 1], block_shape=[BLOCK_K, BLOCK_N])
        out_desc = tl.make_tensor_descriptor(out, shape=[m, n], strides=[stride_out, 1],
                                             block_shape=[BLOCK_M, BLOCK_N])
    for tile in tl.range(tl.program_id(0), rows * cols, STEP):
        group_size = GROUP_M * cols
        first_row = tile // group_size * GROUP_M
        group_rows = tl.minimum(rows - first_row, GROUP_M)
        row = first_row + (tile % group_size) % group_rows
        col = (tile % group_size) // group_rows
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if TMA:
            for start in range(0, k, BLOCK_K):
                acc = tl.dot(x_desc.load([row * BLOCK_M, start]), y_desc.load([start, col * BLOCK_N]), acc)
            out_desc.store([row * BLOCK_M, col * BLOCK_N], acc.to(out.dtype.element_ty))
        else:
            offs_m = row * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = col * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            for start in range(0, k, BLOCK_K):
                a = tl.load(x + offs_m[:, None] * stride_x + (start + offs_k)[None, :],
                            mask=(offs_m[:, None] < m) & ((start + offs_k)[None, :] < k), other=0.0)
                b = tl.load(y + (start + offs_k)[:, None] * stride_y + offs_n[None, :],
                            mask=((start + offs_k)[:, None] < k) & (offs_n[None, :] < n), other=0.0)
                acc = tl.dot(a, b, acc)
            tl.store(out + offs_m[:, None] * stride_out + offs_n[None, :], acc.to(out.dtype.element_ty),
                     mask=(offs_m[:, None] < m) & (offs_n[None, :] < n))


def run_tiled_matmul(x, y, blocks, num_warps: int, num_stages: int, *, tma: bool, persistent: bool, group_m: int = 8):
    """`tiled_matmul` on torch tensors `x` `[m, k]`, `y` `[k, n]` with blocks `[BLOCK_M, BLOCK_N, BLOCK_K]`."""
    import torch

    if tma:  # device-side descriptors need scratch memory from an allocator
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=x.device))
    m, k = x.shape
    n = y.shape[1]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    tiles = triton.cdiv(m, blocks[0]) * triton.cdiv(n, blocks[1])
    programs = tiles
    if persistent and x.is_cuda:
        programs = min(tiles, torch.cuda.get_device_properties(x.device).multi_processor_count)
    tiled_matmul[(programs,)](x, y, out, m, n, k, x.stride(0), y.stride(0), out.stride(0), BLOCK_M=blocks[0],
                              BLOCK_N=blocks[1], BLOCK_K=blocks[2], GROUP_M=group_m, TMA=tma, STEP=programs,
                              num_warps=num_warps, num_stages=num_stages)
    return out
