"""What a user sees when looking inside: TESSERA_PRINT_CODE's labelled sources, a plan's compact
repr, the tuner's word on CPU timings, the warning for an `if` that decides once per block, and
located errors for Python mistakes in a tile body (print, .item(), lists of tiles, range)."""
from __future__ import annotations

import types
import warnings

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from tests.marked_lines import marked_line

CONFIG = tessera.Config(block_sizes=[4])


@pytest.fixture
def cpu_only(device: torch.device) -> None:
    if device.type == "cuda":
        pytest.skip("checks trace-time behaviour, the same on every device: the CPU suite covers it")


def _double_rows(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * 2
    return out


def test_print_code_prints_each_built_variant_once_with_its_name_variant_and_config(cpu_only, capsys) -> None:
    double_rows = tessera.kernel(mode="interpret")(_double_rows)
    x = torch.randn(9, 5)
    with settings.override(print_code=True):
        double_rows(x)
        double_rows(x)                      # a cache hit prints nothing
        double_rows.bind(x).plan(CONFIG)    # planning prints nothing
    printed = capsys.readouterr().err
    assert printed.count("# ---- ") == 1, printed
    header = next(line for line in printed.splitlines() if line.startswith("# ---- "))
    assert "double_rows: tile loop 0, variant 1 (first compile), interpret, Config(block_sizes=[" in header
    assert "@triton.jit" in printed


def test_a_plan_shows_shapes_and_dtypes_not_tensor_contents(cpu_only) -> None:
    double_rows = tessera.kernel(mode="interpret")(_double_rows)
    text = repr(double_rows.bind(torch.randn(300, 7)).plan(CONFIG))
    assert "f32[300, 7] cpu" in text and "grid=(75,)" in text and "Config(block_sizes=[4])" in text
    assert "tensor(" not in text
    assert len(text.splitlines()) <= 4


def test_tuning_in_the_interpreter_says_its_timings_mean_nothing_for_gpu_speed(cpu_only, monkeypatch, capsys,
                                                                                tmp_path) -> None:
    from tessera.autotune import pipeline

    chosen = tessera.Config(block_sizes=[4], indexing="tensor_descriptor")
    fake = types.SimpleNamespace(config=chosen, time_ms=0.5, seconds=0.1, failures={},
                                 search=types.SimpleNamespace(trials=[1, 2, 3]))
    monkeypatch.setattr(pipeline, "tune", lambda *args, **kwargs: fake)

    double_rows = tessera.kernel(mode="interpret")(_double_rows)
    with settings.override(cache_dir=str(tmp_path), autotune_effort=None):
        assert double_rows.autotune(torch.randn(8, 4)) == chosen
    said = capsys.readouterr().err
    assert said.startswith("[tessera] autotuning _double_rows for this call's shapes (quick effort, at most 30 s)")
    assert "Interpreter timings say nothing about GPU speed" in said
    assert "not chosen for performance" in said
    assert "To skip tuning, hard-code it" not in said


def test_an_if_on_a_reduction_across_the_block_warns_at_its_line(cpu_only) -> None:
    @tessera.kernel(config=CONFIG, mode="interpret")
    def flip_negative_blocks(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            row = x[tile, :]
            if row.sum() > 0:  # line: block-if
                out[tile, :] = row
            else:
                out[tile, :] = -row
        return out

    with pytest.warns(exc.TesseraWarning, match="decides once per block, not per row") as caught:
        flip_negative_blocks(torch.randn(6, 5))
    number, _ = marked_line(__file__, "block-if")
    assert caught[0].filename == __file__ and caught[0].lineno == number
    assert "torch.where(row.sum(1, keepdim=True) > 0, a, b)" in str(caught[0].message)


def test_an_if_on_a_loaded_scalar_does_not_warn(cpu_only) -> None:
    @tessera.kernel(config=CONFIG, mode="interpret")
    def gated(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for tile in hl.tile(x.size(0)):
            if hl.load(gate, [0]) > 0:
                out[tile, :] = x[tile, :]
        return out

    x = torch.randn(6, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", exc.TesseraWarning)
        torch.testing.assert_close(gated(x, torch.ones(1)), x)


@pytest.mark.parametrize("mistake, expected", [
    ("print", "First argument to print() must be a string prefix"),  # print("row: ", row) is a device print
    ("format", "print() or str() of a tile value"),
    ("item", "has no Python value while the kernel is compiled"),
    ("list_store", "got a Python list of 2 items, but needs one tile value"),
    ("list_operand", "got a Python list of 2 items, but needs one tile value"),
    ("range", "a value known only when the kernel runs"),
])
def test_python_mistakes_in_a_tile_body_are_located_errors_with_a_fix(cpu_only, mistake: str, expected: str) -> None:
    @tessera.kernel(config=CONFIG, mode="interpret")
    def mistaken(x: torch.Tensor, k: int) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            row = x[tile, :]
            if mistake == "print":
                print(row)  # line: print
            elif mistake == "format":
                print(f"row is {row}")  # line: format
            elif mistake == "item":
                row = row * row.sum().item()  # line: item
            elif mistake == "list_store":
                out[tile, :] = [row, row]  # line: list_store
            elif mistake == "list_operand":
                row = row + [row, row]  # line: list_operand
            elif mistake == "range":
                for _ in range(k):  # line: range
                    row = row * 2
                else:  # a for/else stays Python's loop, unrolled (a plain one runs on the device)
                    row = row + 0
            out[tile, :] = row
        return out

    with pytest.raises(exc.TesseraError) as raised:
        mistaken(torch.randn(6, 5), 3)
    text = str(raised.value)
    number, code = marked_line(__file__, mistake)
    assert expected in text
    assert f"{__file__}:{number}:" in text and code in text
    assert "hint:" in text


def test_print_of_a_tile_value_points_to_eager_mode_where_it_prints_numbers(cpu_only, capsys) -> None:
    def show(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            row = x[tile, :]
            print(row)
            out[tile, :] = row
        return out

    with pytest.raises(exc.DevicePrintError, match="mode='eager'"):
        tessera.kernel(config=CONFIG, mode="interpret")(show)(torch.ones(2, 3))
    tessera.kernel(config=CONFIG, mode="eager")(show)(torch.ones(2, 3))
    assert "tensor([[1., 1., 1.]," in capsys.readouterr().out


def test_a_shape_mismatch_names_the_sizes_of_this_call_beside_the_symbols(cpu_only) -> None:
    @tessera.kernel(config=CONFIG, mode="interpret")
    def add_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile, :] = x[tile, :] + y[tile, :]  # line: mismatch
        return out

    with pytest.raises(exc.ShapeMismatchError) as raised:
        add_rows(torch.randn(4, 768), torch.randn(4, 767))
    number, _ = marked_line(__file__, "mismatch")
    assert "(768 vs 767 in this call)" in str(raised.value)
    assert f"{__file__}:{number}:" in str(raised.value)
