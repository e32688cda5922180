"""Find a test file's line by a `# line: <name>` marker, so error tests name lines without numbers."""
from __future__ import annotations


def marked_line(path: str, name: str) -> tuple[int, str]:
    """(number, code before the marker) of the one line of `path` that ends with `# line: <name>`."""
    marker = f"# line: {name}"
    with open(path, encoding="utf-8") as source:
        found = [(number, text.split("#")[0].strip()) for number, text in enumerate(source, start=1)
                 if text.rstrip().endswith(marker)]
    assert len(found) == 1, f"expected one line marked {marker!r}, found {found}"
    return found[0]
