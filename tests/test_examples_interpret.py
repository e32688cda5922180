"""Pointwise, reduction and runtime-scalar examples, run as generated Triton, agree with PyTorch
and eager.

On CPU the kernels run in Triton's interpreter (`interpret`), on CUDA compiled; both are checked
against PyTorch and against the same kernel in `eager` mode. Shapes include size 1, primes and
tails of the default block size (32); layouts include column-major (transposed) tensors and
views into a larger buffer (a storage offset, a row stride wider than the row, an inner stride
of 2). The interpreter is slow per call, so sizes stay small (rows <= 33, columns <= 130).
"""
from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from examples import EXAMPLE_MODULES
from examples._harness import Example, assert_close
from tessera import settings

_EXAMPLES: dict[str, Example] = {
    example.name: example
    for module_name in EXAMPLE_MODULES
    for example in importlib.import_module(f"examples.{module_name}").EXAMPLES
}

# (example name, sizes): size 1, a small prime shape, and a tail of the default block.
_SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("add", {"m": 1, "n": 1}),
    ("add", {"m": 7, "n": 13}),
    ("add", {"m": 33, "n": 130}),
    ("add", {"m": 5, "n": 37, "broadcast": True}),
    ("softmax", {"m": 1, "n": 1}),
    ("softmax", {"m": 7, "n": 13}),
    ("softmax", {"m": 33, "n": 130}),
    ("softmax_two_pass", {"m": 1, "n": 1}),
    ("softmax_two_pass", {"m": 7, "n": 13}),
    ("softmax_two_pass", {"m": 5, "n": 130}),
    ("rms_norm", {"m": 1, "n": 1}),
    ("rms_norm", {"m": 7, "n": 13}),
    ("rms_norm", {"m": 33, "n": 130}),
    ("rms_norm_bwd", {"m": 1, "n": 1}),
    ("rms_norm_bwd", {"m": 7, "n": 13}),
    ("rms_norm_bwd", {"m": 100, "n": 130}),
    ("layer_norm_fwd", {"m": 1, "n": 1}),
    ("layer_norm_fwd", {"m": 7, "n": 13}),
    ("layer_norm_fwd", {"m": 33, "n": 130}),
    ("layer_norm_bwd", {"m": 1, "n": 1}),
    ("layer_norm_bwd", {"m": 7, "n": 13}),
    ("layer_norm_bwd", {"m": 33, "n": 130}),
    ("welford", {"m": 1, "n": 1, "correction": 0}),
    ("welford", {"m": 7, "n": 13}),
    ("welford", {"m": 3, "n": 130}),
    ("cross_entropy", {"n": 1, "v": 1}),
    ("cross_entropy", {"n": 7, "v": 13}),
    ("cross_entropy", {"n": 33, "v": 130}),
    ("embedding", {"batch": 1, "seq": 1, "vocab": 1, "dim": 1}),
    ("embedding", {"batch": 3, "seq": 7, "vocab": 13, "dim": 37}),
    ("embedding", {"batch": 2, "seq": 5, "vocab": 100, "dim": 130}),
    # runtime scalars: loop bounds, slices and views read inside the kernel
    ("jagged_mean", {"num_rows": 9, "max_length": 40, "features": 37}),
    ("jagged_softmax", {"num_rows": 9, "max_length": 40, "features": 37}),
    ("segment_sum", {"n": 70, "features": 37, "num_segments": 13}),
    ("grouped_gemm", {"shapes": ((1, 1, 1), (7, 13, 37), (0, 5, 3), (33, 40, 17))}),
    ("moe", {"tokens": 13, "hidden": 20, "out_features": 7, "num_experts": 5, "top_k": 2}),
]

# (example name, sizes) checked again with every tensor input made non-contiguous.
_STRIDED: list[tuple[str, dict[str, Any]]] = [
    ("add", {"m": 7, "n": 13}),
    ("add", {"m": 5, "n": 37, "broadcast": True}),
    ("softmax", {"m": 7, "n": 13}),
    ("softmax_two_pass", {"m": 5, "n": 37}),
    ("rms_norm", {"m": 7, "n": 13}),
    ("rms_norm_bwd", {"m": 7, "n": 13}),
    ("layer_norm_fwd", {"m": 7, "n": 13}),
    ("layer_norm_bwd", {"m": 7, "n": 13}),
    ("welford", {"m": 7, "n": 13}),
    ("cross_entropy", {"n": 7, "v": 13}),
    ("embedding", {"batch": 3, "seq": 7, "vocab": 13, "dim": 37}),
    ("jagged_mean", {"num_rows": 9, "max_length": 40, "features": 37}),
    ("jagged_softmax", {"num_rows": 9, "max_length": 40, "features": 37}),
    ("segment_sum", {"n": 70, "features": 37, "num_segments": 13}),
    ("moe", {"tokens": 13, "hidden": 20, "out_features": 7, "num_experts": 5, "top_k": 2}),
]

_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_DTYPE_IDS = ["fp32", "fp16", "bf16"]

# Known compiler bugs, as (example name, sizes, reason): every dtype and layout at those sizes.
_KNOWN_BUGS: list[tuple[str, dict[str, Any], str]] = []


def _transposed(tensor: torch.Tensor) -> torch.Tensor:
    """The same values, stored column-major (2-D tensors; others unchanged)."""
    return tensor.t().contiguous().t() if tensor.dim() == 2 else tensor


def _sliced(tensor: torch.Tensor) -> torch.Tensor:
    """The same values, as a view into a larger buffer: a storage offset, a row stride wider
    than the row and an inner stride of 2. The rest of the buffer holds NaN (floats) or 0."""
    if tensor.dim() == 0:
        return tensor
    fill = float("nan") if tensor.dtype.is_floating_point else 0
    shape = [size + 1 for size in tensor.shape[:-1]] + [2 * tensor.shape[-1] + 1]
    buffer = torch.full(shape, fill, dtype=tensor.dtype, device=tensor.device)
    view = buffer[(slice(1, None),) * (tensor.dim() - 1) + (slice(1, None, 2),)]
    view.copy_(tensor)
    return view


_LAYOUTS = {"contiguous": lambda tensor: tensor, "transposed": _transposed, "sliced": _sliced}


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def _case_id(name: str, sizes: dict[str, Any]) -> str:
    return name + "-" + "-".join(f"{key}{value}" for key, value in sizes.items())


def _check(name: str, sizes: dict[str, Any], dtype: torch.dtype, layout: str, device: torch.device,
           request: pytest.FixtureRequest) -> None:
    for bug_name, bug_sizes, reason in _KNOWN_BUGS:
        if (bug_name, bug_sizes) == (name, sizes):
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    example = _EXAMPLES[name]
    change = _LAYOUTS[layout]
    inputs = tuple(change(value) if isinstance(value, torch.Tensor) else value
                   for value in example.inputs(str(device), dtype, **sizes))
    if layout != "contiguous":
        assert not all(value.is_contiguous() for value in inputs if isinstance(value, torch.Tensor))
    tolerance = example.tolerances[dtype]
    with settings.override(mode="eager"):
        eager = example.run(*inputs)
    with settings.override(mode=_mode(device)):
        generated = example.run(*inputs)
    assert_close(generated, example.reference(*inputs), tolerance, f"{name} ({_mode(device)} vs PyTorch)")
    assert_close(generated, eager, tolerance, f"{name} ({_mode(device)} vs eager)")


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize(("name", "sizes"), _SHAPES, ids=[_case_id(n, s) for n, s in _SHAPES])
def test_example_matches_pytorch_and_eager(name: str, sizes: dict[str, Any], dtype: torch.dtype,
                                           device: torch.device, request: pytest.FixtureRequest) -> None:
    _check(name, sizes, dtype, "contiguous", device, request)


@pytest.mark.parametrize("dtype", _DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
@pytest.mark.parametrize(("name", "sizes"), _STRIDED, ids=[_case_id(n, s) for n, s in _STRIDED])
def test_example_matches_pytorch_and_eager_on_non_contiguous_inputs(
        name: str, sizes: dict[str, Any], layout: str, dtype: torch.dtype, device: torch.device,
        request: pytest.FixtureRequest) -> None:
    _check(name, sizes, dtype, layout, device, request)


def test_every_pointwise_reduction_and_runtime_scalar_example_is_covered() -> None:
    covered = {name for name, _ in _SHAPES}
    assert covered == {"add", "softmax", "softmax_two_pass", "rms_norm", "rms_norm_bwd", "layer_norm_fwd", "layer_norm_bwd",
                       "welford", "cross_entropy", "embedding", "jagged_mean", "jagged_softmax", "segment_sum",
                       "grouped_gemm", "moe"}
    assert covered <= set(_EXAMPLES)
    # grouped_gemm takes lists of tensors, which the layout changes leave alone
    assert {name for name, _ in _STRIDED} == covered - {"grouped_gemm"}
