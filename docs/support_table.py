"""Writes the op-family x backend support table of docs/backends.md from the op tables.

    python -m docs.support_table          # rewrites the table between the markers in docs/backends.md

Rows come from the IR's `Op` enum, the language's elementwise ops (by family) and reductions;
a cell is "yes" when the backend's `lowers(op, fn)` says so. tests/test_pallas.py checks that the
committed file is what this script writes.
"""
from __future__ import annotations

import pathlib

from tessera import backends
from tessera.ir.graph import Op
from tessera.language.elementwise import ELEMENTWISE_OPS
from tessera.language.reductions import REDUCTIONS

PATH = pathlib.Path(__file__).resolve().parent / "backends.md"
BEGIN, END = "<!-- support table: begin (python -m docs.support_table) -->", "<!-- support table: end -->"


def rows() -> list[tuple[str, list[tuple[Op, str | None]]]]:
    """(family, the (op, fn) pairs in it), in a fixed order."""
    families: dict[str, list[tuple[Op, str | None]]] = {}
    for op in ELEMENTWISE_OPS:
        families.setdefault(f"elementwise ({op.kind})", []).append((Op.ELEMENTWISE, op.name))
    families["reductions"] = [(Op.REDUCE, fn) for fn in REDUCTIONS]
    for op in Op:
        if op not in (Op.ELEMENTWISE, Op.REDUCE):
            families.setdefault(f"ir op {op.value}", []).append((op, None))
    return list(families.items())


def table() -> str:
    names = backends.names()
    lines = ["| op family | members | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for family, members in rows():
        listed = ", ".join(fn or op.value for op, fn in members)
        cells = []
        for name in names:
            backend = backends.get(name)
            missing = [fn or op.value for op, fn in members if not backend.lowers(op, fn)]
            cells.append("yes" if not missing else f"no: {', '.join(missing)}")
        lines.append(f"| {family} | {listed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rendered(text: str) -> str:
    """`text` (docs/backends.md) with the table between the markers replaced by `table()`."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


if __name__ == "__main__":
    PATH.write_text(rendered(PATH.read_text()))
