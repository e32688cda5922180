"""Behaviours Helion's own unit tests rely on (issue 15, run through `benchmarks/helion_tests.py`):
each test here is Tessera's own statement of one behaviour a Helion user meets, in eager and
interpret modes against PyTorch."""
from __future__ import annotations

import functools

import pytest
import torch

import tessera
import tessera.language as hl
from test_helion_surface import add_one

MODES = ("eager", "interpret")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (16, 3)])
def test_one_block_size_applies_to_every_dimension_of_a_multi_dim_tile(mode, shape):
    @tessera.kernel(mode=mode)
    def scale(x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n], block_size=2):
            out[tile_m, tile_n] = x[tile_m, tile_n] * 2.0 + tile_n.block_size
        return out

    x = torch.randn(shape)
    torch.testing.assert_close(scale(x), x * 2.0 + 2)


def test_block_sizes_that_match_neither_one_nor_every_dimension_are_refused():
    @tessera.kernel(mode="eager")
    def three(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(), block_size=[2, 4]):
            out[tile] = x[tile]
        return out

    with pytest.raises(tessera.exc.TesseraError, match="2 block sizes for 3 dimensions"):
        three(torch.zeros(2, 3, 4))


@pytest.mark.parametrize("mode", MODES)
def test_a_transposed_square_tile_value_feeds_a_product_over_the_other_tile(mode):
    """`w[tile_n, tile_k].T` is [tile_k, tile_n] though both tiles have one size (Helion's se_block backward)."""
    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[16, 16, 16]))
    def grad_x(g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        m, n = g.size()
        out = torch.empty([m, n], dtype=torch.float32, device=g.device)
        for tile_m, tile_n in hl.tile([m, n]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(n):
                acc += (2.0 * g[tile_m, tile_k]) @ w[tile_n, tile_k].T
            out[tile_m, tile_n] = acc
        return out

    g, w = torch.randn(33, 40), torch.randn(40, 40)
    torch.testing.assert_close(grad_x(g, w), 2.0 * g @ w.T, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("view", ["T", "mT", "t", "transpose", "permute"])
def test_a_transposed_square_tile_value_broadcasts_by_its_moved_tiles(mode, view):
    transposes = {"T": lambda v: v.T, "mT": lambda v: v.mT, "t": lambda v: v.t(),
                  "transpose": lambda v: v.transpose(0, 1), "permute": lambda v: v.permute(1, 0)}
    transpose = transposes[view]

    @tessera.kernel(mode=mode, config=tessera.Config(block_sizes=[4, 4]))
    def add_row(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        m, n = v.size()
        out = torch.empty([n, m], dtype=v.dtype, device=v.device)
        for tile_m, tile_n in hl.tile([m, n]):
            out[tile_n, tile_m] = transpose(v[tile_m, tile_n]) + x[tile_n]  # x stands along tile_n
        return out

    v, x = torch.randn(7, 7), torch.randn(7)
    torch.testing.assert_close(add_row(v, x), v.T + x[:, None])


def test_bind_gives_one_bound_kernel_per_specialization_key():
    kernel = tessera.kernel(add_one, mode="interpret")
    x = torch.randn(37)
    bound = kernel.bind((x,))
    assert kernel.bind((torch.zeros_like(x),)) is bound
    assert kernel.bind(torch.zeros_like(x)) is bound  # the unpacked spelling binds the same arguments
    assert kernel.bind((torch.randn(40),)) is bound  # dynamic shapes: one size bucket, one bound kernel
    assert kernel.bind((x.double(),)) is not bound
    assert kernel.bind((torch.randn(1),)) is not bound  # a size-1 dim broadcasts: another bucket
    assert kernel.specialization_key((x,)) == kernel.specialization_key((torch.randn(40),))


def test_under_static_shapes_each_size_binds_its_own_kernel():
    kernel = tessera.kernel(add_one, mode="interpret", static_shapes=True)
    x = torch.randn(37)
    assert kernel.bind((x,)) is kernel.bind((torch.zeros_like(x),))
    assert kernel.bind((x,)) is not kernel.bind((torch.randn(38),))


def test_a_kept_bound_kernel_runs_the_arguments_bound_last():
    kernel = tessera.kernel(add_one, mode="interpret")
    first, second = torch.randn(37), torch.randn(33)
    bound = kernel.bind((first,))
    assert kernel.bind((second,)) is bound
    torch.testing.assert_close(bound.run(tessera.Config(block_sizes=[16])), second + 1)


def test_a_changed_setting_forgets_the_bound_kernels_and_the_tuner_binds_its_own():
    kernel = tessera.kernel(add_one, mode="interpret")
    x = torch.randn(37)
    bound = kernel.bind((x,))
    assert kernel.bind_arguments((x,), {}) is not bound  # a copy of its own, not the kept one
    kernel.settings.static_shapes = True
    assert kernel.bind((x,)) is not bound


@pytest.mark.parametrize("mode", MODES)
def test_a_key_function_joins_the_key_configs_are_chosen_by(mode):
    state = {"v": 0}
    kernel = tessera.kernel(add_one, mode=mode, key=lambda x: state["v"])
    x = torch.randn(37)
    first = kernel.bind((x,))
    torch.testing.assert_close(kernel(x), x + 1)
    torch.testing.assert_close(kernel(x), x + 1)
    state["v"] = 1
    assert kernel.bind((x,)) is not first
    torch.testing.assert_close(kernel(x), x + 1)
    if mode == "interpret":  # one choice per key value (eager mode chooses none)
        assert len(kernel.config_choices) == 2
    assert kernel.specialization_key((x,)) != (state.update(v=0) or kernel.specialization_key((x,)))


def test_a_key_that_is_not_a_function_is_refused():
    with pytest.raises(tessera.exc.ConfigError, match="key=3"):
        tessera.kernel(add_one, key=3)


def apply_to_tiles(function, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = function(x[tile])
    return out


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(20))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("module, kind", [(torch.nn.Linear(20, 20), "call_module"), (_Scaled(), "get_attr")])
def test_a_graph_module_that_reads_module_state_is_refused_by_name(mode, module, kind):
    graph = torch.fx.symbolic_trace(torch.nn.Sequential(module) if kind == "call_module" else module)
    with pytest.raises(tessera.exc.GraphModuleUnsupportedOps, match=kind):
        tessera.kernel(apply_to_tiles, mode=mode)(graph, torch.randn(20))


@pytest.mark.parametrize("mode", MODES)
def test_a_pure_graph_module_runs_on_tile_values(mode):
    graph = torch.fx.symbolic_trace(lambda x: torch.sin(x + 1))
    x = torch.randn(37)
    torch.testing.assert_close(tessera.kernel(apply_to_tiles, mode=mode)(graph, x), torch.sin(x + 1))


def doubled_windows(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([x.size(0) * 2], dtype=torch.int32, device=x.device)
    ones = torch.ones_like(out)
    for tile in hl.tile(x.size(0)):
        start = tile.begin * 2
        out[start:start + tile.block_size * 2] = ones[start:start + tile.block_size * 2]
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("static_shapes", [False, True])
@pytest.mark.parametrize("size", [1, 37, 64])
def test_a_slice_window_without_tiles_moves_with_the_tile(mode, static_shapes, size):
    """`t[s : s + 2 * block]` with `s` moving with the tile is a window of 2 * block lanes, masked
    past the dimension's end, whether or not a tile indexes the tensor too (Helion's slices of block multiples)."""
    kernel = tessera.kernel(doubled_windows, mode=mode, static_shapes=static_shapes,
                            config=tessera.Config(block_sizes=[16]))
    torch.testing.assert_close(kernel(torch.randn(size)), torch.ones(2 * size, dtype=torch.int32))


def one_element_windows(src: torch.Tensor, dst: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    for i in hl.grid(src.size(0) - 1):
        dst[i:i + 1] = 1.0 + i
        src[i] = dst[i:i + 1] * 2  # a one-element value into one element: its leading dim goes, as in torch
    return src, dst


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [2, 9])
def test_a_one_element_window_is_written_and_read_per_grid_index(mode, size):
    src, dst = tessera.kernel(one_element_windows, mode=mode)(torch.zeros(size), torch.zeros(size))
    expected = torch.arange(1.0, size + 1)
    expected[-1] = 0.0
    torch.testing.assert_close(dst, expected)
    torch.testing.assert_close(src, expected * 2)


def add_scalar_tensors(x: torch.Tensor, scale: int, shift: float, bump: hl.constexpr) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * torch.tensor(scale) + torch.tensor(shift) + torch.tensor(bump, dtype=torch.float32)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_torch_tensor_of_a_number_in_a_tile_loop_is_a_0d_constant(mode, dtype):
    x = torch.arange(37).to(dtype)
    result = tessera.kernel(add_scalar_tensors, mode=mode)(x, 3, 0.5, 16)
    expected = x * torch.tensor(3) + torch.tensor(0.5) + torch.tensor(16, dtype=torch.float32)
    assert result.dtype == dtype
    torch.testing.assert_close(result, expected.to(dtype))


def _unchanged(function):
    return function


def _doubling_first_argument(function):
    @functools.wraps(function)
    def wrapper(x, y):
        return function(x * 2, y)
    return wrapper


@pytest.mark.parametrize("mode", MODES)
def test_a_decorator_below_the_kernel_decorator_is_refused_at_its_line(mode):
    """The generated code is the function's own body: a wrapper between would run in eager mode only
    (interpret mode skipped it: x + y instead of 2 * x + y)."""
    x = torch.ones(5)
    for decorator in (_doubling_first_argument, _unchanged):
        @tessera.kernel(mode=mode)
        @decorator
        def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            for tile in hl.tile(out.size()):
                out[tile] = x[tile] + y[tile]
            return out

        with pytest.raises(tessera.exc.DecoratorAfterHelionKernelDecorator) as info:
            add(x, x)
        assert "@decorator" in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_decorator_above_the_kernel_decorator_wraps_the_kernel(mode):
    @_doubling_first_argument
    @tessera.kernel(mode=mode)
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(out.size()):
            out[tile] = x[tile] + y[tile]
        return out

    x = torch.ones(5)
    torch.testing.assert_close(add(x, x), 3 * x)


def asm_with(x: torch.Tensor, dtype, asm) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_asm_elementwise(asm, "=r,r", [x[tile]], dtype=dtype, is_pure=True, pack=1)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype, asm", [("invalid_dtype", "mov.u32 $0, $1;"), ([], "mov.u32 $0, $1;"),
                                        (torch.int32, 3)])
def test_inline_asm_with_a_wrong_argument_type_is_invalid_api_usage_in_every_mode(mode, dtype, asm):
    with pytest.raises(tessera.exc.InvalidAPIUsage, match="hl.inline_asm_elementwise"):
        tessera.kernel(asm_with, mode=mode)(torch.zeros(4, dtype=torch.int32), dtype, asm)
