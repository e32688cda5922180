"""Source locations of user code, and the filter that tells user frames from Tessera's own."""
from __future__ import annotations

import dataclasses
import linecache
import os
import sys
import types

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # this file sits at the package's top
# Frames from these directories are never "the user's line": Tessera itself, the standard
# library, and torch's Python dispatch layers (a __torch_function__ mode sits between the user
# and us).
_INTERNAL_PREFIXES: tuple[str, ...] = (
    _PACKAGE_DIR + os.sep,
    os.path.dirname(os.__file__) + os.sep,
)
_INTERNAL_MARKERS: tuple[str, ...] = (os.sep + "torch" + os.sep, os.sep + "triton" + os.sep, "<frozen ")


_INTERNAL_FILES: dict[str, bool] = {}


def is_internal_file(filename: str) -> bool:
    """True for files that belong to Tessera, the standard library, torch or triton."""
    known = _INTERNAL_FILES.get(filename)
    if known is None:
        known = _INTERNAL_FILES[filename] = _is_internal_path(filename)
    return known


def _is_internal_path(filename: str) -> bool:
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if path.startswith(_INTERNAL_PREFIXES):
        return True
    if os.sep + "tessera_generated" + os.sep in path:
        return False
    return any(marker in path for marker in _INTERNAL_MARKERS)


@dataclasses.dataclass(frozen=True)
class SourceLocation:
    """A span of user source: file, 1-based line, 0-based columns, and the function name."""

    filename: str
    lineno: int
    col: int = 0
    end_col: int | None = None
    function: str = ""

    def source_line(self) -> str:
        return linecache.getline(self.filename, self.lineno).rstrip("\n")

    def short(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"

    def render(self) -> str:
        """`at file:line:col in fn`, the source line, and a caret under the span."""
        where = f"  at {self.filename}:{self.lineno}:{self.col}"
        if self.function:
            where += f" in {self.function}"
        line = self.source_line()
        if not line:
            return where
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        start = max(self.col - indent, 0)
        end = self.end_col - indent if self.end_col is not None and self.end_col > self.col else start + 1
        end = min(max(end, start + 1), len(stripped)) if stripped else start + 1
        caret = " " * start + "^" * max(end - start, 1)
        return f"{where}\n    {stripped}\n    {caret}"

    @staticmethod
    def from_frame(frame: types.FrameType) -> SourceLocation:
        code = frame.f_code
        col, end_col = 0, None
        position = code_position(code, frame.f_lasti)
        if position is not None:
            _, end_line, start, end = position
            if start is not None:
                col = start
                end_col = end if end_line == frame.f_lineno else None
        function = code.co_name
        outer = frame
        while function.startswith("_tessera_") and outer.f_back is not None:
            # a rewritten loop body: name the kernel that holds it (past Tessera's own frames)
            outer = outer.f_back
            while is_internal_file(outer.f_code.co_filename) and outer.f_back is not None:
                outer = outer.f_back
            function = outer.f_code.co_name
        return SourceLocation(code.co_filename, frame.f_lineno, col, end_col, function)


_POSITIONS: dict[tuple[int, int], tuple[types.CodeType, tuple | None]] = {}


def code_position(code: types.CodeType, lasti: int) -> tuple | None:
    """(line, end_line, col, end_col) of the instruction at `lasti`, cached (hl.tile asks per call).

    Keyed by the code object's id (held in the entry, so the id is not reused): hashing a code
    object hashes its constants, and code dynamo made while tracing a kernel call (torch 2.11)
    holds unhashable ones (a raw TypeError under torch.compile on the H100)."""
    key = (id(code), lasti)
    known = _POSITIONS.get(key)
    if known is None or known[0] is not code:
        positions = list(code.co_positions())
        index = lasti // 2
        if len(_POSITIONS) >= 4096:  # code made anew (kernels defined in a loop) must not pile up
            _POSITIONS.clear()
        known = _POSITIONS[key] = (code, positions[index] if 0 <= index < len(positions) else None)
    return known[1]


def user_frame(skip: int = 1) -> types.FrameType | None:
    """The innermost frame on the stack that is user code (not Tessera, torch or stdlib)."""
    frame = sys._getframe(skip)
    while frame is not None and is_internal_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_location(skip: int = 1) -> SourceLocation | None:
    """Location of the innermost user frame, or None if the stack holds none."""
    frame = user_frame(skip + 1)
    return frame_location(frame) if frame is not None else None


Site = tuple[str, int, int]  # (file, line, col) of a call: matches the AST node of that call
_FRAME_FACTS: dict[tuple[int, int], tuple[types.CodeType, tuple[Site, SourceLocation]]] = {}
_FRAME_FACTS_MAX = 4096  # emptied when full: kernels defined in a loop keep making new code objects


def frame_location(frame: types.FrameType) -> SourceLocation:
    """`SourceLocation.from_frame(frame)`, remembered per (code, instruction) where only they decide it."""
    return site_and_location(frame)[1]


def frame_site(frame: types.FrameType) -> Site:
    """(file, line, col) of the instruction a frame is at."""
    return site_and_location(frame)[0]


def site_and_location(frame: types.FrameType) -> tuple[Site, SourceLocation]:
    """The site and location of the instruction a frame is at, computed once per call site.

    hl.tile asks on every kernel call. A rewritten loop body (`_tessera_...`) is named after the
    kernel that holds it, found through its callers: not a function of its own code, so never
    remembered.
    """
    code = frame.f_code
    key = (id(code), frame.f_lasti)  # hashing a code object hashes its bytecode and constants
    known = _FRAME_FACTS.get(key)
    if known is not None and known[0] is code:  # the code object is held, so its id is not reused
        return known[1]
    position = code_position(code, frame.f_lasti)
    line, _, col, _ = position if position is not None else (frame.f_lineno, 0, 0, 0)
    facts = ((code.co_filename, line or frame.f_lineno, col or 0), SourceLocation.from_frame(frame))
    if not code.co_name.startswith("_tessera_"):
        if len(_FRAME_FACTS) >= _FRAME_FACTS_MAX:
            _FRAME_FACTS.clear()
        _FRAME_FACTS[key] = (code, facts)
    return facts


def strip_internal_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A copy of a traceback without Tessera's (and torch's dispatch) frames."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        if not is_internal_file(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    result = None
    for entry in reversed(kept):
        result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return result
