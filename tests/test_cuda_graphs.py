"""Compiled kernels on CUDA streams and in CUDA graphs (run with `pytest --device cuda`).

A launch goes to `torch.cuda.current_stream()` (the launcher asks Triton's driver for the current
stream, which is torch's), so a kernel called under `torch.cuda.stream(s)` is ordered after the
work queued on `s` before it. A call whose variant is compiled and whose Config is chosen (a
cache hit) does no device synchronization and no compilation, so `torch.cuda.graph` can capture
it; replaying the graph reruns the captured launch on whatever the captured input tensors hold
then. A first call (compiles), a tuning call, host code reading tensor values, and launches under
TESSERA_CHECK_INDICES=1 (a sync per launch) cannot be captured.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl


@pytest.fixture
def cuda(device: torch.device) -> torch.device:
    if device.type != "cuda":
        pytest.skip("CUDA streams and graphs need a GPU (pytest --device cuda)")
    return device


@tessera.kernel(autotune_effort="none")
def scaled_sum(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] * scale + y[tile]
    return out


@tessera.kernel(autotune_effort="none")
def row_sums(x: torch.Tensor) -> torch.Tensor:
    m, _ = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m] = x[tile_m, :].to(torch.float32).sum(dim=1)
    return out


def _warm_up(function, *args) -> None:
    """Compile outside the capture, on a side stream as torch advises before capturing."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            function(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def test_launch_is_ordered_on_the_current_stream(cuda):
    x = torch.randn(1 << 20, device=cuda)
    y = torch.randn(1 << 20, device=cuda)
    scaled_sum(x, y, 2.0)  # compile first
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # keeps `stream` busy: a launch on another stream would overtake it
        source = x * 3  # written on `stream` after the sleep
        out = scaled_sum(source, y, 2.0)
    stream.synchronize()
    torch.testing.assert_close(out, x * 6 + y)


@pytest.mark.parametrize("size", [1, 1000, 1 << 16])
def test_cache_hit_is_captured_and_replayed_with_new_values(cuda, size):
    x = torch.randn(size, device=cuda)
    y = torch.randn(size, device=cuda)
    _warm_up(scaled_sum, x, y, 0.5)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = scaled_sum(x, y, 0.5)
    for _ in range(3):
        x.copy_(torch.randn(size, device=cuda))
        y.copy_(torch.randn(size, device=cuda))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x * 0.5 + y)


def test_captured_whole_row_reduction_replays(cuda):
    x = torch.randn(37, 1000, device=cuda, dtype=torch.bfloat16)
    _warm_up(row_sums, x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = row_sums(x)
    x.copy_(torch.randn(37, 1000, device=cuda, dtype=torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x.float().sum(dim=1), rtol=1e-4, atol=1e-3)


def test_captured_examples_with_backward_replay(cuda):
    from examples.softmax import softmax

    x = torch.randn(64, 100, device=cuda, requires_grad=True)
    grad_out = torch.randn(64, 100, device=cuda)

    def step() -> torch.Tensor:
        (grad,) = torch.autograd.grad(softmax(x), x, grad_out)
        return grad

    _warm_up(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grad = step()
    with torch.no_grad():
        x.copy_(torch.randn(64, 100, device=cuda))
    graph.replay()
    torch.cuda.synchronize()
    (expected,) = torch.autograd.grad(torch.softmax(x, dim=1), x, grad_out)
    torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)
