"""`tessera.experimental.backward` (issue 15, Helion's `helion.experimental.backward`): gradients
of a kernel through torch.autograd over its eager execution, checked against torch.autograd on
the PyTorch reference."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor


def sin_times(x: T, y: T) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = torch.sin(x[tile_m, tile_n]) * y[tile_m, tile_n]
    return out


def softmax_rows(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        row = x[tile_m, :]
        shifted = torch.exp(row - row.amax(dim=-1, keepdim=True))
        out[tile_m, :] = shifted / shifted.sum(dim=-1, keepdim=True)
    return out


def rms_norm(x: T, weight: T, eps: float) -> T:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        row = x[tile_m, :].to(torch.float32)
        out[tile_m, :] = row * torch.rsqrt((row * row).mean(-1, keepdim=True) + eps) * weight[None, :]
    return out


def matmul(x: T, y: T) -> T:
    out = torch.empty([x.size(0), y.size(1)], device=x.device)
    for tile_m, tile_n in hl.tile(out.size()):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(x.size(1)):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


def rows_and_sums(x: T) -> tuple[T, T]:
    out = torch.empty_like(x)
    sums = torch.empty(x.size(0), device=x.device)
    for tile_m in hl.tile(x.size(0)):
        row = x[tile_m, :]
        sums[tile_m] = row.sum(-1)
        out[tile_m, :] = row * 2
    return out, sums


def writes_its_input(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        x[tile] = x[tile] * 2
        out[tile] = torch.exp(x[tile])
    return out


CASES: list[tuple[Callable[..., Any], Callable[..., Any], list[tuple[int, ...]], tuple]] = [
    (sin_times, lambda x, y: torch.sin(x) * y, [(5, 37), (5, 37)], ()),
    (softmax_rows, lambda x: torch.softmax(x, -1), [(7, 19)], ()),
    (rms_norm, lambda x, w, eps: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w, [(3, 24), (24,)], (1e-5,)),
    (matmul, lambda x, y: x @ y, [(9, 40), (40, 6)], ()),
    (writes_its_input, lambda x: torch.exp(x * 2), [(33,)], ()),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].__name__)
def test_gradients_match_torch_autograd(case: tuple, device: torch.device) -> None:
    function, reference, shapes, extra = case
    inputs = [torch.randn(shape, device=device) for shape in shapes]
    kernel = tessera.kernel(function, config=tessera.Config(block_sizes=[4, 16, 16][:3]))
    expected_out = reference(*inputs, *extra)
    grad_out = torch.randn_like(expected_out)
    grads = tessera.experimental.backward(kernel, grad_out, *inputs, *extra)
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    reference(*leaves, *extra).backward(grad_out)
    for grad, leaf in zip(grads if isinstance(grads, tuple) else (grads,), leaves):
        torch.testing.assert_close(grad, leaf.grad, rtol=1e-4, atol=1e-4)


def test_inputs_are_left_as_they_were(device: torch.device) -> None:
    x = torch.randn(10, device=device)
    before = x.clone()
    tessera.experimental.backward(tessera.kernel(writes_its_input), torch.ones(10, device=device), x)
    assert torch.equal(x, before)


def test_several_outputs_take_a_tuple_of_output_gradients(device: torch.device) -> None:
    x = torch.randn(6, 1, device=device)
    grad_out, grad_sums = torch.randn(6, 1, device=device), torch.randn(6, device=device)
    grads, code, triton_code = tessera.experimental.backward(tessera.kernel(rows_and_sums), (grad_out, grad_sums), x,
                                                             return_code=True)
    torch.testing.assert_close(grads, 2 * grad_out + grad_sums[:, None])
    assert "backward_kernel" in code and "def rows_and_sums" in code and triton_code is None


def test_output_gradients_pair_with_the_first_outputs_and_more_are_refused() -> None:
    x = torch.randn(3, 2)
    torch.testing.assert_close(tessera.experimental.backward(tessera.kernel(rows_and_sums), torch.ones(3, 2), x),
                               torch.full((3, 2), 2.0))  # the sums get no gradient
    with pytest.raises(exc.InvalidAPIUsage, match="returns 2 tensors but 3 output gradients"):
        tessera.experimental.backward(tessera.kernel(rows_and_sums), (x, x, x), x)


def test_the_deprecated_aot_names_point_at_tessera_aot_kernel() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert tessera.experimental.aot_kernel is tessera.aot_kernel
    assert any(issubclass(w.category, DeprecationWarning) for w in seen)
    with pytest.raises(AttributeError, match="shape features"):
        tessera.experimental.make_aot_key  # noqa: B018
