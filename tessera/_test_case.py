"""The test harness Helion's unit tests import from `helion._testing`, with Tessera's meanings.

A Helion test file ports by renaming `helion` to `tessera` in its imports; these names then
mean here what they mean there:

- `code_and_output(kernel, args, **config)`: bind, pick a Config (the given keys, else the
  kernel's single Config, else its default), return (generated code, result). In eager mode
  (`TESSERA_MODE=eager`, Tessera's counterpart of Helion's ref-eager mode) the "code" is the
  kernel's Python source, as in Helion.
- `TestCase.assertExpectedJournal(code)`: compares against Tessera's own journal
  `<test file>.tessera.expected`, never against Helion's `<test file>.expected` (that file
  holds Helion's Triton, which Tessera's generated code has no reason to match).
- `RefEagerTestBase` / `RefEagerTestDisabled` / `skipIfRefEager`: test classes that run in both
  modes, and those that need generated code.
- Skip and xfail decorators for platforms and backends, and the mode and backend queries, are in
  `tessera/_test_skips.py`.

>>> code, out = code_and_output(add, (x, y), block_sizes=[64])   # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import io
import logging
import os
import pathlib
import re
import sys
import types
import unittest
from typing import Any, Callable, Iterator, NamedTuple

import torch

from tessera import settings
from tessera.config import Config
from tessera._test_skips import Decorator, _get_backend, in_eager_mode
from tessera.runtime import kernel as kernel_module


PROJECT_ROOT: pathlib.Path = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES_DIR: pathlib.Path = PROJECT_ROOT / "examples"  # check_example reads it when called (tests may patch it)
JOURNAL_SUFFIX = ".tessera.expected"
_ACCEPT_VARIABLE = "EXPECTTEST_ACCEPT"


# ---- running kernels --------------------------------------------------------------------------

def import_path(filename: pathlib.Path | str) -> types.ModuleType:
    """Import a Python file as a module (once; later calls return the same module).

    Import hooks on `sys.meta_path` are asked first, as pytest asks them for test files, so a
    hook that rewrites sources (pytest's assertions, a module rename) also covers these files."""
    path = pathlib.Path(filename).resolve()
    name = f"{__name__}.{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = None
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        found = find_spec(name, [str(path.parent)]) if find_spec is not None else None
        if found is not None and found.origin is not None and pathlib.Path(found.origin).resolve() == path:
            spec = found
            break
    spec = spec or importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _test_config(kernel: Any, config_keys: dict[str, Any]) -> Config | None:
    """The Config of a test run: the given keys, else the kernel's only Config, else None (the
    kernel chooses, as a call would)."""
    if config_keys:
        return Config(**config_keys)
    configs = kernel.configs
    return configs[0] if len(configs) == 1 else None


def _run(kernel: Any, args: tuple, config_keys: dict[str, Any], with_code: bool) -> tuple[str | None, Any]:
    bound = kernel.bind_arguments(tuple(args), {})  # Helion passes one tuple: the arguments, even ((t,),)
    config = _test_config(kernel, config_keys)
    if kernel.mode_for(bound.device) == "eager":  # TESSERA_MODE=eager, or the kernel's mode / ref_mode
        kernel.rewritten()  # the rewrite's checks hold in eager mode too, as on a call
        result = kernel_module.run_eager(kernel.fn, bound.args, bound.kwargs, kernel.block_slots(),
                                         config or kernel.default_config(), bound.device)
        return (inspect.getsource(kernel.fn) if with_code else None), result
    code = bound.to_code(config) if with_code else None
    try:
        result = bound.run(config)
    except Exception:
        try:
            code = code or bound.to_code(config)
        except Exception:  # the run's own error is the one to see
            code = "(the code could not be generated either)"
        print(f"[tessera] the kernel failed to run; its code:\n{code}", file=sys.stderr)
        raise
    if bound.device.type == "cuda":
        torch.cuda.synchronize(bound.device)
    return code, result


@contextlib.contextmanager
def _counting_eager_runs() -> Iterator[list[int]]:
    """Count the kernel calls that run in eager mode inside the block."""
    count = [0]
    original = kernel_module.run_eager

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    kernel_module.run_eager = counted
    try:
        yield count
    finally:
        kernel_module.run_eager = original


@contextlib.contextmanager
def assert_ref_eager_mode() -> Iterator[None]:
    """Fail unless some kernel called in the block ran in eager mode (Helion's ref-eager mode)."""
    with _counting_eager_runs() as count:
        yield
    assert count[0] > 0, "no kernel call in the block ran in eager mode"


@contextlib.contextmanager
def assert_helion_compilation() -> Iterator[None]:
    """Fail if a kernel called in the block ran in eager mode instead of generated code."""
    with _counting_eager_runs() as count:
        yield
    assert count[0] == 0, f"{count[0]} kernel call(s) in the block ran in eager mode"


def code_and_output(fn: Any, args: tuple, **config_keys: Any) -> tuple[str, Any]:
    """Run kernel `fn` on `args` under the Config `config_keys` describe (else the kernel's
    own); return (its generated code, its result). In eager mode the code is the kernel's source.

    >>> code, out = code_and_output(add, (x, y), block_sizes=[32])   # doctest: +SKIP
    """
    code, result = _run(fn, tuple(args), config_keys, with_code=True)
    assert code is not None
    return code, result


def output_only(fn: Any, args: tuple, **config_keys: Any) -> Any:
    """`code_and_output` without generating the code text: the result only."""
    return _run(fn, tuple(args), config_keys, with_code=False)[1]


def check_example(name: str, args: tuple, expected: Any, fn_name: str | None = None,
                  skip_accuracy: bool = False, static_shapes: bool | None = None,
                  atol: float = 1e-1, rtol: float = 1e-2, emit_code: bool = True,
                  max_mismatch_pct: float | None = None, max_mismatched_abs_diff: float | None = None,
                  cos_sim: tuple[int, float] | None = None, **config_keys: Any) -> str:
    """Run kernel `fn_name` (default `name`) of Tessera's `examples/<name>.py` on `args` and
    compare with `expected`; return the generated code ("" when `emit_code` is false)."""
    kernel = getattr(import_path(EXAMPLES_DIR / f"{name}.py"), fn_name or name)
    if static_shapes is not None:
        kernel.settings.static_shapes = static_shapes
    if emit_code:
        code, result = code_and_output(kernel, args, **config_keys)
    else:
        code, result = "", output_only(kernel, args, **config_keys)
    if skip_accuracy:
        return code

    def compare(got: Any, want: Any) -> None:
        if cos_sim is not None:
            _cos_similar(got, want, cos_sim)
        elif max_mismatch_pct is not None:
            assert_close_with_mismatch_tolerance(got, want, atol=atol, rtol=rtol, max_mismatch_pct=max_mismatch_pct,
                                                 max_mismatched_abs_diff=max_mismatched_abs_diff)
        else:
            torch.testing.assert_close(got, want, atol=atol, rtol=rtol)

    _compare_results(result, expected, compare)
    return code


def _compare_results(result: Any, expected: Any, compare: Callable[[Any, Any], None]) -> None:
    """Walk `expected` and `result` together (tuples, lists, dicts of tensors): an expected None
    means "not checked" (a kernel's optional second output), and tensors compare as float32, so
    a reference computed in another precision or dtype still checks the values."""
    if expected is None:
        return
    if isinstance(expected, (tuple, list)):
        assert isinstance(result, (tuple, list)) and len(result) == len(expected), \
            f"expected {len(expected)} outputs, got {type(result).__name__} {result!r:.200}"
        for got, want in zip(result, expected):
            _compare_results(got, want, compare)
    elif isinstance(expected, dict):
        assert isinstance(result, dict) and result.keys() == expected.keys(), f"expected keys {list(expected)}"
        for key in expected:
            _compare_results(result[key], expected[key], compare)
    elif isinstance(expected, torch.Tensor) and isinstance(result, torch.Tensor):
        compare(result.to(torch.float32), expected.to(torch.float32))
    else:
        compare(result, expected)


class CosSimilarity(NamedTuple):
    """Accept a result whose cosine similarity with the expected one along `dim` is at least
    `min_similarity` everywhere (for `check_example(cos_sim=...)`)."""
    dim: int
    min_similarity: float


def assert_close_with_mismatch_tolerance(actual: Any, expected: Any, *, atol: float = 1e-4, rtol: float = 1e-4,
                                         max_mismatch_pct: float = 0.01, max_mismatched_abs_diff: float | None = None,
                                         max_abs_diff: float | None = None, max_rel_diff: float | None = None) -> None:
    """`torch.testing.assert_close`, except that tensors may differ in up to `max_mismatch_pct`
    of their elements (a mismatch: `|a - e| > atol + rtol * |e|`), within the optional bounds on
    the mismatched elements' difference, every element's difference and the relative difference."""
    try:
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
        return
    except AssertionError:
        if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
            raise
    difference = (actual - expected).abs()
    mismatched = difference > atol + rtol * expected.abs()
    fraction = mismatched.float().mean().item() if mismatched.numel() else 0.0
    bounds = [("mismatched elements", fraction, max_mismatch_pct),
              ("difference of a mismatched element",
               difference[mismatched].max().item() if mismatched.any() else 0.0, max_mismatched_abs_diff),
              ("absolute difference", difference.max().item(), max_abs_diff),
              ("relative difference", (difference / expected.abs().clamp(min=1e-6)).max().item(), max_rel_diff)]
    for what, value, bound in bounds:
        if bound is not None and value > bound:
            raise AssertionError(f"{what}: {value:.6g} > {bound}")


def _cos_similar(result: Any, expected: Any, cos_sim: tuple[int, float]) -> None:
    dim, minimum = cos_sim
    similarity = torch.nn.functional.cosine_similarity(result.double(), expected.double(), dim=dim)
    worst = similarity.min().item()
    assert worst >= minimum, f"cosine similarity {worst:.6f} < {minimum} along dim {dim}"


# ---- the expected-output journal ---------------------------------------------------------------

_HEADER = re.compile(r"^=== (\S+) call (\d+) ===$", re.MULTILINE)


class Journal:
    """Tessera's expected outputs of one test file, `<test file>.tessera.expected`.

    Entries are keyed by test id (`Class.test_name`) and call number within the test; each mode
    and backend has its own file (`journal_path`). A missing
    entry is recorded (and said so on stderr); `EXPECTTEST_ACCEPT=1` rewrites entries; otherwise a
    differing value fails. Helion's own `<test file>.expected` holds Helion's Triton output and is
    never read: Tessera's generated code is not expected to match it.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.entries: dict[tuple[str, int], str] = self._read()

    def _read(self) -> dict[tuple[str, int], str]:
        if not self.path.exists():
            return {}
        text = self.path.read_text()
        headers = list(_HEADER.finditer(text))
        entries = {}
        for index, header in enumerate(headers):
            end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
            entries[(header.group(1), int(header.group(2)))] = text[header.end() + 1:end].rstrip("\n")
        return entries

    def write(self) -> None:
        parts = [f"=== {test} call {number} ===\n{value}\n"
                 for (test, number), value in sorted(self.entries.items())]
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text("\n".join(parts))
        os.replace(temporary, self.path)

    def check(self, test: str, number: int, value: str) -> str | None:
        """None when `value` matches (or was just recorded), else the expected text."""
        value = value.strip("\n")
        key = (test, number)
        expected = self.entries.get(key)
        if expected == value:
            return None
        if expected is None or os.environ.get(_ACCEPT_VARIABLE, "") not in ("", "0"):
            self.entries = {**self._read(), key: value}  # re-read: another process may have written
            self.write()
            verb = "recorded" if expected is None else "rewrote"
            print(f"[tessera] {verb} expected output {test} call {number} in {self.path}", file=sys.stderr)
            return None
        return expected


class AssertExpectedJournal:
    """Helion's journal class, for its text helpers: generated code with the line numbers of its
    source comments (`# add.py:12: out[tile] = ...`) written as `add.py:N`, so a test can look
    for numbers in the code itself."""

    @staticmethod
    def normalize_source_comment_structure(code: str) -> str:
        return re.sub(r"(\b[^:\s]+\.py):(\d+)\b", r"\1:N", code)

    @classmethod
    def normalize_code(cls, code: str) -> str:
        return cls.normalize_source_comment_structure(code)


def journal_path(test_class: type) -> pathlib.Path:
    """`<test file>.tessera.expected`, for the generated code of compiled Triton runs; other
    modes and backends keep their own file (`..._interpret`, `..._eager`, `..._pallas`): the
    interpreter's code may differ, and eager mode's "code" is the kernel's source."""
    source = pathlib.Path(inspect.getfile(test_class)).resolve()
    mode = settings.get("mode") or ("compiled" if torch.cuda.is_available() else "interpret")
    variant = [name for name in (_get_backend(), mode) if name not in ("triton", "compiled")]
    return source.with_name(source.stem + JOURNAL_SUFFIX + "".join(f"_{name}" for name in variant))


class TestCase(unittest.TestCase):
    """`unittest.TestCase` with `assertExpectedJournal` (see `Journal`)."""

    maxDiff = 16384
    _journals: dict[pathlib.Path, Journal] = {}

    def setUp(self) -> None:
        super().setUp()
        self._journal_calls = 0

    def _journal(self) -> Journal:
        path = journal_path(type(self))
        if path not in TestCase._journals:
            TestCase._journals[path] = Journal(path)
        return TestCase._journals[path]

    def assertExpectedJournal(self, value: str) -> None:
        """Compare `value` (generated code, usually) with this test's next journal entry."""
        self._journal_calls = getattr(self, "_journal_calls", 0) + 1
        test = ".".join(self.id().split(".")[-2:])
        expected = self._journal().check(test, self._journal_calls, value)
        if expected is not None:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), value.strip("\n").splitlines(True),
                                                "expected", "actual"))
            self.fail(f"{test} call {self._journal_calls} differs from {self._journal().path}:\n{diff}\n"
                      f"To accept the new output, run again with {_ACCEPT_VARIABLE}=1")


    @contextlib.contextmanager
    def capture_logs(self) -> Iterator[_LogRecords]:
        """Collect the log records emitted in the block (every logger, every level)."""
        handler = _LogRecords()
        logging.getLogger().addHandler(handler)
        try:
            yield handler
        finally:
            logging.getLogger().removeHandler(handler)

    @contextlib.contextmanager
    def capture_output(self) -> Iterator[_Output]:
        """Collect what the block writes to sys.stdout and sys.stderr (`.readouterr()`)."""
        output = _Output()
        with contextlib.redirect_stdout(output.stdout), contextlib.redirect_stderr(output.stderr):
            yield output


class _LogRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def clear(self) -> None:
        self.records.clear()


class _Output:
    def __init__(self) -> None:
        self.stdout, self.stderr = io.StringIO(), io.StringIO()

    def readouterr(self) -> tuple[str, str]:
        """(stdout, stderr) so far; both are emptied."""
        texts = self.stdout.getvalue(), self.stderr.getvalue()
        for stream in (self.stdout, self.stderr):
            stream.seek(0)
            stream.truncate()
        return texts


class RefEagerTestBase:
    """Mixin for test classes that run in both modes. In eager mode the assertions about
    generated code (the journal, `assertIn` on code text, ...) do nothing: there is no generated
    code, and the "code" `code_and_output` returns is the kernel's source."""

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self._in_ref_eager_mode = in_eager_mode()

    def getUserDefinedTunable(self, tunables: dict[str, Any], key: str) -> Any:
        """A tunable's value from a Config; None in eager mode, where no Config is chosen."""
        return None if self._in_ref_eager_mode else tunables.get(key)


def _normal_mode_only(base_name: str) -> Callable[..., None]:
    def check(self: Any, *args: Any, **kwargs: Any) -> None:
        if not self._in_ref_eager_mode:
            getattr(super(RefEagerTestBase, self), base_name)(*args, **kwargs)
    check.__doc__ = f"`{base_name}` outside eager mode; nothing in eager mode."
    return check


# The assertions about generated code (or objects only compiled runs make), Helion's names first:
# each checks in normal mode and does nothing in eager mode.
for _name, _base in {"assertExpectedJournal": "assertExpectedJournal", "assertIn": "assertIn",
                     "assertNotIn": "assertNotIn", "assertIs": "assertIs", "assertIsNot": "assertIsNot",
                     "assertIsInstance": "assertIsInstance", "assertTrueIfInNormalMode": "assertTrue",
                     "assertEqualCode": "assertEqual", "assertNotEqualCode": "assertNotEqual"}.items():
    setattr(RefEagerTestBase, _name, _normal_mode_only(_base))
del _name, _base


class RefEagerTestDisabled:
    """Mixin for test classes that need generated code: skipped in eager mode."""

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        if in_eager_mode():
            self.skipTest("needs generated code: not run in eager mode")  # type: ignore[attr-defined]
