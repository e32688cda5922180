"""How Tessera fails: every misuse is a `TesseraError` that names the user's line and says what to do.

Each test makes one mistake and checks three things where they apply (STYLE.md): the exact
location (this file and the line of the mistake), the wording, and that no Tessera-internal
frame appears in the printed traceback. Lines are found by `# line: <name>` markers, so the
tests do not break when lines above them move.
"""
from __future__ import annotations

import os
import pickle
import re
import traceback
from typing import Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from tessera.runtime.call_keys import common_device
from marked_lines import marked_line

THIS_FILE = os.path.basename(__file__)
PACKAGE_DIR = os.path.dirname(os.path.abspath(tessera.__file__))


def line_of(name: str) -> int:
    """Line number in this file of the line marked `# line: <name>`."""
    return marked_line(__file__, name)[0]


def raised_by(call: Callable[[], object]) -> exc.TesseraError:
    """The TesseraError that `call` raises."""
    with pytest.raises(exc.TesseraError) as info:
        call()
    return info.value


def tessera_frames(error: BaseException) -> list[str]:
    """Files under tessera/ that appear in the printed traceback of `error`."""
    printed = "".join(traceback.format_exception(error))
    files = re.findall(r'File "([^"]+)"', printed)
    return [os.path.relpath(f, PACKAGE_DIR) for f in files if os.path.abspath(f).startswith(PACKAGE_DIR + os.sep)]


# ---------------------------------------------------------------------------------------------
# Kernels with one mistake each (module level; the tests below also define some locally)
# ---------------------------------------------------------------------------------------------

@tessera.kernel(mode="eager")
def zeros_on_the_host(x: torch.Tensor) -> torch.Tensor:
    buffer = hl.zeros([4])  # line: zeros-on-host
    return buffer


@tessera.kernel(mode="eager")
def full_on_the_host(x: torch.Tensor) -> torch.Tensor:
    return hl.full([4], 1.0)


@tessera.kernel(mode="eager")
def arange_on_the_host(x: torch.Tensor) -> torch.Tensor:
    return hl.arange(4)


@tessera.kernel(mode="eager")
def tile_past_the_end(x: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros(n, dtype=x.dtype, device=x.device)
    for tile in hl.tile(n):
        out[tile] = x[tile]  # line: tile-past-end
    return out


@tessera.kernel(mode="eager")
def two_arguments(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


@tessera.kernel(mode="eager", config=tessera.Config(block_sizes=[8]))
def needs_two_block_sizes(m: int, n: int) -> None:
    for _ in hl.tile(m):
        pass
    for _ in hl.tile(n):  # line: second-tile-loop
        pass


# ---------------------------------------------------------------------------------------------
# hl functions called on the host, outside any kernel
# ---------------------------------------------------------------------------------------------

def test_tile_called_outside_a_kernel_raises_not_in_kernel_error():
    with pytest.raises(exc.NotInKernelError):
        hl.tile(8)


def test_not_in_kernel_error_is_a_tessera_error():
    assert issubclass(exc.NotInKernelError, exc.TesseraError)


def test_not_in_kernel_error_names_this_file_and_the_line_of_the_call():
    error = raised_by(lambda: hl.tile(8))  # line: host-tile
    assert f"{THIS_FILE}:{line_of('host-tile')}" in str(error)
    assert error.location.lineno == line_of("host-tile")


def test_not_in_kernel_error_shows_the_offending_source_line_with_a_caret():
    error = raised_by(lambda: hl.tile(8))  # line: host-tile-caret
    assert "error = raised_by(lambda: hl.tile(8))" in str(error)
    assert "^" in str(error)


def test_not_in_kernel_error_says_to_decorate_the_function_with_tessera_kernel():
    error = raised_by(lambda: hl.tile(8))
    assert "@tessera.kernel" in str(error)
    assert "hint:" in str(error)


def test_zeros_called_outside_a_kernel_raises_not_in_kernel_error_naming_the_line():
    with pytest.raises(exc.NotInKernelError) as info:
        hl.zeros([4, 4])  # line: host-zeros
    assert f"{THIS_FILE}:{line_of('host-zeros')}" in str(info.value)


def test_zeros_called_outside_a_kernel_suggests_torch_zeros():
    error = raised_by(lambda: hl.zeros([4]))
    assert "torch.zeros" in str(error)


@pytest.mark.parametrize("name, call", [
    ("tile", lambda: hl.tile(8)),
    ("grid", lambda: hl.grid(8)),
    ("zeros", lambda: hl.zeros([4])),
    ("full", lambda: hl.full([4], 1.0)),
    ("arange", lambda: hl.arange(4)),
    ("load", lambda: hl.load(torch.zeros(4), [0])),
    ("store", lambda: hl.store(torch.zeros(4), [0], 1.0)),
    ("atomic_add", lambda: hl.atomic_add(torch.zeros(4), [0], 1.0)),
    ("dot", lambda: hl.dot(torch.zeros(2, 2), torch.zeros(2, 2))),
    ("specialize", lambda: hl.specialize(4)),
    ("register_block_size", lambda: hl.register_block_size(64)),
])
def test_not_in_kernel_error_names_the_hl_function_that_was_called(name, call):
    with pytest.raises(exc.NotInKernelError, match=rf"^hl\.{name} can only be called inside a @tessera\.kernel"):
        call()


def test_host_call_in_a_plain_helper_function_names_the_helper_line():
    def helper() -> object:
        return hl.full([2], 0.0)  # line: helper-full

    error = raised_by(helper)
    assert error.location.lineno == line_of("helper-full")
    assert error.location.function == "helper"


@pytest.mark.xfail(strict=True, reason="errors raised outside a kernel call are not stripped of "
                                        "Tessera's frames (DESIGN.md, adopted rule 10)")
def test_traceback_of_a_host_call_error_has_no_tessera_frames():
    error = raised_by(lambda: hl.zeros([4]))
    assert tessera_frames(error) == []


# ---------------------------------------------------------------------------------------------
# Device operations on the host part of a kernel
# ---------------------------------------------------------------------------------------------

def test_zeros_in_a_kernel_outside_a_tile_loop_raises_not_in_tile_loop_error():
    with pytest.raises(exc.NotInTileLoopError):
        zeros_on_the_host(torch.zeros(4))


def test_not_in_tile_loop_error_names_the_kernel_line():
    error = raised_by(lambda: zeros_on_the_host(torch.zeros(4)))
    assert error.location.lineno == line_of("zeros-on-host")
    assert error.location.function == "zeros_on_the_host"
    assert f"{THIS_FILE}:{line_of('zeros-on-host')}" in str(error)


def test_not_in_tile_loop_error_says_to_move_the_call_into_a_tile_loop():
    error = raised_by(lambda: zeros_on_the_host(torch.zeros(4)))
    assert "hl.tile" in error.hint


@pytest.mark.parametrize("name, kernel", [
    ("zeros", zeros_on_the_host),
    ("full", full_on_the_host),
    ("arange", arange_on_the_host),
])
def test_not_in_tile_loop_error_names_the_hl_function_that_was_called(name, kernel):
    with pytest.raises(exc.NotInTileLoopError, match=rf"^hl\.{name} is a device operation"):
        kernel(torch.zeros(4))


def test_device_op_after_a_tile_loop_is_still_outside_the_loop():
    @tessera.kernel(mode="eager")
    def zeros_after_loop(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            x[tile] = 1.0
        return hl.zeros([4])  # line: zeros-after-loop

    error = raised_by(lambda: zeros_after_loop(torch.zeros(4)))
    assert isinstance(error, exc.NotInTileLoopError)
    assert error.location.lineno == line_of("zeros-after-loop")


def test_host_safe_hl_calls_work_outside_a_tile_loop():
    @tessera.kernel(mode="eager", config=tessera.Config(block_sizes=[16]))
    def host_part(x: torch.Tensor) -> tuple[int, int]:
        return hl.specialize(x.size(0)), hl.register_block_size(x.size(0))

    assert host_part(torch.zeros(4)) == (4, 16)


# ---------------------------------------------------------------------------------------------
# Errors inside a kernel body
# ---------------------------------------------------------------------------------------------

def test_error_inside_a_kernel_names_the_kernel_line():
    error = raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    assert isinstance(error, exc.IndexingError)
    assert error.location.lineno == line_of("tile-past-end")
    assert f"{THIS_FILE}:{line_of('tile-past-end')}" in str(error)


def test_out_of_bounds_tile_error_gives_the_tile_and_the_tensor_shape():
    error = raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    assert "tile 0:32" in str(error) and "[8]" in str(error)


def test_error_in_a_kernel_defined_inside_a_test_names_its_line():
    @tessera.kernel(mode="eager")
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.size(0), dtype=x.dtype)
        for tile in hl.tile(index.size(0)):
            out[tile] = hl.load(x, [index[tile]])  # line: local-gather
        return out

    with settings.override(check_indices=True):  # else the out-of-range lane reads 0, as when compiled
        error = raised_by(lambda: gather(torch.zeros(4), torch.tensor([0, 9])))
    assert isinstance(error, exc.IndexingError)
    assert error.location.lineno == line_of("local-gather")
    assert "extra_mask" in error.hint


def test_a_failed_kernel_call_leaves_no_kernel_active():
    raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    with pytest.raises(exc.NotInKernelError):
        hl.zeros([4])


def test_a_failed_kernel_call_does_not_break_the_next_call():
    raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    x = torch.arange(40.0)
    assert torch.equal(tile_past_the_end(x, 40), x)


# ---------------------------------------------------------------------------------------------
# Wrong arguments
# ---------------------------------------------------------------------------------------------

def test_too_few_arguments_raise_kernel_argument_error():
    with pytest.raises(exc.KernelArgumentError, match="missing a required argument: 'y'"):
        two_arguments(torch.zeros(2))


def test_too_many_arguments_raise_kernel_argument_error():
    with pytest.raises(exc.KernelArgumentError, match="too many positional arguments"):
        two_arguments(torch.zeros(2), torch.zeros(2), torch.zeros(2))


def test_unexpected_keyword_raises_kernel_argument_error():
    with pytest.raises(exc.KernelArgumentError, match="unexpected keyword argument 'z'"):
        two_arguments(torch.zeros(2), torch.zeros(2), z=1)


def test_kernel_argument_error_names_the_call_line():
    error = raised_by(lambda: two_arguments(torch.zeros(2)))  # line: arity-call
    assert error.location.lineno == line_of("arity-call")
    assert f"{THIS_FILE}:{line_of('arity-call')}" in str(error)


def test_kernel_argument_error_names_the_kernel_and_shows_its_signature():
    error = raised_by(lambda: two_arguments(torch.zeros(2)))
    assert str(error).startswith("two_arguments():")
    assert re.search(r"two_arguments\(x\b.*, y\b.*\)", error.hint)


def test_kernel_argument_error_is_raised_before_the_kernel_body_runs():
    calls = []

    @tessera.kernel(mode="eager")
    def counted(x: torch.Tensor) -> None:
        calls.append(x)

    raised_by(lambda: counted())
    assert calls == []


# ---------------------------------------------------------------------------------------------
# Tensors on different devices
# ---------------------------------------------------------------------------------------------

def test_tensors_on_two_devices_raise_device_mismatch_error():
    meta, cpu = torch.zeros(2, device="meta"), torch.zeros(2)
    with pytest.raises(exc.DeviceMismatchError):
        common_device("add", (meta, cpu), {})


def test_device_mismatch_error_names_the_kernel_and_both_devices():
    meta, cpu = torch.zeros(2, device="meta"), torch.zeros(2)
    error = raised_by(lambda: common_device("add", (meta, cpu), {}))
    assert error.message == "add() received tensors on different devices (cpu, meta)"


def test_device_mismatch_error_says_to_move_the_tensors_to_one_device():
    meta, cpu = torch.zeros(2, device="meta"), torch.zeros(2)
    error = raised_by(lambda: common_device("add", (meta, cpu), {}))
    assert "one device" in error.hint


def test_device_mismatch_counts_keyword_arguments():
    meta, cpu = torch.zeros(2, device="meta"), torch.zeros(2)
    with pytest.raises(exc.DeviceMismatchError):
        common_device("add", (), {"x": meta, "y": cpu})


def test_device_mismatch_counts_tensors_inside_list_arguments():
    meta, cpu = torch.zeros(2, device="meta"), torch.zeros(2)
    with pytest.raises(exc.DeviceMismatchError):
        common_device("add", (cpu, [cpu, meta]), {})


def test_tensors_on_one_device_give_that_device():
    meta = torch.zeros(2, device="meta")
    assert common_device("add", (meta, [meta]), {"z": meta}) == torch.device("meta")


def test_a_call_without_tensors_runs_on_the_cpu():
    assert common_device("add", (1, 2.0), {}) == torch.device("cpu")


def test_kernel_call_with_tensors_on_two_devices_raises_device_mismatch_error_at_the_call():
    meta, cpu = torch.zeros(2, device="meta"), torch.zeros(2)
    error = raised_by(lambda: two_arguments(meta, cpu))  # line: mismatch-call
    assert isinstance(error, exc.DeviceMismatchError)
    assert error.location.lineno == line_of("mismatch-call")


# ---------------------------------------------------------------------------------------------
# Printed tracebacks
# ---------------------------------------------------------------------------------------------

KERNEL_CALL_ERRORS = {
    "indexing": lambda: tile_past_the_end(torch.zeros(8), 40),
    "not-in-tile-loop": lambda: zeros_on_the_host(torch.zeros(4)),
    "arity": lambda: two_arguments(torch.zeros(2)),
    "device-mismatch": lambda: two_arguments(torch.zeros(2, device="meta"), torch.zeros(2)),
    "too-few-block-sizes": lambda: needs_two_block_sizes(4, 4),
}


@pytest.mark.parametrize("case", sorted(KERNEL_CALL_ERRORS))
def test_traceback_of_a_kernel_call_error_shows_at_most_the_reraise_frame_of_tessera(case):
    error = raised_by(KERNEL_CALL_ERRORS[case])
    frames = tessera_frames(error)
    assert frames in ([], [os.path.join("runtime", "kernel.py")])


@pytest.mark.parametrize("case", sorted(KERNEL_CALL_ERRORS))
def test_traceback_of_a_kernel_call_error_hides_the_eager_machinery(case):
    error = raised_by(KERNEL_CALL_ERRORS[case])
    printed = "".join(traceback.format_exception(error))
    for internal in ("eager.py", "eager_indexing.py", "interpreter.py", "primitive.py",
                     os.sep + "language" + os.sep):
        assert internal not in printed


def test_traceback_of_a_kernel_call_error_keeps_the_user_kernel_frame():
    error = raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    printed = "".join(traceback.format_exception(error))
    assert f'line {line_of("tile-past-end")}, in tile_past_the_end' in printed


def test_traceback_of_a_kernel_call_error_has_no_chained_internal_exception():
    error = raised_by(lambda: two_arguments(torch.zeros(2)))
    printed = "".join(traceback.format_exception(error))
    assert "During handling of the above exception" not in printed
    assert "The above exception was the direct cause" not in printed


def test_debug_raw_keeps_tesseras_frames_for_developers():
    with settings.override(debug="raw"):
        error = raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    frames = tessera_frames(error)
    assert os.path.join("language", "eager_indexing.py") in frames


# ---------------------------------------------------------------------------------------------
# Pickling (autotune workers report errors across processes)
# ---------------------------------------------------------------------------------------------

def test_error_with_a_location_pickles_with_its_message_location_and_hint():
    error = raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is exc.IndexingError
    assert copy.location == error.location
    assert copy.hint == error.hint
    assert str(copy) == str(error)


def test_error_with_a_message_template_pickles_with_its_message():
    error = raised_by(lambda: hl.tile(8))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is exc.NotInKernelError
    assert copy.message == error.message == "hl.tile can only be called inside a @tessera.kernel function"
    assert str(copy) == str(error)


def test_error_without_a_location_pickles():
    error = exc.ConfigError("bad block size", hint="use a power of two")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.location) == (exc.ConfigError, str(error), None)


# ---------------------------------------------------------------------------------------------
# The error classes
# ---------------------------------------------------------------------------------------------

def test_every_error_class_in_exc_is_a_tessera_error():
    classes = [value for value in vars(exc).values()  # warnings are not errors: TesseraWarning is a UserWarning
               if isinstance(value, type) and issubclass(value, Exception) and not issubclass(value, Warning)]
    assert len(classes) > 10
    assert all(issubclass(cls, exc.TesseraError) for cls in classes)


def test_every_warning_class_in_exc_is_one_ignore_warnings_can_name():
    classes = [value for value in vars(exc).values() if isinstance(value, type) and issubclass(value, Warning)]
    assert exc.TensorOperationInWrapper in classes
    assert all(issubclass(cls, exc.BaseWarning) for cls in classes)


def test_error_str_is_message_then_location_then_hint():
    error = raised_by(lambda: tile_past_the_end(torch.zeros(8), 40))
    lines = str(error).splitlines()
    assert lines[0] == error.message
    assert lines[1].startswith(f"  at {error.location.filename}:{error.location.lineno}:")
    assert lines[-1] == f"hint: {error.hint}"


def _misspelled_attribute(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = x[t].sumn()  # line: misspelled
    return out


def test_unknown_attribute_of_a_tile_value_is_located_and_still_an_attribute_error():
    kernel = tessera.kernel(_misspelled_attribute, mode="interpret")
    with pytest.raises(exc.UnsupportedMethodError) as info:
        kernel(torch.randn(5))
    assert isinstance(info.value, AttributeError)  # hasattr() keeps working
    assert "'sumn'" in str(info.value)
    assert info.value.location.lineno == marked_line(__file__, "misspelled")[0]
