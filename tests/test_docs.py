"""The documentation is true where a test can tell: the README's code runs when pasted, the
generated language reference matches the op table, every TESSERA_* variable the code reads is in
the README's table (and no other), and every README/docs section or link the code or the docs
point to exists."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
import pathlib
import re
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SEARCHED = ("tessera", "tests", "examples", "benchmarks")


def _load_gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: pathlib.Path) -> set[str]:
    return {line.lstrip("#").strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def _code_files() -> list[pathlib.Path]:
    return [path for folder in SEARCHED for path in (ROOT / folder).rglob("*.py")
            if path != pathlib.Path(__file__).resolve()] + [ROOT / "Makefile"]


def test_the_language_reference_is_generated_from_the_current_op_table() -> None:
    gen_docs = _load_gen_docs()
    committed = (DOCS / "language.md").read_text(encoding="utf-8")
    assert committed == gen_docs.render(), (
        "docs/language.md is out of date with the op table: run `make docs` (or `python scripts/gen_docs.py`) "
        "and commit docs/language.md")


def test_the_readme_quickstart_tour_and_looking_inside_run_when_pasted_into_a_file(tmp_path: pathlib.Path,
                                                                                  device: torch.device) -> None:
    if device.type != "cpu":
        pytest.skip("the pasted code runs in Triton's interpreter (CUDA hidden): the CPU suite covers it")
    readme = README.read_text(encoding="utf-8")
    code = "\n".join(_python_blocks(_section(readme, "Quickstart")))
    assert "tessera.kernel" in code and "assert_close" in code
    # the tour's kernel and the "Looking inside" calls build on the quickstart's imports and values
    extra = _python_blocks(_section(readme, "A tour of the language")) + _python_blocks(_section(readme, "Looking inside"))
    check = ("a, b = torch.randn(37, 20, device=device), torch.randn(20, 9, device=device)\n"
             "torch.testing.assert_close(matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)\n")
    script = tmp_path / "quickstart.py"
    script.write_text("\n".join([code, *extra, check]), encoding="utf-8")
    environment = {**os.environ, "TESSERA_MODE": "interpret", "CUDA_VISIBLE_DEVICES": ""}
    # the repository on the path, as an installed Tessera would be (the GPU machine runs from a checkout)
    root = str(Path(__file__).resolve().parents[1])
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [root, environment.get("PYTHONPATH")]))
    environment.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "matches torch.softmax" in done.stdout


def test_the_readme_lists_exactly_the_environment_variables_the_code_reads() -> None:
    in_code = set()
    for path in _code_files():
        in_code |= set(re.findall(r"\bTESSERA_[A-Z][A-Z_]*[A-Z]\b", path.read_text(encoding="utf-8")))
    table = _section(README.read_text(encoding="utf-8"), "Settings and environment variables")
    listed = set(re.findall(r"^\| `(TESSERA_[A-Z_]+)` \|", table, re.M))
    assert listed - in_code == set(), f"the README lists variables no code reads: {sorted(listed - in_code)}"
    assert in_code - listed == set(), f"the README's table misses: {sorted(in_code - listed)}"


def test_every_readme_section_the_code_points_to_exists() -> None:
    readme_headings = _headings(README)
    pointers = []
    for path in _code_files():
        text = path.read_text(encoding="utf-8")
        pointers += [(path, "README.md", name) for name in re.findall(r"README[^'\"\n]{0,4}['\"]([^'\"\n]+)['\"]", text)]
        pointers += [(path, f"docs/{page}", name)
                     for page, name in re.findall(r"docs/(\w+\.md)(?:,? ['\"]([^'\"\n]+)['\"])?", text)]
    assert pointers, "expected the code to point to the docs somewhere"
    for path, page, name in pointers:
        assert (ROOT / page).exists(), f"{path.relative_to(ROOT)} points to {page}, which does not exist"
        if name:
            headings = readme_headings if page == "README.md" else _headings(ROOT / page)
            assert name in headings, f"{path.relative_to(ROOT)} points to section {name!r} of {page}, which has none"


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_link_between_the_docs_resolves(page: pathlib.Path) -> None:
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", page.read_text(encoding="utf-8")):
        if target.startswith("http"):
            continue
        linked = (page.parent / target).resolve() if target else page
        assert linked.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor:
            anchors = {_anchor(heading) for heading in _headings(linked)}
            assert anchor in anchors, f"{page.name} links to {target}#{anchor}: no such heading ({sorted(anchors)})"
