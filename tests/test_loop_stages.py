"""Device loops without a product name `num_stages` on their `tl.range`, so Triton pipelines their
loads (backends/triton/loop_stages.py); and the heuristics see each launch's own rows."""
from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples import layer_norm, rms_norm
from tessera.runtime.tuning import config_space_for, heuristic_for


@tessera.kernel
def _row_blocks(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for block in hl.tile(x.size(0), block_size=8):
        for row in hl.tile(block.begin, block.end):
            out[row, :] = x[row, :] * 2
    return out


@tessera.kernel
def _in_place_recurrence(x: torch.Tensor) -> torch.Tensor:
    for block in hl.tile(x.size(0), block_size=8):
        for row in hl.tile(block.begin, block.end):
            x[row, :] = x[row, :] + 1  # reads what it writes: loads issued ahead would be stale
    return x


def test_a_loop_of_loads_names_the_configs_stages() -> None:
    code = _row_blocks.bind(torch.randn(20, 16)).to_triton_code(tessera.Config(block_sizes=[2], num_stages=3))
    assert ", num_stages=3):" in code


def test_no_stages_named_with_one_stage_or_a_tensor_both_read_and_written() -> None:
    x = torch.randn(20, 16)
    assert "num_stages=" not in _row_blocks.bind(x).to_triton_code(tessera.Config(block_sizes=[2], num_stages=1))
    code = _in_place_recurrence.bind(x).to_triton_code(tessera.Config(block_sizes=[2], num_stages=3))
    assert "tl.range(" in code and "num_stages=" not in code


def test_stages_are_cut_to_the_shared_memory_a_loop_may_take() -> None:
    x = torch.randn(16, 8192)  # one row of 8192 fp32 per iteration: 32 KB a stage
    code = _row_blocks.bind(x).to_triton_code(tessera.Config(block_sizes=[1], num_stages=4))
    assert ", num_stages=3):" in code  # 1 + 64 KB // 32 KB


def test_pipelined_loops_compute_the_same_result() -> None:
    x = torch.randn(37, 130)
    torch.testing.assert_close(_row_blocks.bind(x).run(tessera.Config(block_sizes=[4], num_stages=3)), x * 2)


def test_the_heuristic_blocks_rows_by_the_first_launch_alone_when_the_second_has_fixed_blocks() -> None:
    # layer_norm_bwd's second launch (fixed blocks) sums a whole column of partials: its length
    # must not be taken for the rows of the first launch (it was: 8 rows of 512 per iteration)
    for module, inputs in ((layer_norm, layer_norm.make_bwd_inputs), (rms_norm, rms_norm.make_bwd_inputs)):
        kernel = getattr(module, "layer_norm_bwd" if module is layer_norm else "rms_norm_bwd")
        bound = kernel.bind(*inputs(16384, 4096, dtype=torch.bfloat16, device="cpu"))
        config = heuristic_for(bound)
        assert config["block_sizes"][:2] == [64, 1] and config["num_stages"] == 3
        assert len(config_space_for(bound.plan(tessera.Config())).facts.launches) == 1


def test_the_heuristic_pipelines_chunk_loops_of_long_rows_four_deep() -> None:
    """A row long enough to stream through chunks gets CHUNK_STAGES (4: cross-entropy's chunk
    loop on the H100); rows held whole are not pipelined by the heuristic."""
    from examples.cross_entropy import cross_entropy_losses
    from tessera.backends.triton.heuristics import CHUNK_STAGES, REDUCTION_CHUNK
    long_rows = heuristic_for(cross_entropy_losses.bind(torch.randn(4, 32000), torch.zeros(4, dtype=torch.int64)))
    assert long_rows.get("reduction_loops") == [REDUCTION_CHUNK] and long_rows.get("num_stages") == CHUNK_STAGES == 4
    short_rows = heuristic_for(cross_entropy_losses.bind(torch.randn(4, 1000), torch.zeros(4, dtype=torch.int64)))
    assert short_rows.get("reduction_loops") == [None] and short_rows.get("num_stages") == 1
