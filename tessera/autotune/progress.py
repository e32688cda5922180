"""What the user sees while a kernel tunes: a progress bar, details on request.

tqdm draws the bar when it is installed (it is optional: Tessera does not depend on it); else a
single stderr line is redrawn in place. Off a terminal only the final summary is printed, so CI
logs are not flooded. `TESSERA_LOG=autotune` adds one line per candidate (`log`).

>>> bar = Progress("softmax", total=24)          # doctest: +SKIP
>>> bar.update(done=1, failed=0, best_ms=0.12)   # doctest: +SKIP
"""
from __future__ import annotations

import sys
from typing import Any

from tessera import settings


def log(message: str) -> None:
    """A detail line, printed only with TESSERA_LOG=autotune."""
    if settings.log_enabled("autotune"):
        print(f"[tessera autotune] {message}", file=sys.stderr, flush=True)


def announce(message: str) -> None:
    """A line every tuning run prints (the result and how to hard-code it)."""
    print(f"[tessera] {message}", file=sys.stderr, flush=True)


class Progress:
    """Candidates done / failed and the best time so far, for one kernel's tuning run."""

    def __init__(self, name: str, total: int, enabled: bool | None = None) -> None:
        self.name = name
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None
        if self.enabled:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, desc=f"autotune {name}", unit="cfg", leave=False, file=sys.stderr)
            except ImportError:
                self._bar = None

    def update(self, done: int, failed: int, best_ms: float | None) -> None:
        if not self.enabled:
            return
        best = "-" if best_ms is None else f"{best_ms:.4g} ms"
        self.total = max(self.total, done)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.n = done
            self._bar.set_postfix_str(f"failed {failed}, best {best}", refresh=True)
        else:
            line = f"\r[tessera] autotune {self.name}: {done}/{self.total} done, {failed} failed, best {best}"
            print(line, end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            print(file=sys.stderr, flush=True)


__all__ = ["Progress", "announce", "log"]
