"""One timing rule for the benchmark scripts that also run as CPU smoke tests."""
from __future__ import annotations

import time
from typing import Any, Callable


def median_ms(function: Callable[[], Any], smoke: bool, warmup: int = 25, rep: int = 100) -> float:
    """Milliseconds of one `function()` call: on the GPU the median of `triton.testing.do_bench`
    (CUDA events, L2 flushed between repetitions); with `smoke` (the CPU interpreter, where only
    running the script matters) one call's wall time."""
    if smoke:
        start = time.perf_counter()
        function()
        return (time.perf_counter() - start) * 1e3
    import triton
    return float(triton.testing.do_bench(function, warmup=warmup, rep=rep, return_mode="median"))
