"""Control flow and values are never dropped: every mode computes what eager mode (and torch) does.

Each case was once silently wrong in generated code: an `if` comparing a grid index with `==`
(sympy's structural `==` said False), `hl.constexpr(False)` (an object is always true), and
`hl.atomic_add` returning None instead of the previous values.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled" if device.type == "cuda" else "interpret"]


def _run(mode: str, kernel: Any, *args: Any) -> Any:
    with settings.override(mode=mode):
        return kernel(*args)


@tessera.kernel
def copy_row_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for row in hl.grid(x.size(0)):
        if row == 1:
            out[row, :] = x[row, :]
    return out


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_if_on_a_grid_index_equal_to_an_int_takes_the_branch_on_that_row(mode: str, device: torch.device) -> None:
    mode = _modes(device)[1] if mode == "generated" else mode
    x = torch.arange(12.0, device=device).reshape(3, 4)
    expected = torch.zeros_like(x)
    expected[1] = x[1]
    assert torch.equal(_run(mode, copy_row_one, x), expected)


@tessera.kernel
def copy_rows_but_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for row in hl.grid(x.size(0)):
        if row != 1:
            out[row, :] = x[row, :]
    return out


def test_if_on_a_grid_index_not_equal_to_an_int_skips_that_row(device: torch.device) -> None:
    x = torch.arange(12.0, device=device).reshape(3, 4)
    expected = x.clone()
    expected[1] = 0.0
    for mode in _modes(device):
        assert torch.equal(_run(mode, copy_rows_but_one, x), expected), mode


@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def scale_if_four_columns(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        if x.size(1) == 4:
            out[tile, :] = x[tile, :] * 2.0
        else:
            out[tile, :] = x[tile, :]
    return out


@pytest.mark.parametrize("columns", [4, 5])
def test_if_comparing_a_runtime_size_with_an_int_is_decided_per_call(columns: int, device: torch.device) -> None:
    x = torch.ones(3, columns, device=device)
    expected = x * 2.0 if columns == 4 else x
    for mode in _modes(device):
        assert torch.equal(_run(mode, scale_if_four_columns, x), expected), mode


@tessera.kernel
def add_or_subtract(x: torch.Tensor, add: hl.constexpr) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        if add:
            out[tile] = x[tile] + 1.0
        else:
            out[tile] = x[tile] - 1.0
    return out


@pytest.mark.parametrize("flag", [True, False])
def test_constexpr_selects_the_branch_of_its_value(flag: bool, device: torch.device) -> None:
    x = torch.zeros(4, device=device)
    expected = x + (1.0 if flag else -1.0)
    for mode in _modes(device):
        assert torch.equal(_run(mode, add_or_subtract, x, hl.constexpr(flag)), expected), mode


def test_constexpr_is_truthy_like_its_value() -> None:
    assert not hl.constexpr(False) and not hl.constexpr(0) and hl.constexpr(3)
    assert int(hl.constexpr(3)) == 3 and float(hl.constexpr(0.5)) == 0.5


@tessera.kernel
def add_returning_previous(x: torch.Tensor, totals: torch.Tensor) -> torch.Tensor:
    previous = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        previous[tile] = hl.atomic_add(totals, [tile], x[tile])
    return previous


@pytest.mark.parametrize("mode", ["eager", "generated"])
def test_atomic_add_returns_the_previous_values(mode: str, device: torch.device) -> None:
    mode = _modes(device)[1] if mode == "generated" else mode
    x, totals = torch.ones(6, device=device), torch.arange(6.0, device=device)
    previous = _run(mode, add_returning_previous, x, totals)
    assert torch.equal(previous, torch.arange(6.0, device=device))
    assert torch.equal(totals, torch.arange(6.0, device=device) + 1.0)


@tessera.kernel
def max_returning_previous(x: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    previous = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        previous[tile] = hl.atomic_max(best, [tile], x[tile])
    return previous


def test_atomic_max_returns_the_previous_values(device: torch.device) -> None:
    for mode in _modes(device):
        x, best = torch.tensor([1.0, 5.0, 2.0], device=device), torch.tensor([3.0, 3.0, 3.0], device=device)
        assert torch.equal(_run(mode, max_returning_previous, x, best), torch.full((3,), 3.0, device=device)), mode
        assert torch.equal(best, torch.tensor([3.0, 5.0, 3.0], device=device)), mode


@tessera.kernel
def add_k_times(x: torch.Tensor, k: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        acc = x[tile]
        for _ in range(k):
            acc = acc + 1.0
        out[tile] = acc
    return out


@pytest.mark.parametrize("k", [0, 1, 3])
def test_python_range_over_a_runtime_int_in_a_tile_loop_loops_on_the_device(k: int, device: torch.device) -> None:
    x = torch.randn(5, device=device)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, add_k_times, x, k), x + k, msg=mode)


@tessera.kernel
def add_k_times_on_the_device(x: torch.Tensor, k: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        acc = x[tile]
        for _ in hl.grid(k):
            acc = acc + 1.0
        out[tile] = acc
    return out


def test_the_hinted_device_loop_over_a_runtime_int_runs(device: torch.device) -> None:
    for mode in _modes(device):
        assert torch.equal(_run(mode, add_k_times_on_the_device, torch.zeros(4, device=device), 3),
                           torch.full((4,), 3.0, device=device)), mode


def test_an_in_place_update_of_a_loaded_tile_leaves_the_input_alone(device: torch.device) -> None:
    # eager read `x[tile]` as a view, so `v *= 2` doubled the caller's tensor (compiled code
    # works on registers); a tile read is a copy in every mode
    def double(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            v = x[tile]
            v *= 2
            out[tile] = v
        return out
    for mode in ("eager", None):
        x = torch.ones(37, device=device)
        out = tessera.kernel(double, mode=mode)(torch.empty(37, device=device), x)
        assert torch.equal(x, torch.ones(37, device=device)) and torch.equal(out, 2 * x)


def test_a_conditional_expression_decides_like_an_if_statement(device: torch.device) -> None:
    # `a if row == 1 else b` on a grid index raised sympy's raw TypeError (before: silently False)
    def pick(out: torch.Tensor, x: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
        for row in hl.grid(x.size(0)):
            on_row_one = 10.0 if row == 1 else 1.0                          # a program id: on the device
            wide = 2.0 if x.size(0) > 3 else 3.0                            # a host size: decided per call
            loaded = 5.0 if hl.load(limits, [row]) > 0 else 7.0             # a loaded value
            out[row] = x[row] * on_row_one * wide + loaded
        return out
    x = torch.ones(5, device=device)
    limits = torch.tensor([1, 0, 1, 0, 1], dtype=torch.int32, device=device)
    expected = torch.tensor([7.0, 27.0, 7.0, 9.0, 7.0], device=device)
    for mode in ("eager", None):
        assert torch.equal(tessera.kernel(pick, mode=mode)(torch.zeros(5, device=device), x, limits), expected)


# `and`, `or`, `not` and chained comparisons inside tile loops mean what Python means.
# 
# Python asks the first operand of `and` / `or` (and each link of `3 < v < 7`) for a bool. On a
# runtime scalar (an int argument), a program id or a loaded value no bool exists while the
# kernel is traced; these conditions are joined instead (a host condition is then decided per
# call, a device one per program), and host values keep Python's short circuit and results.


@tessera.kernel
def sigmoid_inside_sine_outside(x: torch.Tensor, v: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        if 3 < v < 7:
            out[tile] = torch.sigmoid(x[tile])
        else:
            out[tile] = torch.sin(x[tile])
    return out


@pytest.mark.parametrize("v", [2, 3, 4, 6, 7, 10])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (33, 3)])
def test_chained_comparison_on_a_scalar_argument(v: int, shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape, device=device)
    expected = torch.sigmoid(x) if 3 < v < 7 else torch.sin(x)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, sigmoid_inside_sine_outside, x, v), expected, msg=mode)


@tessera.kernel
def pick_by_flags(x: torch.Tensor, v: int, w: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        if v > 0 and not w < 2:
            out[tile] = x[tile] + 1.0
        elif v > 5 or w == 1:
            out[tile] = x[tile] + 2.0
        else:
            out[tile] = x[tile]
    return out


@pytest.mark.parametrize("v,w", [(1, 2), (1, 0), (6, 0), (0, 1), (0, 0), (-3, 7)])
def test_and_or_not_on_scalar_arguments(v: int, w: int, device: torch.device) -> None:
    x = torch.randn(9, device=device)
    expected = x + 1.0 if (v > 0 and not w < 2) else x + 2.0 if (v > 5 or w == 1) else x
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, pick_by_flags, x, v, w), expected, msg=mode)


@tessera.kernel
def interior_rows_and_marked_rows(x: torch.Tensor, marks: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    n = x.size(0)
    for row in hl.grid(n):
        mark = marks[row]
        if 0 < row < n - 1 and not mark > 0:
            out[row, :] = x[row, :] * 2.0
        elif mark > 0 or row == 0:
            out[row, :] = x[row, :] + 1.0
    return out


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_conditions_on_program_ids_and_loaded_values(rows: int, device: torch.device) -> None:
    x = torch.randn(rows, 3, device=device)
    marks = (torch.arange(rows, device=device) % 3 == 1).to(torch.int32)
    expected = torch.zeros_like(x)
    for row in range(rows):
        if 0 < row < rows - 1 and not marks[row] > 0:
            expected[row] = x[row] * 2.0
        elif marks[row] > 0 or row == 0:
            expected[row] = x[row] + 1.0
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, interior_rows_and_marked_rows, x, marks), expected, msg=mode)


@tessera.kernel
def scaled_or_default(x: torch.Tensor, scale: float | None, bias: torch.Tensor | None) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        factor = scale or 1.0  # Python's `or` returns an operand: None -> 1.0
        value = x[tile] * factor
        if bias is not None and not bias is None:  # noqa: E714 (both spellings)
            value = value + bias[tile]
        out[tile] = value
    return out


@pytest.mark.parametrize("scale", [None, 3.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_host_values_keep_pythons_and_or_results(scale: float | None, with_bias: bool, device: torch.device) -> None:
    x = torch.randn(11, device=device)
    bias = torch.randn(11, device=device) if with_bias else None
    expected = x * (scale or 1.0) + (bias if bias is not None else 0.0)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, scaled_or_default, x, scale, bias), expected, msg=mode)


@tessera.kernel
def scaled_by_and_or(x: torch.Tensor, v: int, w: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * (v and w) + (v or w) + (not v)
    return out


@pytest.mark.parametrize("v,w", [(0, 5), (2, 5), (3, 0), (0, 0)])
def test_and_or_of_scalar_arguments_return_an_operand(v: int, w: int, device: torch.device) -> None:
    x = torch.randn(6, device=device)
    expected = x * (v and w) + (v or w) + (not v)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, scaled_by_and_or, x, v, w), expected, msg=mode)


# `for i in range(...)` inside a tile loop: unrolled in Python when its bounds are ints, a device
# loop over the same indices when a bound is known only when the kernel runs (a size that is not
# specialized, a value loaded inside the kernel), never a refusal of the size.


@tessera.kernel
def first_column_times_width(x: torch.Tensor) -> torch.Tensor:
    out = x.new_zeros(x.size(0))
    for rows in hl.tile(x.size(0)):
        for _ in range(x.size(1)):
            out[rows] += x[rows, 0]
    return out


@pytest.mark.parametrize("shape", [(1, 1), (8, 5), (37, 3)])
def test_range_over_a_runtime_size_loops_on_the_device(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape, device=device)
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, first_column_times_width, x), x[:, 0] * shape[1], msg=mode)


@tessera.kernel
def strided_row_sums(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([x.size(0), 2], dtype=x.dtype, device=x.device)
    for row in hl.grid(x.size(0)):
        count = lengths[row]
        total = x[row, 0] * 0
        for j in range(count):  # a loaded bound
            total = total + x[row, j]
        odd = x[row, 0] * 0
        for j in range(1, x.size(1), 2):  # begin, runtime end, step
            odd = odd + x[row, j]
        out[row, 0] = total
        out[row, 1] = odd
    return out


@pytest.mark.parametrize("shape", [(1, 1), (6, 5), (3, 8)])
def test_range_over_loaded_and_stepped_bounds(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape, device=device)
    lengths = (torch.arange(shape[0], device=device) % (shape[1] + 1)).to(torch.int32)
    expected = torch.stack([torch.stack([x[r, :int(lengths[r])].sum(), x[r, 1::2].sum()]) for r in range(shape[0])])
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, strided_row_sums, x, lengths), expected, msg=mode)


@tessera.kernel
def last_of_three_columns(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=x.dtype, device=x.device)
    for rows in hl.tile(x.size(0)):
        total = x[rows, 0] * 0
        for i in range(3):  # int bounds: unrolled, and `last` stays bound after the loop
            last = x[rows, i]
            total = total + last
        out[rows] = total + last
    return out


@pytest.mark.parametrize("rows", [1, 10])
def test_range_over_ints_is_still_a_python_loop(rows: int, device: torch.device) -> None:
    x = torch.randn(rows, 4, device=device)
    expected = x[:, :3].sum(1) + x[:, 2]
    for mode in _modes(device):
        torch.testing.assert_close(_run(mode, last_of_three_columns, x), expected, msg=mode)


def _stepped_halving(step: int) -> Any:
    def kernel(x: torch.Tensor, k: int) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            v = x[tile]
            for i in range(0, k, step):
                v = v * 0.5 + i
            out[tile] = v
        return out
    return kernel


@pytest.mark.parametrize("step", [1, 2, 3])
@pytest.mark.parametrize("k", [0, 1, 5])
def test_device_range_step_from_a_closure_int(step: int, k: int, device: torch.device) -> None:
    """A host int step (here a closure's) is pinned per value; it was refused as 'not a positive int'."""
    x = torch.randn(7, device=device)
    expected = x.clone()
    for i in range(0, k, step):
        expected = expected * 0.5 + i
    for mode in _modes(device):
        torch.testing.assert_close(tessera.kernel(_stepped_halving(step), mode=mode)(x, k), expected, msg=mode)
