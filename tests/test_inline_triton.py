"""`hl.inline_triton` and `hl.triton_kernel` (issue 15): raw Triton spliced into a tile loop, run
in interpret and compiled modes (eager mode refuses it, located), against torch."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
SIZES = (1, 37, 64)


def _mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


def snippets(x: T, y: T) -> tuple[T, T, T]:
    total, product, repeated = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        a, b = x[tile], y[tile]
        total[tile] = hl.inline_triton("""
            d = {lhs} + {rhs}
            d
        """, args={"lhs": a, "rhs": b}, output_like=a)  # `d` is also a kernel parameter: no clash
        s, d = hl.inline_triton("s = {0} + {1}\nd = {0} - {1}\ns, d", args=(a, b), output_like=(a, a))
        product[tile] = s * d
        repeated[tile] = hl.inline_triton("{0} + {0} + {0} + {1}", args=[a, b], output_like=a)
    return total, product, repeated


@pytest.mark.parametrize("n", SIZES)
def test_snippets_with_named_positional_and_repeated_placeholders(n: int, device: torch.device) -> None:
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    total, product, repeated = tessera.kernel(snippets, mode=_mode(device), config=tessera.Config(block_sizes=[16]))(x, y)
    torch.testing.assert_close(total, x + y)
    torch.testing.assert_close(product, (x + y) * (x - y))
    torch.testing.assert_close(repeated, 3 * x + y)


def scale_add(a, b, scale):  # noqa: ANN001, ANN201 (Triton code: a plain function is jitted)
    return a * scale + b


CLAMPED = """
@triton.jit
def clamped(value, low, high):
    return tl.minimum(tl.maximum(value, low), high)
"""


def functions(x: T, y: T, low: float) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        a = hl.triton_kernel(scale_add, args=(x[tile_m, tile_n], y[tile_m, tile_n], 3.0), output_like=x[tile_m, tile_n])
        out[tile_m, tile_n] = hl.triton_kernel(CLAMPED, args={"value": a, "low": low, "high": 1.5}, output_like=a)
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1)], ids=str)
def test_triton_functions_given_as_a_function_or_source(shape: tuple[int, int], device: torch.device) -> None:
    x, y = torch.randn(shape, device=device), torch.randn(shape, device=device)
    out = tessera.kernel(functions, mode=_mode(device), config=tessera.Config(block_sizes=[4, 16]))(x, y, -0.5)
    torch.testing.assert_close(out, (3 * x + y).clamp(-0.5, 1.5))


def take_lock(lock: T, rows: T) -> T:
    for tile in hl.tile(rows.size(0)):
        hl.inline_triton("""
            while tl.atomic_cas({0} + {1}, 0, 1) == 1:
                pass
            tl.atomic_add({2}, 1)
            tl.atomic_xchg({0} + {1}, 0)
        """, args=(lock, 0, rows), output_like=None)
    return rows


def test_a_snippet_with_no_result_runs_for_its_effects(device: torch.device) -> None:
    lock = torch.zeros(1, dtype=torch.int32, device=device)
    rows = torch.zeros(3, dtype=torch.int32, device=device)
    tessera.kernel(take_lock, mode=_mode(device), config=tessera.Config(block_sizes=[1]))(lock, rows)
    assert lock.item() == 0 and rows.tolist() == [3, 0, 0]  # three programs, each once


def eager_snippet(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_triton("{0} * 2", args=(x[tile],), output_like=x[tile])
    return out


def test_eager_mode_refuses_triton_code_at_its_line() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="eager mode") as error:
        tessera.kernel(eager_snippet, mode="eager")(torch.zeros(4))
    assert "test_inline_triton.py" in str(error.value)


def bad_output(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_triton("{0}", args=(x[tile],), output_like="not a tensor")
    return out


def bad_placeholder(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_triton("{bad}", args={"good": x[tile]}, output_like=x[tile])
    return out


@pytest.mark.parametrize("kernel", [bad_output, bad_placeholder])
def test_bad_arguments_are_invalid_api_usage(kernel: object) -> None:
    with pytest.raises(exc.InvalidAPIUsage):
        tessera.kernel(kernel, mode="interpret")(torch.zeros(4))


def wrong_shape(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_triton("tl.reshape({0}, (1, {0}.shape[0]))", args=(x[tile],), output_like=x[tile])
    return out


def test_a_result_of_another_shape_than_output_like_fails_to_compile() -> None:
    with pytest.raises(exc.TesseraError):
        tessera.kernel(wrong_shape, mode="interpret", config=tessera.Config(block_sizes=[8]))(torch.zeros(8))



def by_name(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.triton_kernel("scaled_twice", args=(x[tile],), output_like=x[tile])
    return out


def test_a_function_named_by_string_brings_its_helpers_and_constexpr_globals(device: torch.device) -> None:
    mode = _mode(device)
    x = torch.randn(37, device=device)
    tessera.kernel(snippets, mode=mode)(x, x)  # loads Triton in this mode before the module below imports it
    from tests import triton_functions
    globals()["scaled_twice"] = triton_functions.scaled_twice  # the name the kernel's module resolves
    torch.testing.assert_close(tessera.kernel(by_name, mode=mode)(x), 6 * x)
    code = tessera.kernel(by_name, mode=mode).bind(x).to_triton_code()
    assert "def double(v)" in code and "SCALE = tl.constexpr(3.0)" in code
