"""The Helion unit-test harness (`tessera._testing`): code_and_output, the journal, decorators."""
from __future__ import annotations

import os
import sys
import textwrap
import unittest

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import _test_case
from tessera._testing import (RefEagerTestBase, RefEagerTestDisabled, TestCase, code_and_output, import_path,
                              onlyBackends, output_only, skipIfFn, skipIfRefEager, xfailIfFn)


@tessera.kernel
def add_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + 1
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("size", [1, 37, 64])
def test_code_and_output(mode, size, monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", mode)
    x = torch.randn(size)
    code, result = code_and_output(add_one, (x,), block_sizes=[16])
    torch.testing.assert_close(result, x + 1)
    if mode == "eager":
        assert code.lstrip().startswith("@tessera.kernel") and "def add_one" in code
    else:
        assert "@triton.jit" in code and "16" in code
    torch.testing.assert_close(output_only(add_one, (x,), block_sizes=[32]), x + 1)


def test_code_and_output_uses_the_config(monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    x = torch.randn(40)
    small, _ = code_and_output(add_one, (x,), block_sizes=[8])
    large, _ = code_and_output(add_one, (x,), block_sizes=[64])
    assert small != large


def test_code_and_output_without_keys_takes_the_kernels_single_config(monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    pinned = tessera.kernel(add_one.fn, config=tessera.Config(block_sizes=[8]))
    x = torch.randn(20)
    code, result = code_and_output(pinned, (x,))
    torch.testing.assert_close(result, x + 1)
    assert code == pinned.bind(x).to_code(tessera.Config(block_sizes=[8]))


@tessera.kernel
def sum_of_tuple(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    out = torch.zeros_like(tensors[0])
    for tile in hl.tile(out.size(0)):
        for t in tensors:
            out[tile] += t[tile]
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("count", [1, 2])
def test_code_and_output_passes_a_one_tuple_argument_as_the_tuple(mode, count, monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", mode)
    tensors = tuple(torch.randn(9) for _ in range(count))
    _, result = code_and_output(sum_of_tuple, (tensors,))  # Helion's form: the argument tuple
    torch.testing.assert_close(result, sum(tensors))


def test_normalized_code_has_no_source_line_numbers(monkeypatch):
    from tessera._testing import AssertExpectedJournal
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    code, _ = code_and_output(add_one, (torch.randn(48),), block_sizes=[16])
    line = add_one.fn.__code__.co_firstlineno + 4  # (the decorator's line) the line of `out[tile] = x[tile] + 1`
    assert f"test_helion_testing.py:{line}:" in code
    normalized = AssertExpectedJournal.normalize_source_comment_structure(code)
    assert "test_helion_testing.py:N: out[tile] = x[tile] + 1" in normalized and str(line) not in normalized


def _journal_case(tmp_path, value_source: str):
    """A test class defined in a file under tmp_path (the journal sits beside its file)."""
    path = tmp_path / "test_journal_case.py"
    path.write_text(textwrap.dedent(f"""
        from tessera._testing import TestCase
        class Case(TestCase):
            def test_code(self):
                self.assertExpectedJournal({value_source!r})
                self.assertExpectedJournal("second")
    """))
    _test_case.TestCase._journals.clear()
    sys.modules.pop(f"{_test_case.__name__}.{path.stem}", None)  # import afresh
    module = import_path(path)
    return module.Case, _test_case.journal_path(module.Case)


def _run_case(case: type) -> unittest.TestResult:
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    return result


def test_journal_records_compares_and_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("EXPECTTEST_ACCEPT", raising=False)
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    case, journal = _journal_case(tmp_path, "first value")
    assert _run_case(case).wasSuccessful()
    assert "recorded expected output Case.test_code call 1" in capsys.readouterr().err
    text = journal.read_text()
    assert "first value" in text and "second" in text

    case, _ = _journal_case(tmp_path, "first value")
    assert _run_case(case).wasSuccessful()  # read back from the file: matches
    assert "recorded" not in capsys.readouterr().err

    case, _ = _journal_case(tmp_path, "changed value")
    result = _run_case(case)
    assert len(result.failures) == 1
    message = result.failures[0][1]
    assert "-first value" in message and "+changed value" in message and "EXPECTTEST_ACCEPT=1" in message
    assert journal.read_text() == text

    monkeypatch.setenv("EXPECTTEST_ACCEPT", "1")
    case, _ = _journal_case(tmp_path, "changed value")
    assert _run_case(case).wasSuccessful()
    assert "changed value" in journal.read_text() and "first value" not in journal.read_text()
    assert journal.name == "test_journal_case.tessera.expected_interpret"


def test_journal_per_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("EXPECTTEST_ACCEPT", raising=False)
    monkeypatch.setenv("TESSERA_MODE", "compiled")
    monkeypatch.setenv("TESSERA_BACKEND", "triton")
    case, journal = _journal_case(tmp_path, "generated code")
    assert journal.name == "test_journal_case.tessera.expected"
    monkeypatch.setenv("TESSERA_MODE", "eager")
    eager_case, eager_journal = _journal_case(tmp_path, "kernel source")
    assert _run_case(eager_case).wasSuccessful()  # recorded apart: the compiled journal is untouched
    assert eager_journal.name == "test_journal_case.tessera.expected_eager" and not journal.exists()


def test_journal_never_reads_helions_expected_file(tmp_path, monkeypatch):
    monkeypatch.delenv("EXPECTTEST_ACCEPT", raising=False)
    (tmp_path / "test_journal_case.expected").write_text("--- assertExpectedJournal(Case.test_code)\nhelion\n")
    case, journal = _journal_case(tmp_path, "tessera code")
    assert _run_case(case).wasSuccessful()
    assert journal.exists()


class _Modes(RefEagerTestBase, TestCase):
    __test__ = False  # run by test_ref_eager_classes under each mode

    def test_code(self):
        code, result = code_and_output(add_one, (torch.zeros(5),), block_sizes=[4])
        torch.testing.assert_close(result, torch.ones(5))
        self.assertIn("tl.load", code)  # generated code only: no-op in eager mode


class _Disabled(RefEagerTestDisabled, TestCase):
    __test__ = False

    def test_nothing(self):
        pass


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_ref_eager_classes(mode, monkeypatch, device):
    if mode == "interpret" and device.type == "cuda":
        pytest.skip("runs a kernel in Triton's interpreter: the CPU suite covers it")
    monkeypatch.setenv("TESSERA_MODE", mode)
    result = _run_case(_Modes)
    assert result.wasSuccessful(), result.failures + result.errors
    disabled = _run_case(_Disabled)
    assert len(disabled.skipped) == (1 if mode == "eager" else 0)


def test_skip_decorators_decide_when_the_test_runs(monkeypatch):
    asked = []

    def condition():
        asked.append(True)
        return os.environ.get("TESSERA_MODE") == "eager"

    class Case(unittest.TestCase):
        @skipIfFn(condition, "skipped")
        def test_a(self):
            pass

        @skipIfRefEager("needs code")
        def test_b(self):
            pass

    assert not asked  # decorating asked nothing
    monkeypatch.setenv("TESSERA_MODE", "eager")
    assert len(_run_case(Case).skipped) == 2
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    result = _run_case(Case)
    assert result.wasSuccessful() and not result.skipped


def test_skip_decorator_on_a_class(monkeypatch):
    @skipIfFn(lambda: True, "whole class")
    class Case(unittest.TestCase):
        def test_a(self):
            raise AssertionError("ran")

    result = _run_case(Case)
    assert [reason for _, reason in result.skipped] == ["whole class"]


def test_xfail_and_only_backends(monkeypatch):
    class Case(unittest.TestCase):
        @xfailIfFn(lambda: True, "known")
        def test_fails(self):
            raise AssertionError

        @xfailIfFn(lambda: False, "not now")
        def test_passes(self):
            pass

    result = _run_case(Case)
    assert len(result.expectedFailures) == 1 and result.wasSuccessful()

    monkeypatch.setenv("TESSERA_BACKEND", "triton")

    @onlyBackends(["pallas"])
    class PallasOnly(unittest.TestCase):
        def test_a(self):
            raise AssertionError

    @onlyBackends(["triton"])
    class TritonOnly(unittest.TestCase):
        def test_a(self):
            pass

    assert len(_run_case(PallasOnly).skipped) == 1
    assert _run_case(TritonOnly).wasSuccessful() and not _run_case(TritonOnly).skipped


def test_skip_decorators_need_a_reason():
    with pytest.raises(TypeError, match="reason string"):
        skipIfRefEager(lambda: None)


# ---- benchmarks/helion_tests.py: the import hook and the file classification -------------------

from benchmarks import helion_tests  # noqa: E402


def test_runner_classifies_helion_internals():
    source = textwrap.dedent("""
        import helion
        import helion.language as hl
        from helion._testing import code_and_output
        from helion import exc, _compat
        from helion.runtime.settings import Settings
        def f():
            from helion._compiler.x import y
    """)
    assert helion_tests.helion_internals(source) == ["helion._compat", "helion._compiler.x", "helion.runtime.settings"]
    assert helion_tests.helion_internals("import helion\nfrom helion.language import tile\n") == []
    assert helion_tests.missing_module("import torch\nfrom helion._no_such_module import x\n") == \
        "tessera._no_such_module"
    assert helion_tests.missing_module("import helion.language as hl\n") is None


def test_runner_renames_imports_of_files_under_its_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "helpers_x.py").write_text("import helion.language as hl\nTILE = hl.tile\n")
    (tmp_path / "renamed_probe.py").write_text(textwrap.dedent("""
        import helion
        from helion._testing import import_path
        from pathlib import Path
        helpers = import_path(Path(__file__).parent / "data" / "helpers_x.py")
    """))
    finder = helion_tests._RenamingFinder(tmp_path.resolve())
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("renamed_probe", f"{_test_case.__name__}.helpers_x"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = __import__("renamed_probe")
    assert module.helion is tessera and module.helpers.TILE is hl.tile
    assert "import helion" in (tmp_path / "renamed_probe.py").read_text()  # the file is untouched


def test_runner_separates_assertions_on_code_text():
    assert helion_tests._about_code_text("AssertionError: 'tl.range' not found in '# Generated by Tessera. x'")
    assert not helion_tests._about_code_text("AssertionError: Tensor-likes are not close!")


# ---- fixes found by Helion's tests ----------------------------------------------------------------

def _double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_configs_given_as_dicts(mode, monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", mode)
    one = tessera.kernel(_double, config={"block_size": 16})
    assert one.configs == [tessera.Config(block_sizes=[16])]
    several = tessera.kernel(_double, configs=[{"block_sizes": [8]}, tessera.Config(block_sizes=[4])])
    assert several.configs == [tessera.Config(block_sizes=[8]), tessera.Config(block_sizes=[4])]
    x = torch.randn(37)
    torch.testing.assert_close(one(x), x * 2)
    bound = several.bind(x)
    torch.testing.assert_close(bound.run({"block_sizes": [8]}), x * 2)
    if mode == "interpret":
        assert bound.to_code({"block_sizes": [8]}) == bound.to_code(tessera.Config(block_sizes=[8]))
    with pytest.raises(tessera.exc.ConfigError):
        tessera.kernel(_double, config={"block_sizes": "64"})


def test_bound_kernel_is_callable(monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    kernel = tessera.kernel(_double)
    bound = kernel.bind(torch.ones(5))
    y = torch.randn(9)
    torch.testing.assert_close(bound(y), y * 2)


def test_helions_singular_config_keys():
    assert tessera.Config(loop_order=(1, 0), reduction_loop=16, range_unroll_factor=2) == tessera.Config(
        loop_orders=[[1, 0]], reduction_loops=[16], range_unroll_factors=[2])
    with pytest.raises(tessera.exc.ConfigError, match="both loop_order and loop_orders"):
        tessera.Config(loop_order=[1, 0], loop_orders=[[1, 0]])


@tessera.kernel
def _add_2d(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("shape", [(1, 1), (13, 40)])
def test_loop_order_shorthand_runs(mode, shape, monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", mode)
    x, y = torch.randn(shape), torch.randn(shape)
    _, result = code_and_output(_add_2d, (x, y), block_size=[16, 8], loop_order=(1, 0))
    torch.testing.assert_close(result, x + y)


def test_bind_takes_helions_list_of_arguments(monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    bound = _add_2d.bind([x, y])
    assert bound.args == (x, y)
    torch.testing.assert_close(bound.run(), x + y)


def test_mismatch_tolerance_and_captures():
    from tessera._testing import assert_close_with_mismatch_tolerance, skipIfPyTorchBaseVerLessThan
    expected = torch.zeros(1000)
    one_off = expected.clone()
    one_off[3] = 5.0
    assert_close_with_mismatch_tolerance(one_off, expected)  # 0.1% of the elements <= 1%
    with pytest.raises(AssertionError, match="difference of a mismatched element"):
        assert_close_with_mismatch_tolerance(one_off, expected, max_mismatched_abs_diff=1.0)
    with pytest.raises(AssertionError, match="mismatched elements"):
        assert_close_with_mismatch_tolerance(torch.ones(1000), expected)

    class Case(TestCase):
        def test_capture(self):
            with self.capture_output() as output:
                print("out")
                print("err", file=sys.stderr)
            self.assertEqual(output.readouterr(), ("out\n", "err\n"))
            with self.capture_logs() as logs:
                __import__("logging").getLogger("tessera.test").warning("logged")
            self.assertEqual([r.getMessage() for r in logs.records], ["logged"])

        @skipIfPyTorchBaseVerLessThan("999.0")
        def test_future_torch(self):
            raise AssertionError("ran")

    result = _run_case(Case)
    assert result.wasSuccessful(), result.failures + result.errors
    assert len(result.skipped) == 1


def test_tensor_descriptor_probes(monkeypatch):
    from tessera import _compat
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    x = torch.randn(16, 32)
    code = _add_2d.bind(x, x).to_code(tessera.Config(block_sizes=[8, 16], indexing="tensor_descriptor"))
    assert f"{_compat.get_tensor_descriptor_fn_name()}(" in code
    assert _compat.supports_tensor_descriptor() is (torch.cuda.is_available() and torch.version.hip is None
                                                    and torch.cuda.get_device_capability()[0] >= 9)
    monkeypatch.setattr(_compat, "_supports_tensor_descriptor", lambda: True)
    assert _compat.supports_tensor_descriptor()


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_assert_ref_eager_mode(mode, monkeypatch):
    from tessera._testing import HALF_DTYPE, assert_helion_compilation, assert_ref_eager_mode
    assert HALF_DTYPE is torch.float16  # Helion's meaning off TPUs
    monkeypatch.setenv("TESSERA_MODE", mode)
    x = torch.randn(7)
    holds, fails = (assert_ref_eager_mode, assert_helion_compilation)[::1 if mode == "eager" else -1]
    with holds():
        add_one(x)
        code_and_output(add_one, (x,))
    with pytest.raises(AssertionError):
        with fails():
            add_one(x)


def test_code_and_output_follows_the_kernels_own_mode(monkeypatch):
    monkeypatch.setenv("TESSERA_MODE", "interpret")
    eager_kernel = tessera.kernel(_double, mode="eager")
    x = torch.randn(6)
    code, result = code_and_output(eager_kernel, (x,))
    assert "def _double" in code
    torch.testing.assert_close(result, x * 2)


def test_min_dot_size_probe():
    from tessera import _compat
    assert _compat.min_dot_size(torch.device("cpu"), torch.float16, torch.float16) == (16, 16, 16)


@pytest.mark.skipif(torch.accelerator.is_available(), reason="the CPU-only behaviour")
def test_accelerator_synchronize_returns_on_a_cpu_only_machine():
    # Helion's tests call it after printing kernels and timings; with DEVICE the CPU nothing is queued
    assert torch.accelerator.synchronize() is None
    with pytest.raises(RuntimeError):
        torch.accelerator.synchronize("cpu")  # a device named explicitly is torch's own answer
