"""Every example kernel, run in eager mode, agrees with PyTorch at awkward shapes.

Shapes include size 1, primes, tails of the default block size (32) and of the explicit ones,
and feature widths that are not powers of two. Each example runs in float32 and bfloat16.
A second table reruns kernels under explicit `tessera.Config(block_sizes=...)` choices, so the
results are shown not to depend on the block sizes.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
from types import ModuleType
from typing import Any

import pytest
import torch

import tessera
from examples import EXAMPLE_MODULES
from examples._harness import Example, Mismatch, assert_close

_EXAMPLES: dict[str, Example] = {
    example.name: example
    for module_name in EXAMPLE_MODULES
    for example in importlib.import_module(f"examples.{module_name}").EXAMPLES
}


@pytest.fixture(autouse=True)
def _eager_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_MODE", "eager")


# (example name, sizes): the shapes every example is checked at, in each dtype.
_SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("add", {"m": 1, "n": 1}),
    ("add", {"m": 7, "n": 13}),
    ("add", {"m": 37, "n": 200}),
    ("add", {"m": 13, "n": 1000, "broadcast": True}),
    ("softmax", {"m": 1, "n": 1}),
    ("softmax", {"m": 7, "n": 13}),
    ("softmax", {"m": 37, "n": 1000}),
    ("softmax_two_pass", {"m": 1, "n": 1}),
    ("softmax_two_pass", {"m": 7, "n": 13}),
    ("softmax_two_pass", {"m": 37, "n": 200}),
    ("rms_norm", {"m": 1, "n": 1}),
    ("rms_norm", {"m": 7, "n": 13}),
    ("rms_norm", {"m": 37, "n": 200}),
    ("rms_norm", {"m": 5, "n": 1000}),
    ("rms_norm_bwd", {"m": 1, "n": 1}),
    ("rms_norm_bwd", {"m": 37, "n": 200}),
    ("layer_norm_fwd", {"m": 1, "n": 1}),
    ("layer_norm_fwd", {"m": 7, "n": 13}),
    ("layer_norm_fwd", {"m": 37, "n": 200}),
    ("layer_norm_fwd", {"m": 5, "n": 1000}),
    ("layer_norm_bwd", {"m": 1, "n": 1}),
    ("layer_norm_bwd", {"m": 7, "n": 13}),
    ("layer_norm_bwd", {"m": 37, "n": 200}),
    ("layer_norm_bwd", {"m": 33, "n": 1000}),
    ("welford", {"m": 1, "n": 1, "correction": 0}),
    ("welford", {"m": 7, "n": 13}),
    ("welford", {"m": 37, "n": 200}),
    ("welford", {"m": 3, "n": 1000}),
    ("cross_entropy", {"n": 1, "v": 1}),
    ("cross_entropy", {"n": 7, "v": 13}),
    ("cross_entropy", {"n": 37, "v": 1000}),
    ("embedding", {"batch": 1, "seq": 1, "vocab": 1, "dim": 1}),
    ("embedding", {"batch": 3, "seq": 7, "vocab": 13, "dim": 37}),
    ("embedding", {"batch": 2, "seq": 37, "vocab": 100, "dim": 200}),
    ("jagged_mean", {"num_rows": 1, "max_length": 1, "features": 1}),
    ("jagged_mean", {"num_rows": 3, "max_length": 0, "features": 5}),
    ("jagged_mean", {"num_rows": 13, "max_length": 7, "features": 37}),
    ("jagged_mean", {"num_rows": 16, "max_length": 70, "features": 200}),
    ("jagged_softmax", {"num_rows": 1, "max_length": 1, "features": 1}),
    ("jagged_softmax", {"num_rows": 13, "max_length": 40, "features": 37}),
    ("segment_sum", {"n": 1, "features": 1, "num_segments": 1}),
    ("segment_sum", {"n": 70, "features": 37, "num_segments": 13}),
    ("matmul", {"m": 1, "k": 1, "n": 1}),
    ("matmul", {"m": 7, "k": 13, "n": 37}),
    ("matmul", {"m": 37, "k": 1, "n": 13}),
    ("matmul_bias_gelu", {"m": 1, "k": 1, "n": 1, "epilogue": True}),
    ("matmul_bias_gelu", {"m": 33, "k": 65, "n": 17, "epilogue": True}),
    ("split_k_matmul", {"m": 1, "k": 1, "n": 1, "splits": 1}),
    ("split_k_matmul", {"m": 7, "k": 70, "n": 37, "splits": 3}),
    ("split_k_matmul", {"m": 33, "k": 200, "n": 17, "splits": 8}),
    ("bmm", {"batch": 1, "m": 1, "k": 1, "n": 1}),
    ("bmm", {"batch": 3, "m": 7, "k": 13, "n": 37}),
    ("bmm", {"batch": 2, "m": 33, "k": 40, "n": 17}),
    ("grouped_gemm", {"shapes": ((1, 1, 1),)}),
    ("grouped_gemm", {"shapes": ((7, 13, 37), (1, 5, 3), (33, 40, 17))}),
    ("moe", {"tokens": 1, "hidden": 1, "out_features": 1, "num_experts": 1, "top_k": 1}),
    ("moe", {"tokens": 13, "hidden": 20, "out_features": 7, "num_experts": 5, "top_k": 2}),
    ("attention", {"batch": 1, "heads": 1, "m": 1, "n": 1, "head_dim": 8}),
    ("attention", {"batch": 2, "heads": 3, "m": 7, "n": 13, "head_dim": 16}),
    ("attention", {"batch": 1, "heads": 2, "m": 37, "n": 40, "head_dim": 24}),
    ("attention_causal", {"batch": 1, "heads": 1, "m": 1, "n": 1, "head_dim": 8, "causal": True}),
    ("attention_causal", {"batch": 1, "heads": 2, "m": 37, "n": 37, "head_dim": 32, "causal": True}),
    ("attention_causal", {"batch": 2, "heads": 1, "m": 13, "n": 40, "head_dim": 16, "causal": True}),
]


def _case_id(name: str, sizes: dict[str, Any]) -> str:
    return name + "-" + "-".join(f"{key}{value}" for key, value in sizes.items()).replace(" ", "")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("name", "sizes"), _SHAPES, ids=[_case_id(n, s) for n, s in _SHAPES])
def test_example_matches_pytorch(name: str, sizes: dict[str, Any], dtype: torch.dtype,
                                 device: torch.device) -> None:
    _EXAMPLES[name].check(str(device), dtype, **sizes)


def test_every_example_is_covered_by_the_shape_table() -> None:
    assert {name for name, _ in _SHAPES} == set(_EXAMPLES)


# (example name, module, kernel attribute, block sizes, sizes): block sizes that give full
# tiles, tails, tiles of one element and blocks larger than the whole extent.
_CONFIGS: list[tuple[str, str, str, list[int], dict[str, Any]]] = [
    ("add", "add", "add", [4, 8], {"m": 13, "n": 37}),
    ("add", "add", "add", [64, 1], {"m": 7, "n": 5}),
    ("softmax", "softmax", "softmax", [2], {"m": 7, "n": 200}),
    ("softmax_two_pass", "softmax", "softmax_two_pass", [4, 16, 8], {"m": 9, "n": 37}),
    ("softmax_two_pass", "softmax", "softmax_two_pass", [1, 256, 2], {"m": 3, "n": 200}),
    ("rms_norm", "rms_norm", "rms_norm", [8], {"m": 37, "n": 200}),
    ("layer_norm_fwd", "layer_norm", "layer_norm_fwd", [4], {"m": 13, "n": 200}),
    ("layer_norm_bwd", "layer_norm", "layer_norm_bwd", [4, 2], {"m": 13, "n": 200}),
    ("layer_norm_bwd", "layer_norm", "layer_norm_bwd", [8, 16], {"m": 37, "n": 13}),
    ("layer_norm_bwd", "layer_norm", "layer_norm_bwd", [64, 1], {"m": 5, "n": 100}),
    ("welford", "welford", "welford", [4, 16], {"m": 13, "n": 200}),
    ("welford", "welford", "welford", [2, 1], {"m": 3, "n": 7}),
    ("cross_entropy", "cross_entropy", "cross_entropy_losses", [8], {"n": 37, "v": 200}),
    ("embedding", "embedding", "embedding", [4, 16], {"batch": 3, "seq": 7, "vocab": 13, "dim": 37}),
    ("jagged_mean", "jagged_mean", "jagged_mean", [16, 4], {"num_rows": 13, "max_length": 9, "features": 37}),
    ("matmul", "matmul", "matmul", [16, 8, 4], {"m": 37, "k": 13, "n": 20}),
    ("matmul_bias_gelu", "matmul", "matmul", [1, 64, 8], {"m": 7, "k": 37, "n": 13, "epilogue": True}),
    ("split_k_matmul", "split_k_matmul", "split_k_matmul_kernel", [8, 16, 4],
     {"m": 13, "k": 100, "n": 37, "splits": 4}),
    ("bmm", "bmm", "bmm", [8, 16, 4], {"batch": 3, "m": 13, "k": 7, "n": 37}),
    ("grouped_gemm", "grouped_gemm", "grouped_gemm_impl", [8, 16, 4],
     {"shapes": ((7, 13, 37), (1, 5, 3), (33, 40, 17))}),
    ("attention", "attention", "attention", [16, 8],
     {"batch": 1, "heads": 2, "m": 37, "n": 13, "head_dim": 16}),
    ("attention_causal", "attention", "attention", [8, 16],
     {"batch": 1, "heads": 3, "m": 37, "n": 37, "head_dim": 16, "causal": True}),
]


def _with_config(monkeypatch: pytest.MonkeyPatch, example: Example, module: ModuleType, attribute: str,
                 block_sizes: list[int]) -> Example:
    """The example with one of its kernels rebuilt under an explicit Config."""
    original: tessera.Kernel = getattr(module, attribute)
    configured = tessera.kernel(original.fn, config=tessera.Config(block_sizes=block_sizes), mode="eager")
    monkeypatch.setattr(module, attribute, configured)  # host wrappers look the kernel up here
    return dataclasses.replace(example, run=configured) if example.run is original else example


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("name", "module_name", "attribute", "block_sizes", "sizes"), _CONFIGS,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[3]))}" for c in _CONFIGS])
def test_example_matches_pytorch_with_explicit_block_sizes(
        name: str, module_name: str, attribute: str, block_sizes: list[int], sizes: dict[str, Any],
        dtype: torch.dtype, device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"examples.{module_name}")
    example = _with_config(monkeypatch, _EXAMPLES[name], module, attribute, block_sizes)
    example.check(str(device), dtype, **sizes)


def test_add_tiles_every_dimension_of_a_3d_tensor(device: torch.device) -> None:
    from examples.add import add

    x = torch.randn(3, 5, 7, device=device)
    y = torch.randn(5, 1, device=device)
    assert_close(add(x, y), x + y, (0.0, 0.0), "add")


def test_add_promotes_mixed_dtypes_like_pytorch(device: torch.device) -> None:
    from examples.add import add

    x = torch.randn(7, 13, device=device, dtype=torch.bfloat16)
    y = torch.randn(7, 13, device=device, dtype=torch.float32)
    assert_close(add(x, y), x + y, (0.0, 0.0), "add")


def test_layer_norm_bwd_partial_buffers_hold_one_row_per_block(device: torch.device,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # With m_block = 4, 13 rows make 4 blocks (the last one a single row); the host-side sum
    # of the partial buffers must still equal the full reduction.
    from examples import layer_norm

    example = _with_config(monkeypatch, layer_norm.BWD_EXAMPLE, layer_norm, "layer_norm_bwd", [4, 4])
    grad_out, x, mean, rstd, weight = example.inputs(str(device), torch.float32, m=13, n=7)
    _, grad_weight, grad_bias = example.run(grad_out, x, mean, rstd, weight)
    assert_close(grad_bias, grad_out.sum(dim=0), (1e-5, 1e-5), "grad_bias")
    x_hat = (x - mean[:, None]) * rstd[:, None]
    assert_close(grad_weight, (grad_out * x_hat).sum(dim=0), (1e-5, 1e-5), "grad_weight")


def test_grouped_gemm_writes_each_group_to_its_own_slice_of_the_flat_output(device: torch.device) -> None:
    from examples.grouped_gemm import grouped_gemm_impl

    # Two groups, 2x3 @ 3x1 and 1x2 @ 2x2, laid out flat as the seed kernel expects.
    A0, B0 = torch.arange(6.0, device=device).reshape(2, 3), torch.ones(3, 1, device=device)
    A1, B1 = torch.tensor([[1.0, 2.0]], device=device), torch.tensor([[1.0, 0.0], [0.0, 3.0]], device=device)
    flat_a = torch.cat([A0.reshape(-1), A1.reshape(-1)])
    flat_b = torch.cat([B0.reshape(-1), B1.reshape(-1)])
    flat_c = torch.full((4,), float("nan"), device=device)
    sizes = torch.tensor([2, 1, 3, 0, 0, 0, 1, 2, 2, 6, 3, 2], dtype=torch.int32, device=device)
    grouped_gemm_impl(flat_a, flat_b, flat_c, sizes, torch.empty(2, device=device))
    assert flat_c.tolist() == [3.0, 12.0, 1.0, 6.0]


def test_jagged_mean_gives_zero_for_empty_rows(device: torch.device) -> None:
    from examples.jagged_mean import jagged_mean

    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device=device)
    offsets = torch.tensor([0, 0, 2, 2, 3], device=device)
    expected = torch.tensor([[0.0, 0.0], [2.0, 3.0], [0.0, 0.0], [5.0, 6.0]], device=device)
    assert_close(jagged_mean(values, offsets), expected, (0.0, 0.0), "jagged_mean")


def test_a_wrong_kernel_result_is_reported_as_a_mismatch() -> None:
    example = dataclasses.replace(_EXAMPLES["add"], run=lambda x, y: x - y)
    with pytest.raises(Mismatch, match="differs from PyTorch"):
        example.check("cpu", torch.float32, m=3, n=4)


def test_gallery_prints_a_table_and_exits_zero_when_all_agree(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from examples import gallery

    monkeypatch.setenv("TESSERA_MODE", "eager")  # restored afterwards; the gallery sets it too
    assert gallery.main(["--mode", "eager", "--device", "cpu", "--only", "add", "softmax"]) == 0
    printed = capsys.readouterr()
    table = printed.out.splitlines()
    # progress on stderr, one line per example as it finishes, so a long gallery never looks hung
    assert re.findall(r"^\[(\d)/2\] (\w+) \(eager, cpu\) \.\.\. yes in [\d.]+ s$", printed.err, re.M) == [
        ("1", "add"), ("2", "softmax")]
    assert [cell.strip() for cell in table[0].split("|")] == [
        "kernel", "sizes", "dtype", "mode", "device", "correct", "max err", "tessera ms", "torch ms"]
    rows = [line for line in table[2:] if "|" in line]
    assert [line.split()[0] for line in rows] == ["add", "softmax"]
    assert all("| yes" in line and "| float32" in line for line in rows)
    assert "say nothing about GPU speed" in table[-1]
