"""Generate docs/language.md, the language reference, from the op table.

    python scripts/gen_docs.py           # rewrite docs/language.md (or: make docs)
    python scripts/gen_docs.py --check   # exit 1 if docs/language.md is out of date

Everything in the page comes from the code: the `hl` functions (`tessera.language.__all__`, their
signatures and first docstring lines), every primitive (`tessera.ir.primitive.ALL_PRIMITIVES`:
the torch functions, Tensor methods and Python operators that reach it, which modes run it) grouped
by the module that defines it, and the common torch ops with no primitive and what to write
instead (`tessera.ir.torch_alternatives`). `tests/test_docs.py` fails when the committed page
differs from what this script writes, so adding an op means running this script once.
"""
from __future__ import annotations

import argparse
import inspect
import pathlib
import sys
from typing import Any, Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import tessera.language as hl  # noqa: E402
from tessera import backends  # noqa: E402
from tessera.ir.primitive import ALL_PRIMITIVES, Primitive  # noqa: E402
from tessera.ir.torch_alternatives import ALTERNATIVES, torch_spelling  # noqa: E402
from tessera.runtime.tuning import BACKEND  # noqa: E402
from tessera.trace.proxy import BINARY_OPERATORS, COMPARISONS, UNARY_OPERATORS  # noqa: E402

PAGE = ROOT / "docs" / "language.md"
COMMAND = "python scripts/gen_docs.py"

# Python syntax for the operator tables of trace/proxy.py (keyed as those tables are)
_SYNTAX = {"add": "a + b", "sub": "a - b", "mul": "a * b", "truediv": "a / b", "floordiv": "a // b",
           "mod": "a % b", "pow": "a ** b", "and": "a & b", "or": "a | b", "xor": "a ^ b", "matmul": "a @ b",
           "lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b", "eq": "a == b", "ne": "a != b",
           "neg": "-a", "abs": "abs(a)", "invert": "~a", "lshift": "a << b", "rshift": "a >> b"}
_INDEXING = {torch.Tensor.__getitem__: "x[index]", torch.Tensor.__setitem__: "x[index] = v",
             torch.Tensor.__matmul__: "a @ b"}
_FAMILY_TITLES = {"creation": "Creation", "elementwise": "Elementwise", "math": "Matrix products",
                  "memory": "Memory", "reduce": "Reductions", "reductions": "Reductions",
                  "statistics": "Reductions built from reductions", "scans": "Scans", "sorting": "Sorting",
                  "rng": "Random numbers", "joins": "Joins and splits", "view": "Casts and views",
                  "constexpr": "Compile-time values", "tile": "Tile loops", "control": "Control flow"}


def _operators_by_function() -> dict[Callable[..., Any], list[str]]:
    found: dict[Callable[..., Any], list[str]] = {}
    for table in (BINARY_OPERATORS, COMPARISONS, UNARY_OPERATORS):
        for name, function in table.items():
            found.setdefault(function, []).append(f"`{_SYNTAX[name]}`")
    return found


def _spellings(primitive: Primitive, operators: dict[Callable[..., Any], list[str]]) -> str:
    names: list[str] = []
    for function in primitive.torch_functions:
        names.extend(operators.get(function, []))
        names.append(f"`{_INDEXING[function]}`" if function in _INDEXING else f"`{torch_spelling(function)}`")
    if not names:  # an hl function of the same name (or family: atomic -> atomic_add, ...)
        names = [f"`hl.{name}`" for name in hl.__all__ if name == primitive.name or name.startswith(primitive.name + "_")]
    return ", ".join(dict.fromkeys(names))


def _modes(primitive: Primitive) -> str:
    traced = primitive.trace_rule is not None and bool(backends.get(BACKEND).supported_ops)
    cells = ["yes" if primitive.eager_rule is not None else "no", "yes" if traced else "no", "yes" if traced else "no"]
    return " | ".join(cells)


def _family(primitive: Primitive) -> str:
    rule = primitive.trace_rule or primitive.eager_rule
    return getattr(rule, "__module__", "").rsplit(".", 1)[-1]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _first_sentence(obj: Any) -> str:
    """The docstring's first paragraph up to its first full stop."""
    paragraph = " ".join((inspect.getdoc(obj) or "").split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


def _signature(name: str, obj: Any) -> str:
    """`name(a, b=1)`: parameters and defaults, without annotations."""
    if inspect.isclass(obj) or not callable(obj):
        return name
    parameters = []
    for parameter in inspect.signature(obj).parameters.values():
        default = parameter.default
        shown = "" if default is inspect.Parameter.empty else f"={default!r}"
        parameters.append(f"{parameter.name}{shown}")
    return f"{name}({', '.join(parameters)})"


def render() -> str:
    """The whole page, as this script writes it."""
    lines = [
        "# Language reference",
        "",
        f"<!-- Generated by `{COMMAND}` from the op table: do not edit by hand. -->",
        "",
        "Inside a top-level `hl.tile` loop, a kernel may call the `hl` functions and the torch functions,",
        "Tensor methods and Python operators listed here. Modes: `eager` runs the Python function with",
        "torch itself (so *every* torch op works there, including the unsupported ones at the end);",
        "`interpret` and `compiled` run the generated Triton code (CPU interpreter, GPU). Host code,",
        "outside the tile loops, is plain PyTorch and may use anything.",
        "",
        "## `hl` functions",
        "",
        "| function | what it does |",
        "|---|---|",
    ]
    for name in hl.__all__:
        obj = getattr(hl, name)
        lines.append(f"| `hl.{_cell(_signature(name, obj))}` | {_cell(_first_sentence(obj))} |")
    operators = _operators_by_function()
    families: dict[str, list[Primitive]] = {}
    for primitive in ALL_PRIMITIVES.values():
        families.setdefault(_family(primitive), []).append(primitive)
    for family in sorted(families, key=lambda f: list(_FAMILY_TITLES).index(f) if f in _FAMILY_TITLES else 99):
        module = sys.modules[f"tessera.language.{family}"]
        lines += ["", f"## {_FAMILY_TITLES.get(family, family)}", "", _first_sentence(module), "",
                  "| primitive | written as | eager | interpret | compiled |", "|---|---|---|---|---|"]
        for primitive in families[family]:
            host = " (also in host code)" if not primitive.device_only else ""
            lines.append(f"| `{primitive.name}`{host} | {_cell(_spellings(primitive, operators))} | {_modes(primitive)} |")
    lines += [
        "",
        "## Common torch ops that are not supported yet, and what to write instead",
        "",
        "Each of these works in `eager` mode (it is torch there). In `interpret` and `compiled` modes a",
        "kernel that calls one is refused at its line with the advice below. Written alternatives",
        "(`x` is a tile of rows, `x[tile, :]`) are checked against torch by `tests/test_torch_alternatives.py`.",
        "",
        "| torch | instead |",
        "|---|---|",
    ]
    for alternative in ALTERNATIVES:
        written = f": `{alternative.instead}` for `{alternative.call}`" if alternative.instead else ""
        lines.append(f"| `{_cell(alternative.spelling)}` | {_cell(alternative.advice + written)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/language.md is out of date")
    arguments = parser.parse_args(argv)
    text = render()
    if arguments.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
