"""Run Helion's own unit tests on Tessera, changing only their imports (issue 15).

    git -C /path/to/helion archive HEAD test examples | tar -x -C /tmp/helion_tests   # never inside this repo
    PYTHONPATH=. python3 benchmarks/helion_tests.py /tmp/helion_tests/test --mode interpret \\
        --out benchmarks/results/helion_tests

Every `test_*.py` of the folder runs in its own subprocess: pytest (`-p no:cacheprovider`,
plain asserts) with an import hook that rewrites each module loaded from the checkout (the folder's
parent) as it is imported (the test files, their `data/` helpers and the `examples/` they load
through `import_path` or `from examples.x import ...`): on lines that import
`helion` the module name becomes `tessera`, the same rewrite as `helion_examples.py`. Nothing is
edited or saved; line numbers are kept. The environment sets `TESSERA_MODE` to the mode, and in
eager mode also `HELION_INTERPRET=1` (Helion's name for its eager mode, which some tests read
directly), in interpret mode `TRITON_INTERPRET=1` (files that import triton before helion). CUDA is hidden in both modes.

Each test is limited to `--test-timeout` seconds (SIGALRM, a failure), each file to `--timeout`
(the tests finished by then still count). Per file: passed, failed, errors, skipped, xfailed,
xpassed, and a file whose import fails counts as one import error ("its tests are lost"). Files
that import Helion internals (anything but `helion`, `helion.language`, `helion.exc`,
`helion.autotuner` and `helion._testing`) are totalled separately. `--out DIR` writes
`<mode>.md` and `<mode>.json`, with the most common first lines of failures.
"""
from __future__ import annotations

import argparse
import ast
import collections
import importlib.abc
import importlib.machinery
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import Any

_REPOSITORY = str(pathlib.Path(__file__).resolve().parents[1])
if _REPOSITORY not in sys.path:  # run as a script: make `benchmarks` (and `tessera`) importable
    sys.path.insert(0, _REPOSITORY)
from benchmarks.helion_examples import rewrite_imports  # noqa: E402

PUBLIC_MODULES = frozenset({"helion", "helion.language", "helion.exc", "helion.autotuner", "helion._testing"})
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def helion_internals(source: str) -> list[str]:
    """The Helion modules outside the public surface that `source` imports (anywhere in it)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from helion import _compat` imports a private submodule
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names
                                     if node.module == "helion" and alias.name.startswith("_")]
        else:
            continue
        found.update(name for name in names if name.split(".")[0] == "helion" and name not in PUBLIC_MODULES)
    return sorted(found)


def missing_module(source: str) -> str | None:
    """The first module a top-level import of `source` names that, renamed to `tessera`, does not
    exist: the file's import would fail there, so it is not run (a subprocess costs ~20 s)."""
    import importlib.util
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] != "helion":
                continue
            renamed = "tessera" + name[len("helion"):]
            try:
                found = importlib.util.find_spec(renamed)
            except ModuleNotFoundError:
                found = None
            if found is None:
                return renamed
    return None


# -- the child: one test file under pytest ------------------------------------------------------

class _RenamingLoader(importlib.abc.Loader):
    """Executes a source file with its `helion` imports renamed."""

    def __init__(self, path: str) -> None:
        self.path = path

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        source = rewrite_imports(pathlib.Path(self.path).read_text())
        exec(compile(source, self.path, "exec"), module.__dict__)


class _RenamingFinder(importlib.abc.MetaPathFinder):
    """Claims the modules whose file lies under `root`, to load them through `_RenamingLoader`."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        origin = pathlib.Path(spec.origin).resolve()
        if self.root not in origin.parents:
            return None
        renamed = importlib.machinery.ModuleSpec(fullname, _RenamingLoader(str(origin)), origin=str(origin),
                                                 is_package=spec.submodule_search_locations is not None)
        if spec.submodule_search_locations is not None:
            renamed.submodule_search_locations = list(spec.submodule_search_locations)
        renamed.has_location = True
        return renamed


class _Recorder:
    """A pytest plugin: one JSON line per test outcome (appended as they come, so a file that
    runs out of time keeps what it finished), and a SIGALRM limit per test."""

    def __init__(self, result_path: str, test_timeout: float) -> None:
        self.result_path = result_path
        self.test_timeout = test_timeout

    def _write(self, row: dict[str, Any]) -> None:
        with open(self.result_path, "a") as handle:
            handle.write(json.dumps(row) + "\n")

    def pytest_runtest_call(self, item: Any) -> None:
        self.in_call = True

        def over(signum: int, frame: Any) -> None:
            # only inside the test: an alarm landing between the call and its teardown (pytest
            # making the report) would be pytest's INTERNALERROR and end the file
            if getattr(self, "in_call", False):
                raise TimeoutError(f"test ran over {self.test_timeout:.0f} s")
        signal.signal(signal.SIGALRM, over)
        signal.setitimer(signal.ITIMER_REAL, self.test_timeout)

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        if call.when == "call":
            self.in_call = False

    def pytest_runtest_teardown(self, item: Any) -> None:
        self.in_call = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    def pytest_runtest_logreport(self, report: Any) -> None:
        outcome = None
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed" if report.passed else None
        elif report.when == "call":
            outcome = report.outcome
        elif report.failed:
            outcome = "error"  # setup or teardown failed
        elif report.skipped:
            outcome = "skipped"  # skipped in setup (decorators, setUp's skipTest)
        if outcome is not None:
            self._write({"test": report.nodeid, "outcome": outcome, "message": _crash_line(report)})

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._write({"test": report.nodeid, "outcome": "import error", "message": _crash_line(report)})
        elif report.skipped:  # a whole module or class skipped as it is collected
            self._write({"test": report.nodeid, "outcome": "skipped", "message": _crash_line(report)})


def _crash_line(report: Any) -> str:
    if report.passed:
        return ""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        text = str(report.longrepr[2])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not crash and lines:  # a collection error's text ends with the exception
        errors = [line for line in lines if line.startswith("E ")]
        lines = [errors[-1][1:].strip()] if errors else lines[-1:]
    first = lines[0] if lines else ""
    return first if len(first) <= 200 else first[:197] + "..."


def run_child(path: str, result_path: str, test_timeout: float) -> int:
    import pytest
    root = pathlib.Path(path).resolve().parent
    # the checkout (the test folder's parent): tests also load its examples/ through import_path
    sys.meta_path.insert(0, _RenamingFinder(root.parent))
    # the tests' EXAMPLES_DIR and check_example() load the checkout's examples, not Tessera's own
    from tessera import _test_case, _testing
    _test_case.EXAMPLES_DIR = _testing.EXAMPLES_DIR = root.parent / "examples"
    return int(pytest.main([path, "-q", "-p", "no:cacheprovider", "--assert=plain", "-p", "no:warnings",
                            "-o", "addopts=", "--rootdir", str(root.parent)],
                           plugins=[_Recorder(result_path, test_timeout)]))


# -- the parent: every file ---------------------------------------------------------------------

def _run_file(path: pathlib.Path, args: argparse.Namespace, scratch: pathlib.Path) -> dict[str, Any]:
    result_path = scratch / f"{path.stem}.jsonl"
    result_path.unlink(missing_ok=True)
    source = path.read_text()
    absent = missing_module(source)
    if absent is not None:
        return {"file": path.name, "internals": helion_internals(source), "counts": {"import error": 1},
                "note": "", "seconds": 0.0, "tests": [{"test": path.name, "outcome": "import error",
                                                       "message": f"ModuleNotFoundError: No module named '{absent}'"}]}
    env = dict(os.environ, TESSERA_MODE=args.mode, CUDA_VISIBLE_DEVICES="")
    if args.mode == "eager":
        env["HELION_INTERPRET"] = "1"
    else:  # test files that import triton before helion get its interpreter, as Helion's CPU CI sets it
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pathlib.Path(__file__).resolve().parents[1]),
                                                    env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", str(path),
               "--result", str(result_path), "--test-timeout", str(args.test_timeout)]
    began, note = time.perf_counter(), ""
    try:
        with open(scratch / f"{path.stem}.log", "w") as log:
            subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout,
                           cwd=str(path.parent))
    except subprocess.TimeoutExpired:
        note = f"file timed out after {args.timeout:.0f} s"
    rows = [json.loads(line) for line in result_path.read_text().splitlines()] if result_path.exists() else []
    if not rows and not note:
        note = "no results (crashed?)"
    counts = collections.Counter(row["outcome"] for row in rows)
    return {"file": path.name, "internals": helion_internals(source), "counts": dict(counts),
            "note": note, "seconds": round(time.perf_counter() - began, 1), "tests": rows}


def _recorded(path: pathlib.Path, scratch: pathlib.Path) -> dict[str, Any]:
    """A file's row from an earlier run's records (`--rebuild`)."""
    source = path.read_text()
    absent = missing_module(source)
    result_path, log_path = scratch / f"{path.stem}.jsonl", scratch / f"{path.stem}.log"
    rows = [json.loads(line) for line in result_path.read_text().splitlines()] if result_path.exists() else []
    if absent is not None:
        note = ""
        rows = [{"test": path.name, "outcome": "import error", "message": f"ModuleNotFoundError: No module named '{absent}'"}]
    elif not log_path.exists():
        note = "not run (the run stopped before it)"
    else:  # pytest's last line says how long the whole file took; without it the file was cut off
        last = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        note = "" if re.search(r" in [0-9.]+s", last[0]) else "cut off (file timeout or run stopped)"
    counts = collections.Counter(row["outcome"] for row in rows)
    return {"file": path.name, "internals": helion_internals(source), "counts": dict(counts), "note": note,
            "seconds": None, "tests": rows}


def _totals(files: list[dict[str, Any]]) -> collections.Counter:
    total: collections.Counter = collections.Counter()
    for row in files:
        total.update(row["counts"])
    return total


def _count_cells(counts: dict[str, int]) -> str:
    return " | ".join(str(counts.get(name, 0)) for name in OUTCOMES + ("import error",))


def _markdown(files: list[dict[str, Any]], mode: str) -> str:
    header = "| file | " + " | ".join(OUTCOMES) + " | import error | s | note |\n|---|" + "---|" * 9
    lines = [f"# Helion's unit tests on Tessera, mode {mode}", "",
             "Imports renamed only (`benchmarks/helion_tests.py`); CPU. An import error loses the file's tests. "
             "Only Helion's `test/` folder is exported: tests that load Helion's `examples/`, `benchmarks/` or "
             "`pretuned_kernels/` files fail to find them (FileNotFoundError, `No module named 'examples...'`).", ""]
    for title, group in (("Public surface only", [f for f in files if not f["internals"]]),
                         ("Imports Helion internals", [f for f in files if f["internals"]])):
        total = _totals(group)
        lines += [f"## {title}: {len(group)} files", "",
                  "Totals: " + ", ".join(f"{total.get(name, 0)} {name}" for name in OUTCOMES + ("import error",)),
                  "", header]
        for row in group:
            note = row["note"] or (", ".join(row["internals"][:3]) + (" ..." if len(row["internals"]) > 3 else ""))
            seconds = "-" if row["seconds"] is None else row["seconds"]
            lines.append(f"| {row['file']} | {_count_cells(row['counts'])} | {seconds} | {note} |")
        lines.append("")
    failures = [t for f in files for t in f["tests"] if t["outcome"] in ("failed", "error", "import error")]
    code_text = [t for t in failures if _about_code_text(t["message"])]
    lines += [f"{len(code_text)} of the {len(failures)} failures are assertions about the text of the generated "
              "code (`assertIn(\"<Helion's Triton>\", code)`): Tessera's code differs by design.", "",
              "## Most common first failures (all files, code-text assertions left out)", "",
              "| tests | first line |", "|---|---|"]
    rest = collections.Counter(t["message"] for t in failures if not _about_code_text(t["message"]))
    for message, count in rest.most_common(50):
        lines.append(f"| {count} | {message.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _about_code_text(message: str) -> bool:
    """An assertion that a snippet of Helion's output is (not) in Tessera's generated code."""
    return message.startswith("AssertionError") and "# Generated by Tessera" in message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", help="a Helion checkout's test/ folder")
    parser.add_argument("--mode", choices=("interpret", "eager"), default="interpret")
    parser.add_argument("--only", nargs="*", help="file names (test_loops or test_loops.py)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per file")
    parser.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test")
    parser.add_argument("--out", help="folder for <mode>.md and <mode>.json")
    parser.add_argument("--scratch", default=None, help="logs (default /tmp/helion_tests_<mode>)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--rebuild", action="store_true",
                        help="run nothing: write the tables from the records under --scratch (an interrupted run's too)")
    args = parser.parse_args()
    if args.child:
        sys.exit(run_child(args.child, args.result, args.test_timeout))
    folder = pathlib.Path(args.folder).resolve()
    wanted = {name.removesuffix(".py") for name in args.only or ()}
    paths = [p for p in sorted(folder.glob("test_*.py")) if not wanted or p.stem in wanted]
    scratch = pathlib.Path(args.scratch or f"/tmp/helion_tests_{args.mode}")
    scratch.mkdir(parents=True, exist_ok=True)
    files = []
    for path in paths:
        row = _recorded(path, scratch) if args.rebuild else _run_file(path, args, scratch)
        files.append(row)
        counts = row["counts"]
        tag = " [internals]" if row["internals"] else ""
        print(f"{path.name}{tag}: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)) +
              (f" ({row['note']})" if row["note"] else "") +
              (f" {row['seconds']} s" if row["seconds"] is not None else ""), flush=True)
    for title, internals in (("public surface", False), ("imports Helion internals", True)):
        total = _totals([f for f in files if bool(f["internals"]) == internals])
        print(f"{title}: " + ", ".join(f"{total.get(k, 0)} {k}" for k in OUTCOMES + ("import error",)))
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.mode}.md").write_text(_markdown(files, args.mode))
        (out / f"{args.mode}.json").write_text(json.dumps(files, indent=1))


if __name__ == "__main__":
    main()
