"""Issue 15: sizes that are symbols while compiling never leak into Python as raw sympy errors:
`min`/`max` of sizes, `hl.arange` with a step work; a slice whose length changes per tile is
refused, located, with a way around it."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from marked_lines import marked_line

T = torch.Tensor


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def clipped_row_sums(x: T) -> T:
    out = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
    n = min(x.size(1), 8)
    rows = max(x.size(0), 1)
    for tile in hl.tile(rows):
        out[tile] = x[tile, :n].sum(1)
    return out


def stepped(x: T) -> T:
    out = torch.zeros(x.size(0), 4, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = hl.arange(1, 8, 2).to(torch.float32)[None, :] + x[tile][:, None]
    return out


def per_tile_slice(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0), block_size=4):
        out[tile.begin:tile.begin + 4, :] = x[tile, :]  # line: slice
    return out


@pytest.mark.parametrize("shape", [(5, 11), (1, 3)], ids=str)
def test_min_and_max_of_sizes(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape)
    for mode in _modes(device):
        result = tessera.kernel(clipped_row_sums, mode=mode)(x.to(device))
        torch.testing.assert_close(result.cpu(), x[:, :8].sum(1), msg=lambda text: f"{mode}: {text}")


def test_arange_with_a_step(device: torch.device) -> None:
    x = torch.randn(6)
    for mode in _modes(device):
        result = tessera.kernel(stepped, mode=mode)(x.to(device))
        torch.testing.assert_close(result.cpu(), torch.arange(1.0, 8.0, 2.0)[None, :] + x[:, None])


@pytest.mark.parametrize("rows", [1, 6, 8])
def test_a_per_tile_slice_stored_from_a_tile_value_is_that_tiles_rows(rows: int) -> None:
    # the slice is a window of 4 lanes at the tile's first row, cut short where the tile is (the
    # dim ends where the loop does): its lanes are the tile's (tests/test_paired_tiles.py)
    x = torch.randn(rows, 3)
    for mode in ("eager", "interpret"):
        torch.testing.assert_close(tessera.kernel(per_tile_slice, mode=mode)(x), x, msg=mode)


def per_head_scale(x: T, heads: int) -> T:
    out = torch.empty_like(x)
    for bh in hl.grid(x.size(0) * heads):
        b = bh // heads
        h = bh % heads  # a sympy Mod of the program id: printed as Triton's %, not `Mod(...)`
        for tile in hl.tile(x.size(2)):
            out[b, h, tile] = x[b, h, tile] * (h + 1)
    return out


@pytest.mark.parametrize("shape", [(1, 1, 5), (2, 3, 37), (3, 5, 64)])
def test_a_program_id_modulo_a_size_indexes_its_head(shape: tuple[int, int, int], device: torch.device) -> None:
    x = torch.randn(shape, device=device)
    expected = x * torch.arange(1, shape[1] + 1, device=device, dtype=x.dtype)[None, :, None]
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(per_head_scale, mode=mode)(x, shape[1]), expected, msg=mode)


def test_size_expressions_print_as_code_that_keeps_sympy_meaning() -> None:
    """Each sympy node a size expression can hold prints as backend code, and one that cannot
    is refused by name rather than written as an unknown Python name."""
    import sympy

    from tessera.backends.pallas.printer import print_expr as jax_text
    from tessera.backends.triton.printer import print_expr as triton_text
    n, m = sympy.Symbol("n", integer=True), sympy.Symbol("m", integer=True, nonnegative=True)
    assert triton_text(sympy.Mod(m, 3)) == "((m) % (3))"
    for value in (-7, -1, 0, 5):  # the general form is sympy's Mod under C's % and Python's %
        text = triton_text(sympy.Mod(n, 3)).replace("n", str(value))
        assert eval(text) == value % 3
    assert triton_text(sympy.Abs(n)) == "tl.abs(n)"
    assert triton_text(sympy.Piecewise((n, m > 0), (m, True))) == "tl.where((m > 0), n, m)"
    assert jax_text(sympy.Piecewise((n, m > 0), (m, True))) == "jnp.where((m > 0), n, m)"
    with pytest.raises(exc.UnsupportedOperationError, match="gamma"):
        triton_text(sympy.gamma(n))


def branch_on_value_width(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        if v.size(1) != 16:  # a whole dim's size: decided per call, as x.size(1) would be
            out[tile, :] = v + 100
        elif v.size(1) >= 16:
            out[tile, :] = v * 2
    return out


@pytest.mark.parametrize("width", [1, 16, 19])
def test_the_size_of_a_tile_values_whole_dim_compares_as_the_size(width: int) -> None:
    """`v.size(1) != 16` compared the size object, not the size: always True when traced (silent)."""
    x = torch.randn(5, width)
    expected = x * 2 if width == 16 else x + 100
    for mode in ("eager", "interpret"):
        torch.testing.assert_close(tessera.kernel(branch_on_value_width, mode=mode)(x), expected, msg=mode)


def branch_on_tile_length(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        if v.size(0) == 4:  # line: tile-length
            out[tile, :] = v
    return out


def test_comparing_the_varying_length_of_a_tile_dim_is_a_located_error() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="varies per tile") as info:
        tessera.kernel(branch_on_tile_length, mode="interpret")(torch.randn(5, 3))
    assert info.value.location.lineno == marked_line(__file__, "tile-length")[0]


def _wide_rows(x: torch.Tensor) -> int:
    """Code the kernel calls but Tessera does not rewrite: plain Python `==`/`!=` on a size."""
    if x.size(1) != 16:
        return 100
    return 1 if x.size(1) == 16 else -1


widths_of = lambda v: 3 if v.shape[1] == 16 else 5  # noqa: E731 - a lambda, as users pass them


def branch_in_a_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] + _wide_rows(x) + widths_of(x[tile, :])
    return out


def test_python_comparisons_of_sizes_in_helpers_are_decided_per_call() -> None:
    """sympy's `==` compares structure: `x_size1 == 16` was False for every call (silent); now it is
    decided for the traced call and guarded, so a later call of another width retraces."""
    kernel = tessera.kernel(branch_in_a_helper, mode="interpret")
    for width in (16, 7, 16, 1):
        x = torch.randn(3, width)
        expected = x + (1 + 3 if width == 16 else 100 + 5)
        torch.testing.assert_close(kernel(x), expected, msg=str(width))
        torch.testing.assert_close(tessera.kernel(branch_in_a_helper, mode="eager")(x), expected)


def _ordered_rows(x: torch.Tensor) -> int:
    """Code the kernel calls but Tessera does not rewrite: Python orderings of sizes and scalars."""
    if x.size(1) > 16:
        return 1000
    if 8 <= x.size(1):  # the number on the left: Python asks the size's reflected `>=`
        return 100
    return 10 if x.size(1) < 2 else 1


widest_of = lambda v: 0.5 if v.size(1) >= 9 else 0.25  # noqa: E731 - a lambda on a tile value's whole dim


def branch_on_orderings_in_a_helper(x: torch.Tensor, cutoff: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        bonus = 7 if cutoff <= 3 else 0
        out[tile, :] = x[tile, :] + _ordered_rows(x) + widest_of(x[tile, :]) + bonus + min(x.size(1), 12)
    return out


def _orderings_expected(x: torch.Tensor, cutoff: int) -> torch.Tensor:
    width = x.size(1)
    rows = 1000 if width > 16 else 100 if width >= 8 else 10 if width < 2 else 1
    return x + rows + (0.5 if width >= 9 else 0.25) + (7 if cutoff <= 3 else 0) + min(width, 12)


def test_python_orderings_of_sizes_in_helpers_are_decided_per_call_and_guarded() -> None:
    """`x.size(1) > 16` in a helper raised sympy's raw TypeError; now it is decided for the traced
    call and guarded: each later call on the other side of a comparison retraces (never reuses)."""
    kernels = {mode: tessera.kernel(branch_on_orderings_in_a_helper, mode=mode) for mode in ("eager", "interpret")}
    for width, cutoff in ((17, 3), (16, 4), (8, 3), (9, 2), (7, 5), (1, 3), (12, 4), (13, 3), (17, 4)):
        x = torch.randn(3, width)
        for mode, kernel in kernels.items():
            torch.testing.assert_close(kernel(x, cutoff), _orderings_expected(x, cutoff), msg=f"{mode} {width}")


def _scaled_width_bonus(x: torch.Tensor) -> float:
    """Orderings of size expressions (sympy relations whose truth sympy cannot take)."""
    return 2.0 if x.size(1) * 2 + x.size(0) > 40 else 0.5 if 16 >= x.size(1) - 1 else 0.0


def branch_on_size_expressions_in_a_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * _scaled_width_bonus(x)
    return out


def test_orderings_of_size_expressions_in_helpers_are_decided_per_call_and_guarded() -> None:
    kernels = {mode: tessera.kernel(branch_on_size_expressions_in_a_helper, mode=mode) for mode in ("eager", "interpret")}
    for rows, width in ((3, 19), (3, 17), (3, 18), (4, 18), (3, 1), (3, 17)):
        x = torch.randn(rows, width)
        factor = 2.0 if width * 2 + rows > 40 else 0.5 if 16 >= width - 1 else 0.0
        for mode, kernel in kernels.items():
            torch.testing.assert_close(kernel(x), x * factor, msg=f"{mode} {rows}x{width}")


def _doubled_width_factor(x: torch.Tensor) -> float:
    # `==`/`!=` of a size *expression* (sympy's structural equality was False for every call)
    return 3.0 if x.size(1) * 2 == 32 else -1.0 if x.size(1) + 1 != 6 else 0.5


def branch_on_size_expression_equality_in_a_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * _doubled_width_factor(x)
    return out


def test_equality_of_size_expressions_in_helpers_is_decided_per_call_and_guarded() -> None:
    kernels = {mode: tessera.kernel(branch_on_size_expression_equality_in_a_helper, mode=mode)
               for mode in ("eager", "interpret")}
    for width in (16, 17, 5, 16, 1, 5):
        x = torch.randn(3, width)
        factor = 3.0 if width * 2 == 32 else -1.0 if width + 1 != 6 else 0.5
        for mode, kernel in kernels.items():
            torch.testing.assert_close(kernel(x), x * factor, msg=f"{mode} width {width}")


def _width_weights(x: torch.Tensor) -> list[float]:
    # Python needs an int here: the size's value for this call (the variant is pinned to it)
    return [1.0 + j for j in range(x.size(1))] + [0.5] * x.size(1)


def weights_from_a_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * sum(_width_weights(x))
    return out


def test_a_size_used_as_a_python_int_in_a_helper_is_this_calls_value_and_pinned() -> None:
    kernels = {mode: tessera.kernel(weights_from_a_helper, mode=mode) for mode in ("eager", "interpret")}
    for width in (3, 1, 5, 3):
        x = torch.randn(4, width)
        factor = sum(1.0 + j for j in range(width)) + 0.5 * width
        for mode, kernel in kernels.items():
            torch.testing.assert_close(kernel(x), x * factor, msg=f"{mode} width {width}")
