"""Where the dispatch benchmarks write their JSON results."""
from __future__ import annotations

import json
import os
from typing import Any


def write_json(result: Any, out: str, name: str) -> str:
    """Write `result` as `<out>/<name>.json` (making `out`), print and return the path."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}.json")
    with open(path, "w") as handle:
        json.dump(result, handle, indent=2)
    print(f"wrote {path}")
    return path
