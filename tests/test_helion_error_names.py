"""Helion's error classes (issue 15): each mistake Tessera detects raises the class Helion names it
by (a subclass of Tessera's own class for it), in every mode that can detect it, at the user's line.
Also the `_testing` harness pieces Helion's tests lean on (check_example's optional outputs,
`Kernel.configs = [...]`, `runtime.ref_mode`) and eager mode's single-threaded CPU ops."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import _testing, exc, settings
from tessera.runtime.config import Config
from tessera.runtime.ref_mode import RefMode, is_ref_mode_enabled

MODES = ("eager", "interpret")


def run(fn, mode: str, *args):
    return tessera.kernel(fn, mode=mode)(*args)


# -- host code / loop structure: every mode ---------------------------------------------------------

def rebinds_host_variable(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out = x[tile] * 2
    return out


def reads_device_variable(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        doubled = x[tile] * 2
    return doubled


def returns_in_loop(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile]
        return out
    return out


def unpacks_one_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_a, tile_b in hl.tile(x.size(0), x.size(1)):
        out[tile_a, tile_b] = x[tile_a, tile_b]
    return out


def tile_of_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for outer in hl.tile(x.size(0)):
        for inner in hl.tile(outer):
            out[inner] = x[inner]
    return out


def reversed_range(x: torch.Tensor, begin: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in hl.tile(begin, x.size(0)):
        out[tile] = x[tile]
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn, error, args", [
    (rebinds_host_variable, exc.CannotModifyHostVariableOnDevice, (torch.randn(7),)),
    (reads_device_variable, exc.CannotReadDeviceVariableOnHost, (torch.randn(7),)),
    (returns_in_loop, exc.NotAllowedOnDevice, (torch.randn(7),)),
    (unpacks_one_tile, exc.FailedToUnpackTile, (torch.randn(3, 5),)),
    (tile_of_tile, exc.TileOfTile, (torch.randn(9),)),
    (reversed_range, exc.InvalidTileRange, (torch.randn(9), 12)),
])
def test_each_mistake_raises_helions_class_at_the_users_line(mode, fn, error, args):
    with pytest.raises(error) as raised:
        run(fn, mode, *args)
    assert raised.value.location is not None and raised.value.location.filename == __file__
    # the classes stay Tessera errors, so code catching those keeps working
    assert isinstance(raised.value, exc.TesseraError)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("begin, size", [(0, 1), (3, 3), (2, 9)])
def test_a_range_that_is_not_reversed_still_runs(mode, begin, size):
    x = torch.randn(size)
    expected = x.clone()
    expected[:begin] = 0
    torch.testing.assert_close(run(reversed_range, mode, x, begin), expected)


def test_the_reversed_range_message_names_both_bounds():
    with pytest.raises(exc.InvalidTileRange, match="begin=12, end=9"):
        run(reversed_range, "interpret", torch.randn(9), 12)


# -- traced tile bodies: interpret mode (eager mode runs them as PyTorch) ---------------------------

def assigns_into_tile_value(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile] * 2
        v[0] = 1
        out[tile] = v
    return out


def too_many_indices(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, tile]
    return out


def boolean_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.shape):
        out[tile_m, tile_n] = x[mask].sum()
    return out


def nonzero(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.nonzero(x[tile]).sum()
    return out


def chunks(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        a, b = torch.tensor_split(x[tile, :], 2, dim=0)  # along the tile (whole dims split: tests/test_ops.py)
        out[tile, :] = torch.cat([b, a], dim=-1)
    return out


def batch_mismatch(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(q)
    for tile_m in hl.tile(q.size(0)):
        for tile_n in hl.tile(k.size(0)):
            out[tile_m, :, :] = hl.dot(q[tile_m, :, :], k[tile_n, :, :].transpose(1, 2))
    return out


def ranks_differ_by_branch(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        if hl.load(x, [tile.begin]) > 0:
            v = hl.full([tile], 1.0, dtype=x.dtype)
        else:
            v = hl.full([tile, tile], 1.0, dtype=x.dtype)
        out[tile] = v.sum()
    return out


def _doubled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


inner_kernel = tessera.kernel(_doubled)  # a kernel with a tile loop of its own (one without runs inline)


def calls_a_kernel(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = inner_kernel(x[tile])
    return out


@pytest.mark.parametrize("fn, error, args", [
    (assigns_into_tile_value, exc.DeviceTensorSubscriptAssignmentNotAllowed, (torch.randn(6),)),
    (too_many_indices, exc.RankMismatch, (torch.randn(6),)),
    (boolean_mask, exc.DataDependentOutputShapeNotSupported, (torch.randn(2, 2), torch.eye(2, dtype=torch.bool))),
    (nonzero, exc.DataDependentOutputShapeNotSupported, (torch.randn(5),)),
    (chunks, exc.UnsupportedSplitOperation, (torch.randn(3, 4),)),
    (batch_mismatch, exc.DotBatchDimensionMismatch, (torch.randn(16, 16, 16), torch.randn(32, 16, 16))),
    (ranks_differ_by_branch, exc.ControlFlowTensorMismatch, (torch.randn(5),)),
    (calls_a_kernel, exc.NestedKernelCallsNotSupported, (torch.randn(5),)),
])
def test_each_traced_mistake_raises_helions_class(fn, error, args):
    with pytest.raises(error) as raised:
        run(fn, "interpret", *args)
    assert raised.value.location is not None and raised.value.location.filename == __file__


def test_helions_aliases_are_tesseras_classes():
    assert exc.ShapeMismatch is exc.ShapeMismatchError and exc.InvalidConfig is exc.ConfigError
    assert issubclass(exc.DotBatchDimensionMismatch, exc.ShapeMismatchError)
    assert issubclass(exc.RankMismatch, exc.IndexingError)


def test_too_few_block_sizes_is_invalid_config_with_both_counts():
    def copy3(x):
        out = torch.empty_like(x)
        for a, b, c in hl.tile(x.shape):
            out[a, b, c] = x[a, b, c]
        return out
    kernel = tessera.kernel(copy3, mode="interpret", config=tessera.Config(block_sizes=[4, 4]))
    with pytest.raises(exc.InvalidConfig, match="expected 3 block sizes, got 2"):
        kernel(torch.randn(3, 5, 1))


# -- the harness pieces Helion's tests use -----------------------------------------------------------

def test_check_example_skips_expected_none_and_compares_as_float32(tmp_path, monkeypatch):
    (tmp_path / "pair.py").write_text(
        "import torch\nimport tessera\nimport tessera.language as hl\n\n"
        "@tessera.kernel\n"
        "def pair(x):\n"
        "    out = torch.empty_like(x)\n"
        "    for tile in hl.tile(x.size(0)):\n"
        "        out[tile] = x[tile] * 2\n"
        "    return out, out.sum()\n")
    monkeypatch.setattr(_testing, "EXAMPLES_DIR", tmp_path)
    monkeypatch.setattr(tessera._test_case, "EXAMPLES_DIR", tmp_path)
    x = torch.randn(11, dtype=torch.float16)
    _testing.check_example("pair", (x,), ((x * 2).double(), None), emit_code=False)
    with pytest.raises(AssertionError):
        _testing.check_example("pair", (x,), (x * 3, None), emit_code=False)


def test_assigning_kernel_configs_replaces_them_and_is_used():
    kernel = tessera.kernel(add_rows, config=Config(block_sizes=[8]))
    kernel.configs = [Config(block_sizes=[4]), {"block_sizes": [2]}]
    assert kernel.configs == [Config(block_sizes=[4]), Config(block_sizes=[2])]
    assert kernel.settings.config is None


@pytest.mark.parametrize("given, environment, expected", [
    ({}, None, False), ({}, "eager", True), ({"ref_mode": RefMode.EAGER}, None, True),
    ({"ref_mode": RefMode.OFF}, "eager", False), ({"mode": "interpret"}, "eager", False),
])
def test_is_ref_mode_enabled_says_whether_calls_run_eagerly(given, environment, expected):
    kernel = tessera.kernel(add_rows, **given)
    with settings.override(mode=environment):
        assert is_ref_mode_enabled(kernel.settings) is expected


def add_rows(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + 1
    return out


def test_eager_mode_runs_on_one_cpu_thread_and_restores_the_count():
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            seen.append(torch.get_num_threads())
            out[tile] = x[tile] + 1
        return out
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(3)
        torch.testing.assert_close(tessera.kernel(record, mode="eager")(x), x + 1)
        assert set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("key", ["reduction_loops", "l2_groupings", "range_num_stages"])
def test_one_value_for_a_per_loop_list_key_is_a_one_entry_list(key):
    assert Config(**{key: 2})[key] == [2]
    assert Config(**{key: [2, 4]})[key] == [2, 4]


@pytest.mark.parametrize("size", [1, 7, 64])
def test_compile_config_runs_the_generated_code_under_that_config(size):
    kernel = tessera.kernel(add_rows, mode="interpret")
    x = torch.randn(size)
    bound = kernel.bind((x,))
    config = Config(block_sizes=[4], num_warps=2, static_ranges=[True])
    assert bound.config_spec.unsupported_config_keys(config.config) == ["static_ranges"]
    compiled = bound.compile_config(config)
    y = torch.randn(size + 3)
    torch.testing.assert_close(compiled(y), y + 1)


def clamp_with_builtins(values: torch.Tensor, low: int) -> torch.Tensor:
    out = torch.zeros_like(values)
    for i in hl.grid(values.size(0)):
        out[i] = min(max(values[i], low), 7)
    return out


def max_of_tiles(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = max(x[tile], y[tile], 0.5)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 6, 37])
def test_builtin_min_max_of_device_values_is_elementwise(mode, size):
    values = torch.arange(-3, size - 3, dtype=torch.int32) * 2
    result = run(clamp_with_builtins, mode, values, 3)
    torch.testing.assert_close(result, values.clamp(3, 7))
    if mode == "interpret":  # eager mode runs Python's max, which needs one-element tensors
        x, y = torch.randn(size), torch.randn(size)
        torch.testing.assert_close(run(max_of_tiles, mode, x, y), torch.maximum(torch.maximum(x, y), torch.tensor(0.5)))


def test_interpret_mode_ignores_triton_interpret_set_to_0_after_import(monkeypatch):
    run(add_rows, "interpret", torch.randn(3))  # Triton imported with its interpreter
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(10)
    torch.testing.assert_close(run(add_rows, "interpret", x), x + 1)


def two_launches(x: torch.Tensor, scale: float, shift: int) -> torch.Tensor:
    mid = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        mid[tile] = x[tile] * scale
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = mid[tile] + shift
    return out


@pytest.mark.parametrize("size", [1, 13])
def test_emit_repro_caller_gives_a_script_that_runs_every_launch(tmp_path, size):
    import os
    import subprocess
    import sys
    bound = tessera.kernel(two_launches, mode="interpret").bind((torch.randn(size), float("inf"), 3))
    code = bound.to_triton_code(Config(block_sizes=[4, 8]), emit_repro_caller=True)
    assert code.count("[(") == 2 and "tensor_1" in code  # two launches sharing `mid`
    assert "def two_launches_kernel(" in code and "def two_launches_kernel_launch2(" in code
    script = tmp_path / "repro.py"
    script.write_text(code)
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "every launch ran" in done.stdout


def functional_relu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.nn.functional.relu(x[tile]) + torch.nn.functional.silu(x[tile], inplace=False)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 19])
def test_functional_relu_with_its_default_inplace_keyword(mode, size):
    x = torch.randn(size)
    torch.testing.assert_close(run(functional_relu, mode, x), torch.relu(x) + torch.nn.functional.silu(x))


def test_too_many_arguments_is_a_type_error_with_both_counts():
    with pytest.raises(TypeError, match=r"expected: 1 got: 2\. .*too many positional arguments"):
        run(add_rows, "interpret", torch.randn(3), torch.randn(3))
