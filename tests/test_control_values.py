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


def test_python_range_over_a_runtime_int_in_a_tile_loop_raises_a_located_error(device: torch.device) -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="known only when the kernel runs") as info:
        _run(_modes(device)[1], add_k_times, torch.zeros(4, device=device), 3)
    assert "for _ in range(k):" in str(info.value) and "hl.grid" in info.value.hint


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
