"""Layer-norm backward (seed 003) works for any feature width, in every mode.

Seed 003 is Helion's layer-norm backward failing for widths that are not powers of two, because
reductions minted fresh symbols that forgot `hl.specialize`. `examples/layer_norm.py` keeps the
seed's structure: row blocks from `hl.register_block_size`, the width pinned by
`hl.specialize(x.size(1))`, an inner `hl.tile(mb.begin, mb.end)` over each block's rows, and
`grad_weight` / `grad_bias` accumulated per block into row `mb.id` of partial buffers that a
second tile loop sums.

Each case runs in eager mode and in the generated mode of the device (interpret on CPU, compiled
on CUDA with `pytest --device cuda`) and is checked against PyTorch autograd through
`torch.nn.functional.layer_norm`, at widths 64, 200, 1000 and 5632 and row counts 1, a prime (37)
and a power of two (256), in float32, bfloat16 and float16. The interpreter is slow per element,
so row counts stay small.
"""
from __future__ import annotations

import pytest
import torch

import tessera
from examples import layer_norm
from examples._harness import DEFAULT_TOLERANCES, assert_close
from tessera import settings

WIDTHS = [64, 200, 1000, 5632]
# (width, rows, dtype): every width at 1, a prime and a power-of-two number of rows in float32,
# and at 1 and 37 rows in the half-precision dtypes.
_CASES = [(width, rows, torch.float32) for width in WIDTHS for rows in (1, 37, 256)] + [
    (width, rows, dtype) for dtype in (torch.bfloat16, torch.float16) for width in WIDTHS for rows in (1, 37)]
_DTYPE_IDS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _generated_mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _fresh() -> tessera.Kernel:
    """layer_norm_bwd with its own variants: this file compiles two launches for each of many widths,
    dtypes and layouts, which would fill the example kernel's max_variants for the other tests."""
    return tessera.kernel(layer_norm.layer_norm_bwd.fn)


def _run(kernel: tessera.Kernel, mode: str, device: torch.device, inputs: tuple[torch.Tensor, ...]) -> tuple:
    with settings.override(mode=_generated_mode(device) if mode == "generated" else mode):
        return kernel(*inputs)


def _check(kernel: tessera.Kernel, mode: str, device: torch.device, inputs: tuple[torch.Tensor, ...],
           reference_inputs: tuple[torch.Tensor, ...] | None = None) -> None:
    """`kernel(*inputs)` in `mode` equals autograd's (grad_x, grad_weight, grad_bias) on the same values."""
    dtype = inputs[1].dtype
    expected = layer_norm.reference_bwd(*(reference_inputs or inputs))
    assert_close(_run(kernel, mode, device, inputs), expected, DEFAULT_TOLERANCES[dtype],
                 f"layer_norm_bwd ({mode})")


@pytest.mark.parametrize("mode", ["eager", "generated"])
@pytest.mark.parametrize(("width", "rows", "dtype"), _CASES,
                         ids=[f"n{n}-m{m}-{_DTYPE_IDS[dtype]}" for n, m, dtype in _CASES])
def test_layer_norm_bwd_matches_autograd_at_any_width(width: int, rows: int, dtype: torch.dtype, mode: str,
                                                      device: torch.device) -> None:
    inputs = layer_norm.make_bwd_inputs(rows, width, dtype=dtype, device=str(device))
    _check(_fresh(), mode, device, inputs)


# Block sizes (m_block, rows per inner step): one row per block, blocks with a tail (37 = 9 * 4 + 1),
# an inner step wider than its block, and one block holding every row.
_BLOCK_SIZES = [[1, 1], [4, 2], [8, 16], [64, 8]]


@pytest.mark.parametrize("mode", ["eager", "generated"])
@pytest.mark.parametrize("width", [200, 5632], ids=["n200", "n5632"])
@pytest.mark.parametrize("block_sizes", _BLOCK_SIZES, ids=["x".join(map(str, b)) for b in _BLOCK_SIZES])
def test_layer_norm_bwd_sums_the_partial_buffers_of_every_row_block(block_sizes: list[int], width: int, mode: str,
                                                                     device: torch.device) -> None:
    kernel = tessera.kernel(layer_norm.layer_norm_bwd.fn, config=tessera.Config(block_sizes=block_sizes))
    inputs = layer_norm.make_bwd_inputs(37, width, dtype=torch.float32, device=str(device))
    _check(kernel, mode, device, inputs)


@pytest.mark.parametrize("mode", ["eager", "generated"])
@pytest.mark.parametrize("width", [200, 5632], ids=["n200", "n5632"])
def test_layer_norm_bwd_of_no_rows_gives_zero_weight_and_bias_gradients(width: int, mode: str,
                                                                        device: torch.device) -> None:
    inputs = layer_norm.make_bwd_inputs(0, width, dtype=torch.float32, device=str(device))
    grad_x, grad_weight, grad_bias = _run(_fresh(), mode, device, inputs)
    assert grad_x.shape == (0, width)
    assert grad_weight.tolist() == [0.0] * width and grad_bias.tolist() == [0.0] * width


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_layer_norm_bwd_reads_strided_inputs_at_a_wide_row(mode: str, device: torch.device) -> None:
    grad_out, x, mean, rstd, weight = layer_norm.make_bwd_inputs(37, 5632, dtype=torch.bfloat16, device=str(device))
    column_major = grad_out.t().contiguous().t()
    every_other = torch.full((37, 2 * 5632), float("nan"), dtype=x.dtype, device=x.device)[:, ::2]
    every_other.copy_(x)
    _check(_fresh(), mode, device, (column_major, every_other, mean, rstd, weight),
           reference_inputs=(grad_out, x, mean, rstd, weight))


def test_layer_norm_bwd_compiles_one_variant_per_width_and_none_per_row_count(device: torch.device) -> None:
    # The width is specialized (a constant in the generated code); the row count stays dynamic.
    kernel = tessera.kernel(layer_norm.layer_norm_bwd.fn, config=tessera.Config(block_sizes=[8, 4]))
    for width in WIDTHS:
        for rows in (37, 29):
            _check(kernel, "generated", device, layer_norm.make_bwd_inputs(rows, width, dtype=torch.float32,
                                                                            device=str(device)))
    assert kernel.cache_info().variants == 2 * len(WIDTHS)  # the rows' launch and the partial sums' launch
    inputs = layer_norm.make_bwd_inputs(29, 5632, dtype=torch.float32, device=str(device))
    assert "5632" in kernel.bind(*inputs).to_triton_code(tessera.Config(block_sizes=[8, 4]))
