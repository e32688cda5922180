"""Run every example once at a moderate size and print a table of results.

    python -m examples.gallery [--mode eager|interpret|compiled] [--device cpu|cuda] [--dtype bf16]

The mode reaches the kernels through `TESSERA_MODE`, set before Tessera is imported. A kernel
that the mode cannot run (Tessera says "not supported", or NotImplementedError) is listed as
skipped; any wrong result or other error makes the exit status nonzero.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch

    from examples._harness import Example

MODES = ("eager", "interpret", "compiled")
# Timed calls per mode: Triton's CPU interpreter takes seconds per call at gallery sizes.
REPEATS = {"eager": 3, "interpret": 1, "compiled": 20}
# Spelled out here, not imported from the examples, so that nothing imports Tessera before
# TESSERA_MODE is set.
DTYPES_BY_NAME = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
                  "float16": "float16", "fp16": "float16"}


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    kernel: str
    sizes: str
    dtype: str
    mode: str
    device: str
    correct: str  # "yes", "NO", "skipped: <reason>" or "error: <reason>"
    max_error: str
    time_ms: str
    torch_ms: str = ""

    @property
    def failed(self) -> bool:
        return not (self.correct == "yes" or self.correct.startswith("skipped"))


def _is_unsupported(error: BaseException) -> bool:
    if isinstance(error, NotImplementedError):
        return True
    from tessera.exc import TesseraError, UnsupportedOperationError

    if isinstance(error, UnsupportedOperationError):
        return True
    return isinstance(error, TesseraError) and "not supported" in str(error).lower()


def _one_line(error: BaseException, limit: int = 100) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _run_example(example: Example, mode: str, device: str, dtype: torch.dtype, verbose: bool) -> Row:
    from examples._harness import Mismatch, time_ms

    # Eager mode runs every tile as Python: keep it at the CPU sizes even on a GPU.
    sizes = example.sizes["cpu"] if mode == "eager" else example.gallery_sizes(device)
    shown = " ".join(f"{name}={value}" for name, value in sizes.items())

    def row(correct: str, error: str = "", ms: str = "", torch_ms: str = "") -> Row:
        return Row(example.name, shown, _short(dtype), mode, device, correct, error, ms, torch_ms)

    try:
        error = example.check(device, dtype, **sizes)
        # check() has already compiled the kernel and run it once: no warm-up call needed.
        inputs = example.inputs(device, dtype, **sizes)
        ms = time_ms(example.run, inputs, device, REPEATS[mode], warmup=False)
        reference_ms = time_ms(example.reference, inputs, device, REPEATS["compiled"], warmup=True)
    except Mismatch as failure:
        if verbose:
            print(failure, file=sys.stderr)
        return row("NO", f"{failure.max_error:.2e}")
    except Exception as failure:  # one broken example must not hide the others
        if verbose:
            traceback.print_exc()
        if _is_unsupported(failure):
            return row(f"skipped: {_one_line(failure)}")
        return row(f"error: {_one_line(failure)}")
    return row("yes", f"{error:.2e}", f"{ms:.3f}", f"{reference_ms:.3f}")


def _run_with_progress(example: Example, mode: str, device: str, dtype: torch.dtype, verbose: bool,
                       counter: str) -> Row:
    """`_run_example`, announced on stderr before it starts and summed up when it ends: the first
    call compiles (seconds; minutes for big kernels in the interpreter), so a silent gallery
    looks hung."""
    print(f"{counter} {example.name} ({mode}, {device}) ...", end="", file=sys.stderr, flush=True)
    started = time.perf_counter()
    row = _run_example(example, mode, device, dtype, verbose)
    print(f" {row.correct.split(':')[0]} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return row


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _print_table(rows: Sequence[Row]) -> None:
    header = Row("kernel", "sizes", "dtype", "mode", "device", "correct", "max err", "tessera ms", "torch ms")
    cells = [(r.kernel, r.sizes, r.dtype, r.mode, r.device, r.correct, r.max_error, r.time_ms, r.torch_ms)
             for r in [header, *rows]]
    columns = list(zip(*cells))
    widths = [max(len(cell) for cell in column) for column in columns]
    for index, line in enumerate(zip(*columns)):
        print(" | ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
        if index == 0:
            print("-+-".join("-" * width for width in widths))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the gallery, print the table; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, help="default: compiled on cuda, interpret on cpu")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if available")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES_BY_NAME),
                        help="input dtype (default float32)")
    parser.add_argument("--only", nargs="*", default=(), help="run only these example names")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of errors")
    args = parser.parse_args(argv)

    import torch  # imported here so that --help stays fast

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    mode = args.mode or ("compiled" if device == "cuda" else "interpret")
    os.environ["TESSERA_MODE"] = mode  # before any example imports tessera

    from examples import EXAMPLE_MODULES

    dtype = getattr(torch, DTYPES_BY_NAME[args.dtype])
    rows: list[Row] = []
    chosen: list[Example] = []
    for module_name in EXAMPLE_MODULES:
        try:
            module = importlib.import_module(f"examples.{module_name}")
        except Exception as failure:
            if args.verbose:
                traceback.print_exc()
            rows.append(Row(module_name, "", _short(dtype), mode, device, f"error: {_one_line(failure)}", "", ""))
            continue
        for example in module.EXAMPLES:
            if args.only and example.name not in args.only:
                continue
            if dtype not in example.dtypes:
                rows.append(Row(example.name, "", _short(dtype), mode, device, f"skipped: no {args.dtype} variant", "",
                                ""))
                continue
            chosen.append(example)
    for number, example in enumerate(chosen, 1):
        rows.append(_run_with_progress(example, mode, device, dtype, args.verbose, f"[{number}/{len(chosen)}]"))
    _print_table(rows)
    if mode != "compiled":
        print(f"\n{mode} mode runs on the CPU ({'Triton' + chr(39) + 's interpreter' if mode == 'interpret' else 'tiles as Python'}):"
              " its times check that the code runs, they say nothing about GPU speed (benchmarks/ does that).")
    return 1 if any(row.failed for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
