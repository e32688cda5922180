"""The control-flow rewrite: tile loops become launches and device loops, `if`s become branches.

The first half runs rewritten functions with plain-Python stand-ins for the launch, loop and
`if` helpers (`tiles(n)` plays `hl.tile(n)` and is a `range`), so the rewrite is checked on its
own: it must compute exactly what the original function computes, and it must carry exactly
the names a loop reassigns. The second half runs kernels with `if`s end to end in the device's
mode (interpret on CPU, compiled on CUDA) and checks the errors for what cannot be rewritten.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import os
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from tessera.frontend.rewrite import DEVICE_IF, DEVICE_LOOP, LAUNCH, UNDEFINED, rewrite_kernel
from tessera.frontend.source import KernelSource
from marked_lines import marked_line

THIS_FILE = os.path.abspath(__file__)


def line_of(name: str) -> int:
    """Line number in this file of the line marked `# line: <name>`."""
    return marked_line(__file__, name)[0]


# ---------------------------------------------------------------------------------------------
# The rewrite alone, with plain-Python helpers
# ---------------------------------------------------------------------------------------------

def tiles(n: int) -> range:
    """Stands for `hl.tile(n)` in the functions rewritten below."""
    return range(n)


class Recorder:
    """Plain-Python launch / loop / if helpers that remember what each loop carried."""

    def __init__(self) -> None:
        self.carried: list[tuple[str, ...]] = []   # per device loop call, the carried names
        self.branches: list[tuple[str, ...]] = []  # per `if`, the names its branches return

    def launch(self, tile_range: range, body: Callable[..., Any], launch_index: int) -> None:
        for target in tile_range:
            body(target)

    def device_loop(self, tile_range: range, body: Callable[..., tuple], carried: tuple) -> tuple:
        code = body.__code__
        self.carried.append(code.co_varnames[1:code.co_argcount])
        for target in tile_range:
            carried = body(target, *carried)
        return carried

    def device_if(self, condition: Any, then_body: Callable[..., tuple], else_body: Callable[..., tuple],
                  values: tuple) -> tuple:
        code = then_body.__code__
        self.branches.append(code.co_varnames[:code.co_argcount])
        return then_body(*values) if condition else else_body(*values)


def rewritten(fn: Callable[..., Any]) -> tuple[Callable[..., Any], Recorder]:
    """`fn` with its `for ... in tiles(...)` loops rewritten, and the recorder its helpers use."""
    recorder = Recorder()
    helpers = {LAUNCH: recorder.launch, DEVICE_LOOP: recorder.device_loop, DEVICE_IF: recorder.device_if}

    def is_tile_call(node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tiles"

    return rewrite_kernel(KernelSource(fn), is_tile_call, helpers).function, recorder


def accumulate_with_plus_equals(out: list, n: int, k: int) -> list:
    for i in tiles(n):
        acc = 0
        for j in tiles(k):
            acc += i * j
        out[i] = acc
    return out


def carry_two_values_and_a_temporary(out: list, n: int, k: int) -> list:
    for i in tiles(n):
        total = 0
        largest = -1
        for j in tiles(k):
            term = i + j  # assigned only in the loop: not carried
            total = total + term
            largest = max(largest, term)
        out[i] = (total, largest)
    return out


def nested_device_loops(out: list, n: int, k: int) -> list:
    for i in tiles(n):
        acc = 0
        for j in tiles(k):
            for l in tiles(k):
                acc = acc + j * l
        out[i] = acc + i
    return out


def sibling_loops_reuse_a_name(out: list, n: int, k: int) -> list:
    for i in tiles(n):
        best = 0
        for j in tiles(k):
            value = i * j
            best = max(best, value)
        for j in tiles(k):
            value = i + j  # a fresh local of this loop, not carried from the first one
            out[i * k + j] = value - best
    return out


def branch_on_host_values(out: list, n: int, wide: bool) -> list:
    for i in tiles(n):
        if wide:
            y = 2 * i
        elif i % 3 == 0:
            y = 3 * i
        else:
            y = -i
        out[i] = y
    return out


def branch_binds_a_new_name_in_one_branch(out: list, n: int) -> list:
    for i in tiles(n):
        if i % 2 == 0:
            fresh = i * 10
            out[i] = fresh
    return out


def loop_inside_a_branch(out: list, n: int, k: int) -> list:
    for i in tiles(n):
        acc = 1
        if i % 2 == 0:
            for j in tiles(k):
                acc = acc + j
        else:
            acc = -acc
        out[i] = acc
    return out


def branch_inside_a_loop_updates_the_carried_value(out: list, n: int, k: int) -> list:
    for i in tiles(n):
        acc = 0
        for j in tiles(k):
            if j % 2:
                acc = acc + j
            else:
                acc = acc - i
        out[i] = acc
    return out


def break_in_a_python_loop_inside_a_tile_loop(out: list, n: int) -> list:
    for i in tiles(n):
        found = -1
        for j in range(10):
            if j * i > 6:
                found = j
                break
        out[i] = found
    return out


@pytest.mark.parametrize(("fn", "args"), [
    (accumulate_with_plus_equals, (5, 4)),
    (carry_two_values_and_a_temporary, (4, 3)),
    (nested_device_loops, (3, 3)),
    (sibling_loops_reuse_a_name, (3, 4)),
    (branch_on_host_values, (7, True)),
    (branch_on_host_values, (7, False)),
    (branch_binds_a_new_name_in_one_branch, (5,)),
    (loop_inside_a_branch, (4, 3)),
    (branch_inside_a_loop_updates_the_carried_value, (3, 5)),
    (break_in_a_python_loop_inside_a_tile_loop, (4,)),
], ids=lambda value: getattr(value, "__name__", None))
def test_rewritten_function_computes_what_the_original_computes(fn: Callable[..., Any], args: tuple) -> None:
    size = args[0] * (args[1] if len(args) > 1 and isinstance(args[1], int) and not isinstance(args[1], bool) else 1)
    function, _ = rewritten(fn)
    assert function([None] * size, *args) == fn([None] * size, *args)


def test_augmented_assignment_is_loop_carried() -> None:
    function, recorder = rewritten(accumulate_with_plus_equals)
    function([None] * 2, 2, 3)
    assert recorder.carried == [("acc",), ("acc",)]


def test_every_reassigned_name_is_carried_and_loop_temporaries_are_not() -> None:
    function, recorder = rewritten(carry_two_values_and_a_temporary)
    function([None], 1, 2)
    assert recorder.carried == [("total", "largest")]


def test_a_value_updated_in_an_inner_loop_is_carried_by_every_loop_around_it() -> None:
    function, recorder = rewritten(nested_device_loops)
    function([None], 1, 2)
    # the outer device loop once, the inner one once per outer iteration
    assert recorder.carried == [("acc",), ("acc",), ("acc",)]


def test_a_name_assigned_in_an_earlier_sibling_loop_is_not_carried_by_a_later_one() -> None:
    function, recorder = rewritten(sibling_loops_reuse_a_name)
    function([None] * 2, 1, 2)
    assert recorder.carried == [("best",), ()]


def test_if_branches_take_and_return_the_names_either_branch_binds() -> None:
    function, recorder = rewritten(loop_inside_a_branch)
    function([None] * 2, 2, 2)
    assert recorder.branches[0] == ("acc",)
    assert recorder.carried == [("acc",)]  # the loop inside the branch is still a device loop


def test_a_name_bound_only_in_the_untaken_branch_is_unbound_after_the_if() -> None:
    def reads_a_name_the_branch_did_not_bind(out: list, n: int) -> list:
        for i in tiles(n):
            if i > 100:
                fresh = i
            out[i] = fresh
        return out

    function, _ = rewritten(reads_a_name_the_branch_did_not_bind)
    with pytest.raises(UnboundLocalError, match="fresh"):
        function([None], 1)


def test_a_branch_reading_a_name_before_binding_it_fails_as_in_python() -> None:
    def reads_before_binding(out: list, n: int) -> list:
        for i in tiles(n):
            if i == 0:
                fresh = fresh + 1
            out[i] = 0
        return out

    function, _ = rewritten(reads_before_binding)
    with pytest.raises(UnboundLocalError, match="fresh"):
        function([None], 1)


def test_a_name_bound_by_one_if_can_be_rebound_by_a_later_one() -> None:
    def two_ifs(out: list, n: int) -> list:
        for i in tiles(n):
            if i > 100:
                value = 1
            if i >= 0:
                value = 2
            out[i] = value
        return out

    function, _ = rewritten(two_ifs)
    assert function([None] * 3, 3) == [2, 2, 2]


def test_undefined_sentinel_never_reaches_user_code() -> None:
    def keeps_every_value(out: list, n: int) -> list:
        for i in tiles(n):
            if i % 2:
                odd = i
            else:
                even = i
            out[i] = (locals().get("odd"), locals().get("even"))
        return out

    function, _ = rewritten(keeps_every_value)
    assert UNDEFINED not in [value for pair in function([None] * 2, 2) for value in pair]


def test_host_code_if_is_left_alone() -> None:
    def host_if(out: list, n: int) -> list:
        if n > 1:
            for i in tiles(n):
                out[i] = i
        return out

    function, recorder = rewritten(host_if)
    assert function([None] * 3, 3) == [0, 1, 2]
    assert recorder.branches == []


# ---------------------------------------------------------------------------------------------
# End to end: `if` in kernels, in the device's mode
# ---------------------------------------------------------------------------------------------

@tessera.kernel
def softmax_by_width(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        if x.size(1) > 64:
            row_max = hl.full([tile_m], float("-inf"), dtype=torch.float32)
            row_sum = hl.zeros([tile_m], dtype=torch.float32)
            for tile_n in hl.tile(n):
                values = x[tile_m, tile_n].to(torch.float32)
                new_max = torch.maximum(row_max, torch.amax(values, dim=1))
                row_sum = row_sum * torch.exp(row_max - new_max) + torch.exp(values - new_max[:, None]).sum(dim=1)
                row_max = new_max
            for tile_n in hl.tile(n):
                values = x[tile_m, tile_n].to(torch.float32)
                out[tile_m, tile_n] = (torch.exp(values - row_max[:, None]) / row_sum[:, None]).to(out.dtype)
        else:
            rows = x[tile_m, :].to(torch.float32)
            numerator = torch.exp(rows - torch.amax(rows, dim=1, keepdim=True))
            out[tile_m, :] = (numerator / numerator.sum(dim=1, keepdim=True)).to(out.dtype)
    return out


@pytest.mark.parametrize("n", [13, 100])
def test_if_on_a_size_picks_the_code_path_for_each_shape(n: int, device: torch.device) -> None:
    x = torch.randn(7, n, device=device)
    torch.testing.assert_close(softmax_by_width(x), torch.softmax(x, dim=1))


@tessera.kernel
def scale_by_mode(x: torch.Tensor, mode: str) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        values = x[tile]
        if mode == "double":
            result = values * 2
        elif mode == "negate":
            result = -values
        else:
            result = values + 1
        out[tile] = result
    return out


@pytest.mark.parametrize(("mode", "expected"), [
    ("double", lambda x: x * 2), ("negate", lambda x: -x), ("other", lambda x: x + 1)])
def test_elif_chain_on_a_host_value_runs_the_chosen_branch(mode: str, expected: Callable[..., Any],
                                                            device: torch.device) -> None:
    x = torch.randn(37, device=device)
    torch.testing.assert_close(scale_by_mode(x, mode), expected(x))


@tessera.kernel
def bias_when_given(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        if bias is not None:
            shift = bias[tile_n]
            values = x[tile_m, tile_n] + shift[None, :]
        else:
            values = x[tile_m, tile_n]
        out[tile_m, tile_n] = values
    return out


def test_name_bound_only_in_the_taken_branch_is_defined_after_the_if(device: torch.device) -> None:
    x, bias = torch.randn(5, 33, device=device), torch.randn(33, device=device)
    torch.testing.assert_close(bias_when_given(x, bias), x + bias)
    torch.testing.assert_close(bias_when_given(x, None), x)


@tessera.kernel
def reads_a_name_of_the_untaken_branch(x: torch.Tensor, flag: bool) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        if flag:
            values = x[tile]
        out[tile] = values * 2  # line: untaken-branch-read
    return out


def test_reading_a_name_bound_only_in_the_untaken_branch_fails_at_its_line(device: torch.device) -> None:
    x = torch.randn(8, device=device)
    torch.testing.assert_close(reads_a_name_of_the_untaken_branch(x, True), x * 2)
    with pytest.raises((UnboundLocalError, NameError, exc.TesseraError)) as info:
        reads_a_name_of_the_untaken_branch(x, False)
    if isinstance(info.value, exc.TesseraError):
        assert info.value.location is not None and info.value.location.lineno == line_of("untaken-branch-read")
    else:
        assert "values" in str(info.value)
        frames = inspect.getinnerframes(info.tb)
        assert (os.path.abspath(frames[-1].filename), frames[-1].lineno) == (THIS_FILE, line_of("untaken-branch-read"))


@tessera.kernel
def scale_rows_by_sign_of_first(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for row in hl.grid(x.size(0)):
        first = hl.load(x, [row, 0])
        if first > 0:
            scale = first * 0 + 2.0
        else:
            scale = first * 0 - 1.0
        for tile_n in hl.tile(x.size(1)):
            out[row, tile_n] = x[row, tile_n] * scale
    return out


def test_if_on_a_device_value_selects_per_program(device: torch.device) -> None:
    x = torch.randn(9, 37, device=device)
    expected = x * torch.where(x[:, :1] > 0, 2.0, -1.0)
    torch.testing.assert_close(scale_rows_by_sign_of_first(x), expected)


# ---------------------------------------------------------------------------------------------
# What the rewrite rejects, at the user's line
# ---------------------------------------------------------------------------------------------

def rewrite_error(fn: Callable[..., Any]) -> exc.TesseraError:
    with pytest.raises(exc.TesseraError) as info:
        tessera.kernel(fn).rewritten()
    return info.value


def test_return_in_a_branch_inside_a_tile_loop_is_an_error_at_its_line() -> None:
    def returns_early(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            if x.size(0) > 4:
                return x  # line: return-in-branch
            x[tile] = x[tile] + 1
        return x

    error = rewrite_error(returns_early)
    assert isinstance(error, exc.UnsupportedSyntaxError)
    assert "`return` inside a tile loop" in str(error)
    assert (error.location.filename, error.location.lineno) == (THIS_FILE, line_of("return-in-branch"))


def test_break_in_a_branch_of_a_tile_loop_is_an_error_at_its_line() -> None:
    def breaks_out(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            x[tile] = x[tile] + 1
            if x.size(0) > 4:
                break  # line: break-in-branch
        return x

    error = rewrite_error(breaks_out)
    assert isinstance(error, exc.UnsupportedSyntaxError)
    assert "`break` out of a tile loop" in str(error)
    assert error.location.lineno == line_of("break-in-branch")


def test_continue_in_an_inner_tile_loop_is_an_error_at_its_line() -> None:
    # a `continue` directly in the loop or in its `if`s is a predicate on the rest of the
    # iteration (tests/test_tile_ops.py); one inside another block cannot be
    def skips(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            for inner in hl.tile(x.size(0)):
                with contextlib.nullcontext():
                    continue  # line: continue-in-inner
        return x

    error = rewrite_error(skips)
    assert "`continue` out of a tile loop" in str(error)
    assert error.location.lineno == line_of("continue-in-inner")


def test_device_value_read_by_host_code_is_an_error_at_the_read() -> None:
    def leaks(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            if x.size(0) > 4:
                doubled = x[tile] * 2
            else:
                doubled = x[tile]
            x[tile] = doubled
        return doubled  # line: device-read-on-host

    error = rewrite_error(leaks)
    assert isinstance(error, exc.DeviceValueOnHostError)
    assert "'doubled' is computed inside the tile loop" in str(error)
    assert error.location.lineno == line_of("device-read-on-host")
