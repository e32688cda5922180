"""Tessera kernels inside `torch.compile(fullgraph=True)`: no graph break, the same results.

Each kernel call stays one node in dynamo's graph and becomes a `torch.library` custom op under
AOTAutograd (runtime/torch_library.py): its fake implementation runs the host code with the tile
loops skipped, and tensors the tile loops store into are declared mutated. `backend="eager"` runs
dynamo's graph as is, `"aot_eager"` adds AOTAutograd (functionalization, the custom ops),
`"inductor"` (once, it is slow on CPU) compiles the torch code around the kernels.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from examples.layer_norm import layer_norm, layer_norm_fwd
from examples.softmax import softmax
from tessera.runtime.torch_library import custom_ops

BACKENDS = ["eager", "aot_eager"]


@tessera.kernel
def scale_rows(x: torch.Tensor, scale: float) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = x[tile_m, tile_n] * scale
    return out


@tessera.kernel
def add_into(target: torch.Tensor, other: torch.Tensor) -> None:
    for tile in hl.tile(target.size()):
        target[tile] = target[tile] + other[tile]


@tessera.kernel
def add_into_returning(target: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(target.size()):
        target[tile] = target[tile] + other[tile]
    return target


def _graph_breaks(function, *args) -> int:
    torch._dynamo.reset()
    return torch._dynamo.explain(function)(*args).graph_break_count


def _softmax_twice(x: torch.Tensor) -> torch.Tensor:
    return softmax(x * 2) + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 5), (9, 13), (64, 100)])
def test_kernel_inside_fullgraph_matches_uncompiled(backend, shape, device):
    x = torch.randn(*shape, device=device)
    expected = _softmax_twice(x)  # also imports Triton in this machine's mode before dynamo does
    compiled = torch.compile(_softmax_twice, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), expected)


def test_kernel_call_makes_no_graph_break(device):
    x = torch.randn(9, 13, device=device)
    _softmax_twice(x)
    assert _graph_breaks(_softmax_twice, x) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_argument_and_tuple_result_pass_through(backend, device):
    x = torch.randn(7, 11, device=device)
    weight, bias = torch.randn(11, device=device), torch.randn(11, device=device)

    def program(x, weight, bias):
        out, mean, rstd = layer_norm_fwd(x, weight, bias, 1e-5)
        return scale_rows(out, 0.5), mean, rstd

    expected = program(x, weight, bias)
    actual = torch.compile(program, backend=backend, fullgraph=True)(x, weight, bias)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_writing_into_an_input_is_seen_by_the_graph(backend, device):
    x, y = torch.randn(33, device=device), torch.randn(33, device=device)

    def program(x, y):
        total = x.clone()
        add_into(total, y)
        return total * 3  # reads the written tensor: the mutation must be ordered before it

    expected = program(x, y)
    torch.testing.assert_close(torch.compile(program, backend=backend, fullgraph=True)(x, y), expected)
    torch.testing.assert_close(expected, (x + y) * 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_returning_the_input_it_wrote(backend, device):
    x, y = torch.randn(5, 6, device=device), torch.randn(5, 6, device=device)

    def program(x, y):
        return add_into_returning(x.clone(), y) - y

    torch.testing.assert_close(torch.compile(program, backend=backend, fullgraph=True)(x, y), x)


def test_mutated_arguments_are_declared_from_the_trace(device):
    x, y = torch.randn(8, device=device), torch.randn(8, device=device)
    torch.compile(lambda a, b: add_into(a.clone(), b), backend="aot_eager", fullgraph=True)(x, y)
    torch.compile(lambda a: scale_rows(a, 2.0), backend="aot_eager", fullgraph=True)(x[None])
    (mutating,) = custom_ops(add_into)
    (pure,) = custom_ops(scale_rows)
    assert mutating.mutated == (0,)
    assert pure.mutated == ()
    written = [argument.alias_info is not None and argument.alias_info.is_write
               for argument in mutating.overload._schema.arguments]
    assert written == [True, False]
    assert all(argument.alias_info is None for argument in pure.overload._schema.arguments)


def test_custom_op_runs_outside_compile_as_the_kernel(device):
    x = torch.randn(4, 9, device=device)
    torch.compile(lambda a: scale_rows(a, 2.0), backend="aot_eager", fullgraph=True)(x)
    (op,) = custom_ops(scale_rows)
    torch.testing.assert_close(op.overload(x, 3.0), x * 3.0)


def test_dynamic_shapes_reuse_the_graph(device):
    fresh = tessera.kernel(add_into.fn)  # its op is registered on symbolic sizes

    def program(x, y):
        total = torch.softmax(x, dim=1)
        fresh(total, y)
        return total

    compiled = torch.compile(program, backend="aot_eager", fullgraph=True, dynamic=True)
    for rows, columns in [(3, 7), (10, 7), (5, 21)]:
        x, y = torch.randn(rows, columns, device=device), torch.randn(rows, columns, device=device)
        torch.testing.assert_close(compiled(x, y), program(x, y))
    assert [op.mutated for op in custom_ops(fresh)] == [(0,)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_kernels_with_backwards(backend, device):
    x = torch.randn(6, 10, device=device, requires_grad=True)
    weight = torch.randn(10, device=device, requires_grad=True)
    bias = torch.randn(10, device=device, requires_grad=True)

    def loss(x, weight, bias):
        return (softmax(x) * torch.arange(10.0, device=x.device)).sum() + layer_norm(x, weight, bias).square().sum()

    expected = torch.autograd.grad(loss(x, weight, bias), (x, weight, bias))
    compiled = torch.compile(loss, backend=backend, fullgraph=True)
    actual = torch.autograd.grad(compiled(x, weight, bias), (x, weight, bias))
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want)


def test_inductor_compiles_the_code_around_a_kernel(device):
    x = torch.randn(9, 13, device=device)
    expected = _softmax_twice(x)
    torch.testing.assert_close(torch.compile(_softmax_twice, fullgraph=True)(x), expected)


@pytest.mark.parametrize("requested, cuda, interpreted", [
    ("interpret", True, True),    # TESSERA_MODE=interpret on a GPU machine (was: Triton imported compiled)
    ("compiled", False, False),
    (None, True, False),          # no mode asked for: the device decides
    (None, False, True),
    ("eager", True, False),       # eager runs no generated code: the device decides
])
def test_triton_is_imported_as_the_waiting_kernels_will_run(requested, cuda, interpreted, monkeypatch):
    """When dynamo's import pulls in Triton, its interpreter is chosen for the mode the defined
    kernels ask for, not only by whether CUDA is present."""
    from tessera.runtime import torch_library

    @tessera.kernel(mode=requested)
    def add_one(x):
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + 1.0
        return out

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.delenv("TESSERA_MODE", raising=False)
    assert torch_library._kernels_run_interpreted([add_one]) is interpreted
