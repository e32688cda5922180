"""`@kernel.backward`: kernels with gradient rules made of Tessera kernels (runtime/autograd.py).

`torch.autograd.gradcheck` checks the examples' rules in float64 in eager and interpret modes
(the interpreter computes float64 as float64); on the test device, float32 gradients are checked
against PyTorch's own.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from examples.layer_norm import layer_norm, layer_norm_fwd
from examples.rms_norm import rms_norm
from examples.softmax import softmax
from tessera import exc, settings

# gradcheck's full (not fast) mode: two calls per input element, so the interpreter gets small
# shapes (its fast mode, one random projection, let a rule 5% off pass for softmax)
CASES = [(mode, shape) for mode in ("eager", "interpret") for shape in ((1, 1), (1, 7), (3, 5))] + [
    ("eager", (9, 16)), ("eager", (17, 32))]


@pytest.mark.parametrize("mode, shape", CASES)
def test_softmax_gradcheck_float64(mode, shape):
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    with settings.override(mode=mode):
        assert torch.autograd.gradcheck(softmax, (x,))


@pytest.mark.parametrize("mode, shape", CASES)
def test_layer_norm_gradcheck_float64(mode, shape):
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.randn(shape[1], dtype=torch.float64, requires_grad=True)
    with settings.override(mode=mode):
        assert torch.autograd.gradcheck(layer_norm, (x, weight, bias))


def test_softmax_gradients_match_torch(device):
    x = torch.randn(37, 100, device=device, requires_grad=True)
    grad_out = torch.randn(37, 100, device=device)
    (actual,) = torch.autograd.grad(softmax(x), x, grad_out)
    (expected,) = torch.autograd.grad(torch.softmax(x, dim=1), x, grad_out)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def test_layer_norm_gradients_match_torch(device):
    x = torch.randn(37, 100, device=device, requires_grad=True)
    weight = torch.randn(100, device=device, requires_grad=True)
    bias = torch.randn(100, device=device, requires_grad=True)
    grad_out = torch.randn(37, 100, device=device)
    actual = torch.autograd.grad(layer_norm(x, weight, bias), (x, weight, bias), grad_out)
    reference = torch.nn.functional.layer_norm(x, (100,), weight, bias, 1e-5)
    expected = torch.autograd.grad(reference, (x, weight, bias), grad_out)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 1), (37, 100), (70, 33)])
def test_rms_norm_gradients_match_torch(device, shape):
    # rms_norm computes in float32 (a float64 gradcheck would measure its forward's rounding)
    x = torch.randn(*shape, device=device, requires_grad=True)
    weight = torch.randn(shape[1], device=device, requires_grad=True)
    grad_out = torch.randn(*shape, device=device)
    actual = torch.autograd.grad(rms_norm(x, weight, 1e-5), (x, weight), grad_out)
    expected = torch.autograd.grad(torch.nn.functional.rms_norm(x, (shape[1],), weight, 1e-5), (x, weight), grad_out)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_saved_statistics_get_no_gradient(device):
    x = torch.randn(4, 8, device=device, requires_grad=True)
    weight, bias = torch.ones(8, device=device), torch.zeros(8, device=device)
    out, mean, rstd = layer_norm_fwd(x, weight, bias)
    assert out.requires_grad
    assert not mean.requires_grad and not rstd.requires_grad


def test_call_needing_no_gradient_records_nothing(device):
    x = torch.randn(4, 8, device=device)
    assert softmax(x).grad_fn is None
    with torch.no_grad():
        assert softmax(x.requires_grad_()).grad_fn is None


@tessera.kernel
def _double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        out[tile] = x[tile] * 2
    return out


@tessera.kernel
def _scaled_copy(x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        out[tile] = x[tile] * scale
    return out


@_scaled_copy.backward
def _scaled_copy_backward(ctx: tessera.BackwardContext, grad_out: torch.Tensor) -> tuple:
    return _scaled_copy(grad_out, ctx.inputs[1]), None


def test_rule_sees_non_tensor_arguments(device):
    x = torch.randn(10, device=device, requires_grad=True)
    (grad,) = torch.autograd.grad(_scaled_copy(x, 3.0).sum(), x)
    torch.testing.assert_close(grad, torch.full_like(x, 3.0))


def test_rule_returning_too_few_gradients_is_an_error(device):
    kernel = tessera.kernel(_scaled_copy.fn)
    kernel.backward(lambda ctx, grad_out: grad_out)  # one gradient for two positional arguments
    x = torch.randn(4, device=device, requires_grad=True)
    with pytest.raises(exc.KernelArgumentError, match="returned 1 gradients for 2 positional arguments"):
        kernel(x, 2.0).sum().backward()


def test_rule_giving_a_number_a_gradient_is_an_error(device):
    kernel = tessera.kernel(_scaled_copy.fn)
    kernel.backward(lambda ctx, grad_out: (grad_out, grad_out))
    x = torch.randn(4, device=device, requires_grad=True)
    with pytest.raises(exc.KernelArgumentError, match="argument 1, which is not a tensor"):
        kernel(x, 2.0).sum().backward()


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_float64_square_roots_are_float64(mode):
    @tessera.kernel(mode=mode)
    def roots(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size()):
            out[tile] = torch.sqrt(x[tile]) + torch.rsqrt(x[tile])
        return out

    x = torch.rand(37, dtype=torch.float64) + 0.5
    torch.testing.assert_close(roots(x), torch.sqrt(x) + torch.rsqrt(x), rtol=1e-15, atol=0)
