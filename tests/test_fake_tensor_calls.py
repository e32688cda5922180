"""A kernel called on fake tensors (torch.compile's shape inference, a custom op's fake
implementation), their sizes symbolic: the host code runs on them, so the outputs have the shapes
the host code gives them, and no kernel runs (a fake tensor has no data)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def add_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        out[tile] = x[tile] + y[tile]
    return out


def _symbolic_fakes(*shapes: tuple[int, ...]) -> tuple[list[torch.Tensor], FakeTensorMode]:
    # torch._dynamo imports triton: an interpret-mode call first imports it with its interpreter
    tessera.kernel(add_rows, mode="interpret")(torch.zeros(1, 1), torch.zeros(1, 1))
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    tensors = []
    with mode:
        for number, shape in enumerate(shapes):
            sizes = []
            for dim, size in enumerate(shape):
                source = ConstantSource(f"arg{number}_size{dim}")
                symbol = env.create_symbol(size, source, dynamic_dim=DimDynamic.DYNAMIC)
                sizes.append(env.create_symintnode(symbol, hint=size, source=source))
            tensors.append(torch.empty(sizes, dtype=torch.float16))
    return tensors, mode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (64, 3)])
def test_a_call_on_symbolic_fake_tensors_gives_a_fake_output_of_the_host_codes_shape(mode, shape):
    (x, y), fake_mode = _symbolic_fakes(shape, shape)
    kernel = tessera.kernel(add_rows, mode=mode)
    with fake_mode:
        result = kernel(x, y)
    assert isinstance(result, FakeTensor)
    assert result.shape == x.shape and result.dtype == x.dtype


@pytest.mark.parametrize("mode", MODES)
def test_compile_config_runs_on_fake_tensors_and_takes_helions_launcher_hook(mode):
    (x, y), fake_mode = _symbolic_fakes((5, 9), (5, 9))
    kernel = tessera.kernel(add_rows, mode=mode)
    with fake_mode:
        bound = kernel.bind((x, y))
        run = bound.compile_config(bound.config_spec.default_config())
        result = run(x, y, _launcher=lambda *args, **kwargs: None)
    assert result.shape == x.shape


def test_a_real_call_after_fake_ones_computes_and_the_launcher_hook_is_refused_on_real_tensors():
    (x, y), fake_mode = _symbolic_fakes((6, 4), (6, 4))
    kernel = tessera.kernel(add_rows, mode="interpret")
    with fake_mode:
        kernel(x, y)
    a, b = torch.randn(6, 4), torch.randn(6, 4)
    torch.testing.assert_close(kernel(a, b), a + b)
    bound = kernel.bind((a, b))
    with pytest.raises(tessera.exc.UnsupportedOperationError, match="_launcher"):
        bound.compile_config(bound.config_spec.default_config())(a, b, _launcher=lambda *args: None)


@pytest.mark.parametrize("mode", MODES)
def test_compile_config_runs_on_fake_tensors_of_data_dependent_sizes(mode):
    """Unbacked sizes (no example value, a known range) trace at a value of their range."""
    tessera.kernel(add_rows, mode="interpret")(torch.zeros(1, 1), torch.zeros(1, 1))  # Triton first, interpreted
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    env = ShapeEnv()
    fake_mode = FakeTensorMode(shape_env=env)
    kernel = tessera.kernel(add_rows, mode=mode)
    with fake_mode:
        sizes = []
        for _ in range(2):
            size = env.create_unbacked_symint()
            torch._check(size >= 2)
            torch._check(size <= 4096)
            sizes.append(size)
        x, y = torch.empty(sizes, dtype=torch.float16), torch.empty(sizes, dtype=torch.float16)
        bound = kernel.bind((x, y))
        result = bound.compile_config(bound.config_spec.default_config())(x, y, _launcher=lambda *a, **k: None)
    assert result.shape == x.shape
