"""The Config choice is keyed by the argument sizes the host code pins with `hl.specialize`.

A Config chosen for one pinned width (row blocks of 32 at width 64) must not serve another
(width 5632): the source tells which argument sizes are pinned (frontend/specialized.py).
"""
from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples import attention, layer_norm
from tessera.runtime.tuning import heuristic_for


def many_forms(x: torch.Tensor, y: torch.Tensor, k: int, scale: float) -> torch.Tensor:
    m, n = x.shape
    width = y.size(-1)
    hl.specialize(n)
    hl.specialize(width)
    hl.specialize(k)
    hl.specialize(x.shape[0])
    total = x.size(0) + 1  # arithmetic: not followed
    hl.specialize(total)
    for step in range(2):  # a loop variable is no alias
        hl.specialize(step)
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] * scale
    return out


def rebound(x: torch.Tensor) -> torch.Tensor:
    n = x.size(1)
    n = n + 0  # bound twice: no alias
    hl.specialize(n)
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile]
    return out


def test_the_source_forms_that_pin_an_argument() -> None:
    assert tessera.kernel(many_forms).specialized_arguments == (("x", 1), ("y", -1), ("k", None), ("x", 0))
    assert tessera.kernel(rebound).specialized_arguments == ()
    assert layer_norm.layer_norm_bwd.specialized_arguments == (("x", 1),)
    assert attention.attention.specialized_arguments == (("q", -1),)


def test_pinned_values_of_a_call() -> None:
    kernel = tessera.kernel(many_forms)
    x, y = torch.empty(3, 5), torch.empty(2, 7)
    assert kernel.pinned_values((x, y, 4, 1.0), {}) == (5, 7, 4, 3)
    assert kernel.pinned_values((x,), {"y": y, "k": 9, "scale": 1.0}) == (5, 7, 9, 3)
    assert kernel.pinned_values((x, None, 4, 1.0), {}) == (5, None, 4, 3)  # unreadable: None, no error


def test_each_pinned_width_gets_its_own_config(device: torch.device) -> None:
    kernel = tessera.kernel(layer_norm.layer_norm_bwd.fn)
    narrow = layer_norm.make_bwd_inputs(37, 64, dtype=torch.float32, device=str(device))
    wide = layer_norm.make_bwd_inputs(37, 1000, dtype=torch.float32, device=str(device))
    for inputs in (narrow, wide):
        expected = layer_norm.reference_bwd(*inputs)
        for got, want in zip(kernel(*inputs), expected):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(kernel.config_choices) == 2
    chosen = set(kernel.config_choices.by_key.values())
    interpreted = device.type == "cpu"  # CPU tensors run in Triton's interpreter, with its widened heuristic
    assert chosen == {heuristic_for(kernel.bind(*narrow), interpreted), heuristic_for(kernel.bind(*wide), interpreted)}
    assert kernel.bind(*narrow).specialization_key() != kernel.bind(*wide).specialization_key()


def test_unpinned_sizes_still_share_a_config(device: torch.device) -> None:
    kernel = tessera.kernel(layer_norm.layer_norm_bwd.fn)
    for rows in (33, 37, 64):  # one size bucket, (32, 64]
        kernel(*layer_norm.make_bwd_inputs(rows, 64, dtype=torch.float32, device=str(device)))
    assert len(kernel.config_choices) == 1


# -- hl.constexpr parameters and wrapped values ----------------------------------------------------

def sum_of_first_buffers(buffers: tuple[torch.Tensor, ...], count: hl.constexpr, shift: hl.constexpr) -> torch.Tensor:
    out = torch.empty_like(buffers[0])
    for tile in hl.tile(out.size(0)):
        acc = hl.zeros([tile], dtype=torch.float32)
        for i in hl.static_range(count):  # Python needs an int here while compiling
            acc = acc + buffers[i][tile]
        out[tile] = acc + shift
    return out


def _constexpr_modes() -> tuple[str, ...]:
    return ("eager", "compiled") if torch.cuda.is_available() else ("eager", "interpret")


def test_a_constexpr_parameter_is_an_int_while_compiling_and_a_new_value_recompiles(device: torch.device) -> None:
    for size in (1, 13):
        buffers = tuple(torch.full((size,), float(i + 1), device=device) for i in range(4))
        for mode in _constexpr_modes():
            kernel = tessera.kernel(sum_of_first_buffers, mode=mode)
            for count in (4, 2):
                expected = sum(buffers[:count]) + 0.5
                torch.testing.assert_close(kernel(buffers, count, 0.5), expected, msg=f"{mode} {count}")
                # the same passed as keywords, and wrapped in hl.constexpr(...)
                torch.testing.assert_close(kernel(buffers, count=hl.constexpr(count), shift=hl.constexpr(0.5)),
                                           expected, msg=f"{mode} {count}")


def add_wrapped(x: torch.Tensor, v: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + v
    return out


def test_a_value_wrapped_in_constexpr_without_an_annotation_is_its_value(device: torch.device) -> None:
    x = torch.randn(9, device=device)
    for mode in _constexpr_modes():
        kernel = tessera.kernel(add_wrapped, mode=mode)
        torch.testing.assert_close(kernel(x, hl.constexpr(3)), x + 3, msg=mode)
        torch.testing.assert_close(kernel(x, hl.constexpr(2.5)), x + 2.5, msg=mode)


def add_pinned_stride(x: torch.Tensor) -> torch.Tensor:
    stride = hl.specialize(x.stride(0))
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        out[tile] = x[tile] + stride
    return out


def test_a_pinned_stride_joins_the_key_and_each_value_binds_its_own_kernel() -> None:
    kernel = tessera.kernel(add_pinned_stride, mode="interpret")
    assert kernel.specialized_arguments == (("x", ("stride", 0)),)
    narrow = torch.randn(8 * 13).as_strided((8, 6), (13, 1))
    wide = torch.randn(8 * 17).as_strided((8, 6), (17, 1))
    assert kernel.pinned_values((narrow,), {}) == (13,)
    assert kernel.bind((narrow,)) is not kernel.bind((wide,))
    for x, stride in ((narrow, 13), (wide, 17)):
        for mode in ("eager", "interpret"):
            torch.testing.assert_close(tessera.kernel(add_pinned_stride, mode=mode)(x), x + stride)
