"""A catalogue of programs a user can write wrongly (bounds, loops, indices), one row each.

Every row is one mistake. In each mode it applies to, the call must raise the row's
`TesseraError` class, and the error must name the user's line (`file:line` and the source
text), say what to do (`hint:`), and print no Tessera-internal frame but the one re-raise
frame of runtime/kernel.py (the checks of tests/test_errors.py).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from test_errors import raised_by, tessera_frames
from marked_lines import marked_line

THIS_FILE = os.path.basename(__file__)


def line_of(name: str) -> tuple[int, str]:
    """(number, stripped text) of the line in this file marked `# line: <name>`."""
    return marked_line(__file__, name)


# -- kernels with one mistake each ---------------------------------------------------------------
@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def negative_begin(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(-2, x.size(0)):
        x[tile] = 1.0  # line: negative-begin
    return x


@tessera.kernel
def zero_block_size(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0), block_size=0):  # line: zero-block
        x[tile] = 1.0
    return x


@tessera.kernel
def negative_block_size(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0), block_size=-4):  # line: negative-block
        x[tile] = 1.0
    return x


@tessera.kernel
def odd_block_size(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0), block_size=3):  # line: odd-block
        x[tile] = 1.0
    return x


@tessera.kernel
def float_bound(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(4.0):  # line: float-bound
        x[tile] = 1.0
    return x


@tessera.kernel
def string_bound(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile("4"):  # line: string-bound
        x[tile] = 1.0
    return x


@tessera.kernel
def zero_grid_step(x: torch.Tensor) -> torch.Tensor:
    for row in hl.grid(0, x.size(0), 0):  # line: zero-step
        x[row] = 1.0
    return x


@tessera.kernel
def range_over_a_runtime_int(x: torch.Tensor, k: int) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        acc = x[tile]
        for _ in range(k):  # line: runtime-range
            acc = acc + 1.0
        else:  # a for/else (or a break) keeps it a Python loop: unrolled, so its bound must be known
            acc = acc * 2.0
        x[tile] = acc
    return x


@tessera.kernel
def index_past_the_end(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, 9]  # line: int-past-end
    return out


@tessera.kernel
def float_indices(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[indices[tile]]  # line: float-indices
    return out


@tessera.kernel
def tile_value_returned(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        value = x[tile] + 1.0
    return value  # line: returned-tile-value


@tessera.kernel
def int_index_of_a_tile_value(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0), device=x.device)
    for tile in hl.tile(x.size(0)):
        rows = x[tile, :]
        out[tile] = rows[0, :].sum() + rows[:, 0]  # line: int-index-of-tile-value
    return out


@tessera.kernel
def mismatched_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0), device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = (x[tile, :] + y[tile, :]).sum(1)  # line: mismatched-rows
    return out


@tessera.kernel
def integer_division(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] // y[tile]  # line: integer-division
    return out


@tessera.kernel
def op_without_a_primitive(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.histc(x[tile])  # line: op-without-primitive
    return out


@tessera.kernel
def method_without_a_primitive(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile].histc()  # line: method-without-primitive
    return out


@dataclasses.dataclass(frozen=True)
class Row:
    kernel: Any
    arguments: Callable[[torch.device], tuple]
    error: type[exc.TesseraError]
    line: str
    modes: tuple[str, ...] = ("eager", "generated")
    cpu_only: bool = False  # torch itself raises only on the CPU


CATALOGUE: dict[str, Row] = {
    "negative-begin": Row(negative_begin, lambda d: (torch.zeros(8, device=d),), exc.IndexingError, "negative-begin"),
    "zero-block": Row(zero_block_size, lambda d: (torch.zeros(8, device=d),), exc.ConfigError, "zero-block"),
    "negative-block": Row(negative_block_size, lambda d: (torch.zeros(8, device=d),), exc.ConfigError, "negative-block"),
    "odd-block": Row(odd_block_size, lambda d: (torch.zeros(8, device=d),), exc.ConfigError, "odd-block"),
    "float-bound": Row(float_bound, lambda d: (torch.zeros(8, device=d),), exc.DtypeError, "float-bound"),
    "string-bound": Row(string_bound, lambda d: (torch.zeros(8, device=d),), exc.DtypeError, "string-bound"),
    "zero-step": Row(zero_grid_step, lambda d: (torch.zeros(8, device=d),), exc.ConfigError, "zero-step"),
    # eager runs Python's range on an int: only the compiled trace sees a runtime value (a plain
    # `for` over it is a device loop; with `else` it stays Python's, unrolled)
    "runtime-range": Row(range_over_a_runtime_int, lambda d: (torch.zeros(8, device=d), 3),
                         exc.UnsupportedOperationError, "runtime-range", ("generated",)),
    # generated code masks an out-of-range index (it reads 0); eager, the specification, refuses it
    "int-past-end": Row(index_past_the_end, lambda d: (torch.zeros(8, 4, device=d),), exc.IndexingError,
                        "int-past-end", ("eager",)),
    "float-indices": Row(float_indices, lambda d: (torch.zeros(8, device=d), torch.zeros(8, device=d)),
                         exc.IndexingError, "float-indices"),
    # registers, not memory: eager refuses the int index as the trace does (it used to answer)
    # an int index of a tile dim (its extent varies per tile; whole dims take ints: language/slicing.py);
    # eager mode holds a tile value as a plain tensor and cannot tell its tile dims apart
    "int-index-of-tile-value": Row(int_index_of_a_tile_value, lambda d: (torch.zeros(5, 3, device=d),),
                                   exc.UnsupportedOperationError, "int-index-of-tile-value", ("generated",)),
    # eager raised torch's RuntimeError; every mode now names the line with the same class
    "mismatched-rows": Row(mismatched_rows, lambda d: (torch.zeros(4, 5, device=d), torch.zeros(4, 6, device=d)),
                           exc.ShapeMismatchError, "mismatched-rows"),
    # torch (on the CPU) refuses an integer division by zero in the data; generated code cannot see it
    "integer-division-by-zero": Row(integer_division, lambda d: (torch.ones(3, dtype=torch.int32, device=d),
                                                                 torch.zeros(3, dtype=torch.int32, device=d)),
                                    exc.TorchOperationError, "integer-division", ("eager",), cpu_only=True),
    # eager ran torch's op and answered; every mode now refuses it at the line
    "op-without-primitive": Row(op_without_a_primitive, lambda d: (torch.zeros(4, device=d),),
                                exc.UnsupportedOperationError, "op-without-primitive"),
    "method-without-primitive": Row(method_without_a_primitive, lambda d: (torch.zeros(4, device=d),),
                                    exc.UnsupportedOperationError, "method-without-primitive"),
    "returned-tile-value": Row(tile_value_returned, lambda d: (torch.zeros(8, device=d),),
                               exc.DeviceValueOnHostError, "returned-tile-value"),
}

CASES = [(name, mode) for name, row in CATALOGUE.items() for mode in row.modes]


def _error(name: str, mode: str, device: torch.device) -> exc.TesseraError:
    row = CATALOGUE[name]
    if row.cpu_only and device.type != "cpu":
        pytest.skip("torch raises this only on the CPU")
    if mode == "generated":
        mode = "compiled" if device.type == "cuda" else "interpret"
    with settings.override(mode=mode):
        return raised_by(lambda: row.kernel(*row.arguments(device)))


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_bad_input_raises_its_error_class(name: str, mode: str, device: torch.device) -> None:
    error = _error(name, mode, device)
    assert isinstance(error, CATALOGUE[name].error), f"{type(error).__name__}: {error}"


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_bad_input_error_names_the_users_line_and_shows_it(name: str, mode: str, device: torch.device) -> None:
    number, text = line_of(CATALOGUE[name].line)
    printed = str(_error(name, mode, device))
    assert f"{THIS_FILE}:{number}" in printed
    assert text in printed


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_bad_input_error_says_what_to_do(name: str, mode: str, device: torch.device) -> None:
    assert "hint:" in str(_error(name, mode, device))


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_bad_input_traceback_shows_no_tessera_internal_frame(name: str, mode: str, device: torch.device) -> None:
    assert tessera_frames(_error(name, mode, device)) in ([], [os.path.join("runtime", "kernel.py")])


def test_a_host_tensor_on_another_device_than_the_inputs_is_a_located_error(device: torch.device) -> None:
    """`torch.empty(n)` without `device=` beside CUDA inputs: the GPU cannot read it (was an internal
    error from Triton, 'cpu tensor?')."""
    if device.type == "cpu":
        pytest.skip("needs a second device kind")

    @tessera.kernel
    def row_sums(x):
        out = torch.empty(x.size(0), dtype=x.dtype)  # no device=: on the CPU
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile, :].sum(1)
        return out

    with pytest.raises(exc.DeviceMismatchError, match="`out` on cpu") as info:
        row_sums(torch.randn(5, 7, device=device))
    assert "device=" in str(info.value)
