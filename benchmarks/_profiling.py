"""cProfile's view of a repeated call, shared by the dispatch benchmarks."""
from __future__ import annotations

import cProfile
import io
import pstats
from typing import Any, Callable


def top_functions(function: Callable[[], Any], calls: int, rows: int) -> str:
    """cProfile's `rows` top functions by own time over `calls` calls of `function`."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        function()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(rows)
    return text.getvalue()
