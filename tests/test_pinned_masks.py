"""Masks the guards make unnecessary (ir/passes.py `decide_masks`): a whole dim whose size a
product's guard pins to its block (attention's head dim). Each kernel runs in eager and
interpret modes against PyTorch, with sizes the mask is still needed for (a head dim below its
block, tails)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def _rows_times_state(mode: str) -> tessera.Kernel:
    """out[b] = x[b] @ w: `x[b, tile, :]` is a whole dim of size `d`, pinned by the accumulator's
    `hl.zeros([tile, d])` (d specialized) to a constant."""
    @tessera.kernel(config=tessera.Config(block_sizes=[16]), mode=mode)
    def rows_times_state(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        batch, m, d = x.size()
        d = hl.specialize(d)
        out = torch.empty([batch, m, d], dtype=torch.float32, device=x.device)
        for tile_b, tile_m in hl.tile([batch, m], block_size=[1, None]):
            b = tile_b.begin
            acc = hl.zeros([tile_m, d], dtype=torch.float32)
            out[b, tile_m, :] = hl.dot(x[b, tile_m, :], w[:, :], acc=acc)
        return out
    return rows_times_state


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch,m,d", [(1, 1, 16), (3, 21, 16), (2, 40, 32), (2, 9, 12)])
def test_products_over_a_pinned_head_dim_match_torch(mode: str, batch: int, m: int, d: int) -> None:
    x, w = torch.randn(batch, m, d), torch.randn(d, d)
    torch.testing.assert_close(_rows_times_state(mode)(x, w), x @ w, rtol=1e-4, atol=1e-4)


def _code(x: torch.Tensor, w: torch.Tensor) -> str:
    source = _rows_times_state("interpret").bind(x, w).to_triton_code()
    return "\n".join(line for line in source.splitlines() if not line.strip().startswith("#"))


def test_a_head_dim_pinned_to_its_block_needs_no_mask() -> None:
    assert "mask_r0" not in _code(torch.randn(2, 40, 32), torch.randn(32, 32))
    assert "mask_r0" in _code(torch.randn(2, 9, 12), torch.randn(12, 12))  # 12 lanes of a block of 16
