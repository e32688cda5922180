"""One-lane launch tiles dropped from every value (ir/unit_tiles.py): Helion's batched form
(`hl.tile([batch, m])` with a batch block of 1, `torch.bmm`, reductions over the last dim)
computes on 2-D blocks, like the form that indexes `tile_b.begin`.

Each kernel runs in eager and interpret modes against PyTorch at sizes including 1,
non-powers of two and tails; the IR and code are checked for what the pass is for, and for the
cases it leaves alone (a reduction over the unit tile itself).
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.ir.graph import AccessKind, AxisKind, Op
from tessera.ir.unit_tiles import drop_unit_launch_tiles

MODES = ("eager", "interpret")


def _batched_softmax_product(mode: str) -> tessera.Kernel:
    """softmax(q k^T) v per batch with 3-D tiles (batch block 1), an online max and sum over key
    tiles, a permute, `keepdim` reductions and a 3-D store: the shapes Helion's attention uses."""
    @tessera.kernel(config=tessera.Config(block_sizes=[16, 16]), mode=mode)
    def batched(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, m, d = q.size()
        n = k.size(1)
        d = hl.specialize(d)
        out = torch.empty_like(q)
        top_out = torch.empty([batch, m, 1], dtype=torch.float32, device=q.device)
        for tile_b, tile_m in hl.tile([batch, m], block_size=[1, None]):
            top = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
            total = hl.zeros([tile_b, tile_m], dtype=torch.float32)
            acc = hl.zeros([tile_b, tile_m, d], dtype=torch.float32)
            q_tile = q[tile_b, tile_m, :]
            for tile_n in hl.tile(n):
                scores = torch.bmm(q_tile, k[tile_b, tile_n, :].permute(0, 2, 1))
                scores = torch.where(tile_n.index[None, None, :] < n, scores, float("-inf"))
                new_top = torch.maximum(top, torch.amax(scores, dim=2))
                p = torch.exp(scores - new_top[:, :, None])
                alpha = torch.exp(top - new_top)
                total = total * alpha + p.sum(dim=-1, keepdim=True)[:, :, 0]
                acc = torch.baddbmm(acc * alpha[:, :, None], p, v[tile_b, tile_n, :])
                top = new_top
            out[tile_b, tile_m, :] = (acc / total[:, :, None]).to(out.dtype)
            top_out[tile_b, tile_m, :] = top[:, :, None]
        return out, top_out
    return batched


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scores = q @ k.transpose(1, 2)
    return torch.softmax(scores, dim=-1) @ v, scores.amax(dim=-1, keepdim=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch,m,n,d", [(1, 1, 1, 16), (3, 16, 16, 16), (2, 21, 37, 16), (5, 40, 9, 32)])
def test_batched_form_matches_torch(mode: str, batch: int, m: int, n: int, d: int) -> None:
    q, k, v = torch.randn(batch, m, d), torch.randn(batch, n, d), torch.randn(batch, n, d)
    out, top = _batched_softmax_product(mode)(q, k, v)
    expected_out, expected_top = _reference(q, k, v)
    torch.testing.assert_close(out, expected_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(top, expected_top, rtol=1e-5, atol=1e-5)


def test_the_unit_tile_leaves_every_shape_and_indexes_as_a_scalar() -> None:
    q, k, v = torch.randn(3, 21, 16), torch.randn(3, 37, 16), torch.randn(3, 37, 16)
    ir = drop_unit_launch_tiles(_batched_softmax_product("interpret").bind(q, k, v).to_ir())
    unit = next(axis for axis in ir.launch_axes if axis.block == 1)
    nodes = list(ir.nodes())
    assert not any(unit in node.shape for node in nodes)
    memory = [node for node in nodes if node.op in (Op.LOAD, Op.STORE)]
    scalar = [access for node in memory for access in node.params["accesses"] if access.kind is AccessKind.SCALAR]
    assert len(scalar) == len(memory) and all(access.inside for access in scalar)  # one batch index each
    source = _batched_softmax_product("interpret").bind(q, k, v).to_triton_code()
    code = "\n".join(line for line in source.splitlines() if not line.strip().startswith("#"))  # not the comments
    assert "tl.reshape(tl.dot" not in code and "[:, :, None]" not in code  # 2-D products and reductions
    assert "offset_0) >= 0" not in code                              # the batch index needs no mask


def _batch_sum(mode: str) -> tessera.Kernel:
    """Reduces over the one-lane tile itself: the pass keeps such an IR as traced."""
    @tessera.kernel(config=tessera.Config(block_sizes=[8]), mode=mode)
    def batch_sum(x: torch.Tensor) -> torch.Tensor:
        batch, m = x.size()
        out = torch.empty([batch, m], dtype=x.dtype, device=x.device)
        for tile_b, tile_m in hl.tile([batch, m], block_size=[1, None]):
            block = x[tile_b, tile_m]
            out[tile_b, tile_m] = block - block.sum(dim=0, keepdim=True)  # 0 for one row
        return out
    return batch_sum


@pytest.mark.parametrize("mode", MODES)
def test_a_reduction_over_the_unit_tile_keeps_the_ir_and_matches_torch(mode: str) -> None:
    x = torch.randn(3, 13)
    torch.testing.assert_close(_batch_sum(mode)(x), torch.zeros_like(x))
    if mode == "interpret":
        ir = _batch_sum(mode).bind(x).to_ir()
        assert drop_unit_launch_tiles(ir) is ir
        unit = next(axis for axis in ir.launch_axes if axis.block == 1)
        assert unit.kind is AxisKind.LAUNCH and any(unit in node.shape for node in ir.nodes())


def _helion_style_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Helion's form: both launch dims are Config slots (no fixed block of 1 for the batch)."""
    batch, m, d = q.size()
    d = hl.specialize(d)
    out = torch.empty_like(q)
    for tile_b, tile_m in hl.tile([batch, m]):
        top = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        total = hl.zeros([tile_b, tile_m], dtype=torch.float32)
        acc = hl.zeros([tile_b, tile_m, d], dtype=torch.float32)
        q_tile = q[tile_b, tile_m, :]
        for tile_n in hl.tile(k.size(1)):
            scores = torch.bmm(q_tile, k[tile_b, tile_n, :].transpose(1, 2), torch.float32)
            new_top = torch.maximum(top, torch.amax(scores, -1))
            p = torch.exp2(scores - new_top[:, :, None])
            alpha = torch.exp2(top - new_top)
            total = total * alpha + torch.sum(p, -1)
            acc = torch.baddbmm(acc * alpha[:, :, None], p.to(v.dtype), v[tile_b, tile_n, :])
            top = new_top
        out[tile_b, tile_m, :] = (acc / total[:, :, None]).to(out.dtype)
    return out


def test_the_heuristic_runs_a_batch_slot_set_to_one_slowest() -> None:
    # the batch slot is wanted at 1 (it tiles no product): it varies slowest, as a fixed
    # `block_size=[1, None]` does, so programs of one head run together and share its keys in L2
    from tessera.runtime.tuning import heuristic_for
    q = torch.empty(128, 4096, 128, dtype=torch.bfloat16)
    config = heuristic_for(tessera.kernel(_helion_style_attention, mode="interpret").bind(q, q, q))
    assert config["block_sizes"][0] == 1 and config["loop_orders"] == [[1, 0]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch,m,n", [(1, 1, 1), (3, 24, 40), (2, 33, 17)])
def test_helion_style_attention_matches_torch(mode: str, batch: int, m: int, n: int) -> None:
    q, k, v = torch.randn(batch, m, 16), torch.randn(batch, n, 16), torch.randn(batch, n, 16)
    out = tessera.kernel(_helion_style_attention, mode=mode)(q, k, v)
    probabilities = torch.softmax((q @ k.transpose(1, 2)) * 0.6931471805599453, dim=-1)  # exp2 of raw scores
    torch.testing.assert_close(out, probabilities @ v, rtol=1e-4, atol=1e-4)
