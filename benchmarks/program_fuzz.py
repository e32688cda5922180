"""Random-program fuzz of the lane-moving, contraction and order-statistic ops: eager vs interpret vs torch.

    python benchmarks/program_fuzz.py                    # 50 seeds from 0
    python benchmarks/program_fuzz.py --seeds 2000 --base 100 --show     # --show prints each finding's program

Each seed draws one kernel: `v = x[tile, :]` (a row tile, whole columns), then 1 to 5 steps, each
one op of session 11's families over the whole dim (flip, roll, repeat, tile, index_select by a
constant or a loaded index, `v[:, idx]` with negative indices, tensor_split, narrow, select,
argsort, cummax/cummin, logcumsumexp, kthvalue, median, mv, outer, einsum, `@`, the pointwise
extras, casts and broadcasts through size-1 dims), then `out[tile, :] = v`. The input is fp32,
fp16, bf16, int8/16/32/64, uint8 or bool, contiguous, column-major, a strided view with an
offset, or broadcast (stride 0) along either dim; sizes and block sizes make size-1 dims and
tails. Steps act along dim 1 (spelled 1 or -1) only, so the same lines applied to the whole `x`
are PyTorch's reference; a step torch refuses on the drawn value is drawn again.

The program is written to a file (the kernel's source is what a user would write) and run in
eager and interpret mode. A result that differs from torch is `wrong` (a silent wrong answer), an
exception other than a `TesseraError` is `raw`, a located error in one mode where the other
computes is `disagree`; a `TesseraError` in every mode is `refused` (counted, not a finding:
Tessera may decline a form it cannot compile). tests/test_program_fuzz.py runs a few seeds.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import random
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tessera  # noqa: E402
from tessera import exc  # noqa: E402

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
DTYPES = FLOATS * 2 + INTEGERS + (torch.bool,)
SIZES = (1, 2, 3, 4, 5, 7, 8, 13, 16, 17)
BLOCKS = (1, 2, 4, 8, 16, 32)
TOLERANCES = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float64: 1e-9}
MAX_STEPS = 5


@dataclasses.dataclass
class Program:
    """One drawn kernel: its steps (Python expressions of `v`), inputs and launch config."""

    seed: int
    steps: list[str]
    x: torch.Tensor
    aux: torch.Tensor       # a second operand the steps read as aux[:] / aux[:, :]
    idx: torch.Tensor       # an int index the steps read as idx[:]
    block: int
    layout: str

    def source(self) -> str:
        """The kernel module's text: the steps inside the tile loop and, again, on the whole `x`."""
        steps = "\n".join(f"        v = {step}" for step in self.steps) or "        pass"
        # each step of the reference on a contiguous copy: torch's CPU median of stride-0 rows is garbage
        reference_steps = "\n".join(f"    v = ({step}).contiguous()" for step in self.steps) or "    pass"
        return KERNEL.format(steps=steps, reference_steps=reference_steps)

    def describe(self) -> str:
        return (f"seed {self.seed}: x {self.x.dtype} {list(self.x.shape)} {self.layout}, block {self.block}, "
                f"aux {self.aux.dtype} {list(self.aux.shape)}, idx {self.idx.tolist()}\n" + self.source())


KERNEL = '''import torch
import torch.nn.functional as F
import tessera.language as hl


def half(n):
    """A helper the kernel calls with a size: Python decides on it, as the user wrote."""
    return n // 2 if n > 1 else 1


def kernel(x, aux, idx, out):
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
{steps}
        if v.dim() == 1:
            out[tile] = v
        else:
            out[tile, :] = v
    return out


def reference(x, aux, idx):
    v = x[:, :]
{reference_steps}
    return v
'''


# -- drawing inputs ---------------------------------------------------------------------------------
def _values(rng: random.Random, dtype: torch.dtype, shape: tuple[int, ...], edges: bool) -> torch.Tensor:
    """Distinct values per row (ties make torch's own kthvalue/median indices arbitrary), some edges."""
    if len(shape) == 1:
        return _values(rng, dtype, (1, shape[0]), edges)[0]
    rows, columns = shape
    generator = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=generator, dtype=torch.float64) * rng.choice([0.5, 3.0, 40.0])
        if edges and rows * columns > 2:
            flat = values.view(-1)
            for _ in range(rng.randint(1, 2)):
                flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), float("-inf"), -0.0])
        return values.to(dtype)
    low, high = (0, 250) if dtype == torch.uint8 else (-120, 120)
    rows_of = [torch.randperm(high - low, generator=generator)[:columns] + low for _ in range(rows)]
    return torch.stack(rows_of).to(dtype)


def _offset_view(values: torch.Tensor) -> torch.Tensor:
    """`values` in a strided view (row stride 2n + 3, column stride 2) at storage offset 5."""
    rows, columns = values.shape
    buffer = torch.zeros(5 + rows * (2 * columns + 3), dtype=values.dtype)
    return buffer.as_strided(values.shape, (2 * columns + 3, 2), 5).copy_(values)


_LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "contiguous": torch.Tensor.contiguous,
    "column_major": lambda values: values.t().contiguous().t(),
    "offset_view": _offset_view,
    "rows_broadcast": lambda values: values[:1].expand(values.shape),        # row stride 0
    "columns_broadcast": lambda values: values[:, :1].expand(values.shape),  # column stride 0
}


# -- drawing steps ----------------------------------------------------------------------------------
class Draws:
    """The candidate steps for the current value `v` (whole reference tensor) of the program."""

    def __init__(self, rng: random.Random, program: Program) -> None:
        self.rng = rng
        self.program = program
        self.aux_used = False
        self.idx_used = False

    def dim(self) -> str:
        return self.rng.choice(["1", "-1"])

    def candidates(self, v: torch.Tensor) -> list[Callable[[], str]]:
        if v.dim() == 1:
            return [self.unsqueeze, self.elementwise, self.cast]
        return [self.flip, self.roll, self.repeat, self.index_select, self.index_select, self.tensor_index,
                self.tensor_split, self.narrow, self.select, self.argsort, self.cumulative, self.logcumsumexp,
                self.kthvalue, self.median, self.contraction, self.contraction, self.pointwise, self.pointwise,
                self.elementwise, self.cast, self.normalise, self.sized, self.sized]

    # size expressions: v.size(1) used as a Python number, in the kernel and in a helper it calls
    def sized(self, v: torch.Tensor) -> str:
        d = self.dim()
        return self.rng.choice([
            f"torch.roll(v, half(v.size({d})), {d})", f"v.narrow({d}, 0, half(v.size({d})))",
            f"torch.kthvalue(v, half(v.size({d})), {d}).values", f"v[:, : max(v.size({d}) - 1, 1)]",
            f"v.repeat(1, 2 if v.size({d}) < 5 else 1)", f"torch.tensor_split(v, half(v.size({d})), {d})[0]",
            f"v * v.size({d})", f"v.index_select(1, torch.arange(0, v.size({d}), 2))",
            f"v[:, v.size({d}) // 2]", f"v.narrow(1, v.size({d}) - 1, 1) if v.size({d}) % 2 else v.flip(1)"])

    # whole-dim lane moves
    def flip(self, v: torch.Tensor) -> str:
        return self.rng.choice([f"torch.flip(v, [{self.dim()}])", f"v.flip({self.dim()})", "v.flip([0, 1])"
                                if self.rng.random() < 0.1 else f"torch.flip(v, ({self.dim()},))"])

    def roll(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        shift = self.rng.randint(-2 * n - 1, 2 * n + 1)
        return self.rng.choice([f"torch.roll(v, {shift}, {self.dim()})", f"v.roll({shift}, dims={self.dim()})",
                                f"torch.roll(v, [{shift}], [{self.dim()}])"])

    def repeat(self, v: torch.Tensor) -> str:
        count = self.rng.choice([1, 2, 3])
        return self.rng.choice([f"v.repeat(1, {count})", f"torch.tile(v, ({count},))", f"torch.tile(v, [1, {count}])",
                                f"v.repeat(1, 1, {count})[0]"])

    def index_select(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        if not self.idx_used and self.rng.random() < 0.5:
            self.idx_used = True
            self.program.idx = torch.tensor([self.rng.randrange(n) for _ in range(self.rng.randint(1, 9))],
                                            dtype=self.rng.choice([torch.int32, torch.int64]))
            return f"torch.index_select(v, {self.dim()}, idx[:])"
        wanted = [self.rng.randrange(n) for _ in range(self.rng.randint(1, 6))]
        if self.rng.random() < 0.3:
            step = self.rng.choice([1, 2]) if n > 2 else 1
            wanted = list(range(0, n, step))
        return f"v.index_select({self.dim()}, torch.tensor({wanted}))"

    def tensor_index(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        if not self.idx_used and self.rng.random() < 0.6:
            self.idx_used = True
            self.program.idx = torch.tensor([self.rng.randrange(-n, n) for _ in range(self.rng.randint(1, 9))],
                                            dtype=self.rng.choice([torch.int32, torch.int64]))
            return "v[:, idx[:]]"
        wanted = [self.rng.randrange(-n, n) for _ in range(self.rng.randint(1, 5))]
        return f"v[:, torch.tensor({wanted})]"

    def tensor_split(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        if self.rng.random() < 0.5:
            sections = self.rng.randint(1, n)
            return f"torch.tensor_split(v, {sections}, {self.dim()})[{self.rng.randrange(-sections, sections)}]"
        cut = self.rng.randint(1, n - 1) if n > 1 else 0
        if n == 1:
            return f"v.tensor_split([1], dim={self.dim()})[0]"
        spelled = self.rng.choice([cut, cut - n])
        return f"torch.tensor_split(v, [{spelled}], dim={self.dim()})[{self.rng.choice([0, 1, -1])}]"

    def narrow(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        start = self.rng.randrange(n)
        length = self.rng.randint(1, n - start)
        return self.rng.choice([f"v.narrow({self.dim()}, {start}, {length})",
                                f"torch.narrow(v, {self.dim()}, {start - n if self.rng.random() < 0.3 else start}, "
                                f"{length})"])

    def select(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        index = self.rng.randrange(-n, n)
        return self.rng.choice([f"v.select({self.dim()}, {index})", f"torch.select(v, {self.dim()}, {index})",
                                f"v[:, {index}]"])

    # order statistics
    def argsort(self, v: torch.Tensor) -> str:
        descending = self.rng.choice([True, False])
        return f"torch.argsort(v, dim={self.dim()}, descending={descending}, stable=True)"

    def cumulative(self, v: torch.Tensor) -> str:
        kind = self.rng.choice(["cummax", "cummin"])
        part = self.rng.choice(["values", "indices", "values", "indices", "values * 1"])
        if part == "values * 1":
            return f"v.{kind}({self.dim()})[0]"
        return f"torch.{kind}(v, {self.dim()}).{part}"

    def logcumsumexp(self, v: torch.Tensor) -> str:
        return f"torch.logcumsumexp(v, {self.dim()})"

    def kthvalue(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        k = self.rng.randint(1, n)
        keepdim = self.rng.choice([True, False])
        part = self.rng.choice(["values", "indices"]) if _distinct_rows(v) else "values"
        return f"torch.kthvalue(v, {k}, {self.dim()}, keepdim={keepdim}).{part}"

    def median(self, v: torch.Tensor) -> str:
        keepdim = self.rng.choice([True, False])
        part = self.rng.choice(["values", "indices"]) if _distinct_rows(v) else "values"
        return self.rng.choice([f"torch.median(v, {self.dim()}, keepdim={keepdim}).{part}",
                                f"v.median(dim={self.dim()}, keepdim={keepdim})[{0 if part == 'values' else 1}]"])

    # contractions
    def contraction(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        choice = self.rng.choice(["mv", "matmul_vector", "einsum_vector", "einsum_sum", "einsum_matrix",
                                  "einsum_elementwise", "outer"])
        if choice == "einsum_sum":
            return "torch.einsum('mn->m', v)"
        if choice == "einsum_elementwise":
            return self.rng.choice(["torch.einsum('mn,mn->mn', v, v)", "torch.einsum('mn,mn->m', v, v)"])
        if self.aux_used:
            return "torch.einsum('mn->m', v)"
        self.aux_used = True
        dtype = self.rng.choice([v.dtype, v.dtype, torch.float32])
        if choice == "einsum_matrix":
            self.program.aux = _values(self.rng, dtype, (n, self.rng.choice([1, 2, 3, 5, 16])), False)
            return self.rng.choice(["torch.einsum('mn,nk->mk', v, aux[:, :])", "v @ aux[:, :]"])
        if choice == "outer":
            self.program.aux = _values(self.rng, dtype, (self.rng.choice([1, 2, 3, 5, 16]),), False)
            return self.rng.choice(["torch.outer(v.sum(1), aux[:])", "torch.outer(v[:, 0], aux[:])"])
        self.program.aux = _values(self.rng, dtype, (n,), False)
        return {"mv": "torch.mv(v, aux[:])", "matmul_vector": "v @ aux[:]",
                "einsum_vector": "torch.einsum('mn,n->m', v, aux[:])", "outer": ""}[choice]

    def pointwise(self, v: torch.Tensor) -> str:
        d = self.dim()
        return self.rng.choice([
            f"torch.logaddexp(v, v.flip({d}))", f"torch.logaddexp2(v, v * 0.5)", "torch.hypot(v, v * 0.5 + 1)",
            "torch.deg2rad(v)", "torch.rad2deg(v)", "torch.sgn(v)", "torch.special.expit(v)", "F.tanhshrink(v)",
            "F.softshrink(v, 0.5)", "F.hardshrink(v, 1.0)", "F.threshold(v, 0.1, 2.0)", f"F.softmin(v, {d})",
            f"torch.nansum(v, {d}, keepdim=True)", f"torch.nanmean(v, {d})", f"torch.aminmax(v, dim={d}).min",
            f"torch.aminmax(v, dim={d}, keepdim=True).max", "torch.isclose(v, v.flip(1))",
            f"torch.isclose(v, v.roll(1, {d}), rtol=0.5, atol=1.0)", "torch.isclose(v, v * 2, rtol=0.0, atol=0.0)"])

    def elementwise(self, v: torch.Tensor) -> str:
        return self.rng.choice(["v * 2 + 1", "v.abs()", "-v", "torch.where(v > 0, v, v * 0)", "v.float() * 0.5",
                                "(v == v).to(torch.int32)", "torch.maximum(v, v * 0)", "v + v"])

    def cast(self, v: torch.Tensor) -> str:
        return f"v.to({self.rng.choice(['torch.float32', 'torch.float16', 'torch.int32', 'torch.int64', 'torch.bfloat16'])})"

    def normalise(self, v: torch.Tensor) -> str:
        d = self.dim()
        return self.rng.choice([f"v - v.amax({d}, keepdim=True)", f"v * v.sum({d}, keepdim=True)",
                                f"torch.softmax(v.float(), {d})"])

    def unsqueeze(self, v: torch.Tensor) -> str:
        return self.rng.choice(["v[:, None]", "v.unsqueeze(1)", "v.unsqueeze(-1)", "v[:, None].repeat(1, 3)",
                                "v[:, None].expand(-1, 2)"])


def _distinct_rows(v: torch.Tensor) -> bool:
    """Whether no row of `v` holds a tie or a NaN: where one does, torch's kthvalue and median name
    any of the tied lanes, and Tessera the first (order_statistics.py)."""
    if v.dtype.is_floating_point and bool(torch.isnan(v).any()):
        return False
    return all(torch.unique(row).numel() == row.numel() for row in v)


def draw(seed: int) -> Program:
    """The program of `seed`."""
    rng = random.Random(seed * 104729 + 17)
    dtype = rng.choice(DTYPES)
    shape = (rng.choice(SIZES), rng.choice(SIZES))
    layout = rng.choice(sorted(_LAYOUTS))
    x = _LAYOUTS[layout](_values(rng, dtype, shape, rng.random() < 0.25))
    program = Program(seed, [], x, torch.zeros(1), torch.zeros(1, dtype=torch.int64), rng.choice(BLOCKS), layout)
    draws = Draws(rng, program)
    v = x
    for _ in range(rng.randint(1, MAX_STEPS)):
        for _attempt in range(8):
            step = rng.choice(draws.candidates(v))(v)
            saved = (program.aux, program.idx, draws.aux_used, draws.idx_used)
            try:
                result = _evaluate(step, v, program)
            except Exception:  # noqa: BLE001 - torch refuses this step here: draw another
                program.aux, program.idx, draws.aux_used, draws.idx_used = saved
                continue
            if not isinstance(result, torch.Tensor) or result.dim() not in (1, 2) or result.shape[0] != x.shape[0] \
                    or result.numel() == 0:
                continue
            program.steps.append(step)
            v = result
            break
    return program


def _evaluate(step: str, v: torch.Tensor, program: Program) -> Any:
    import torch.nn.functional as F  # noqa: N812,F401 - the steps' namespace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return eval(step, {"torch": torch, "F": F, "half": _half}, {"v": v, "aux": program.aux,  # noqa: S307
                                                                    "idx": program.idx})


def _half(n: int) -> int:
    return n // 2 if n > 1 else 1


# -- running ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Finding:
    seed: int
    kind: str      # "wrong" | "raw" | "disagree"
    detail: str
    program: str


_MODULES = Path(tempfile.gettempdir()) / f"tessera_program_fuzz_{id(object())}"


def load(program: Any) -> Any:
    """The program's module, imported from a file (tessera reads the kernel's source); any
    program with a `seed` and a `source()` (op_mix_fuzz.py's too)."""
    _MODULES.mkdir(parents=True, exist_ok=True)
    path = _MODULES / f"program_{program.seed}_{abs(hash(program.source()))}.py"
    path.write_text(program.source())
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tolerance(program: Program, result: torch.Tensor) -> float:
    dtypes = [program.x.dtype, program.aux.dtype, result.dtype]
    return max(TOLERANCES.get(d, 0.0) for d in dtypes)


def outcome(program: Program, module: Any, mode: str, expected: torch.Tensor,
            arguments: tuple[Any, ...] | None = None) -> tuple[str, Any]:
    """("ok", result) or ("located", error) or ("raw", error) of one run in `mode` (on the program's
    inputs and an output shaped as `expected`, or on `arguments`)."""
    if arguments is None:
        arguments = (program.x, program.aux, program.idx, torch.zeros(expected.shape, dtype=expected.dtype))
    kernel = tessera.kernel(module.kernel, mode=mode, config=tessera.Config(block_sizes=[program.block]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", kernel(*[a.clone() if isinstance(a, torch.Tensor) and a.dim() and a.stride()[-1] else a
                                  for a in arguments])
    except exc.TesseraError as error:
        return "located", error
    except Exception as error:  # noqa: BLE001 - a raw crash is what the fuzz reports
        return "raw", error


def mismatch(result: torch.Tensor, expected: torch.Tensor, tolerance: float) -> str | None:
    """Why `result` is not torch's `expected` (None when it is)."""
    try:
        torch.testing.assert_close(result, expected, rtol=tolerance, atol=tolerance, equal_nan=True)
    except AssertionError as error:
        return " ".join(str(error).split())[:300]
    return None


def run_seed(seed: int, modes: tuple[str, ...] = ("eager", "interpret")) -> tuple[list[Finding], str | None]:
    """The findings of seed `seed`'s program, and the refusal when every mode refused it."""
    program = draw(seed)
    module = load(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = module.reference(program.x.contiguous(), program.aux, program.idx)
    outcomes = {mode: outcome(program, module, mode, expected) for mode in modes}
    return verdicts(seed, outcomes, expected, _tolerance(program, expected), program.describe())


def verdicts(seed: int, outcomes: dict[str, tuple[str, Any]], expected: torch.Tensor, tolerance: float,
             described: str) -> tuple[list[Finding], str | None]:
    """The findings of one program's `outcomes` per mode against torch's `expected`, and the
    refusal when every mode refused it (op_mix_fuzz.py shares these verdicts)."""
    findings = []
    for mode, (status, value) in outcomes.items():
        if status == "raw":
            findings.append(Finding(seed, "raw", f"{mode}: {type(value).__name__}: {str(value)[:300]}", described))
        elif status == "ok":
            problem = mismatch(value, expected, tolerance)
            if problem:
                findings.append(Finding(seed, "wrong", f"{mode}: {problem}", described))
    statuses = {status for status, _ in outcomes.values()}
    if statuses == {"ok", "located"}:
        errors = "; ".join(f"{mode}: {str(value).splitlines()[0]}" for mode, (status, value) in outcomes.items()
                           if status == "located")
        findings.append(Finding(seed, "disagree", errors, described))
    last = list(outcomes.values())[-1][1]
    refusal = str(last).splitlines()[0] if statuses == {"located"} else None
    return findings, refusal


# -- host-side misuse: the same program called with an argument it was not written for -------------
MISUSES = ("x_of_rank_3", "x_of_rank_1", "float_index", "bool_index", "matrix_index", "index_out_of_range",
           "out_of_another_dtype", "out_wider", "out_narrower", "x_of_another_dtype")


def _misused(program: Program, expected: torch.Tensor, misuse: str, rng: random.Random) -> tuple[Any, ...]:
    """The kernel's arguments (x, aux, idx, out) with one of them changed as `misuse` names."""
    x, aux, idx = program.x, program.aux, program.idx
    out = torch.zeros(expected.shape, dtype=expected.dtype)
    if misuse == "x_of_rank_3":
        x = x.contiguous()[:, None, :].expand(-1, 2, -1)
        out = torch.zeros((expected.shape[0], 2, *expected.shape[1:]), dtype=expected.dtype)
    elif misuse == "x_of_rank_1":
        x = x[:, 0].contiguous()
    elif misuse == "float_index":
        idx = idx.float()
    elif misuse == "bool_index":
        idx = idx != 0
    elif misuse == "matrix_index":
        idx = idx[None, :]
    elif misuse == "index_out_of_range":
        idx = idx + rng.choice([64, -64])
    elif misuse == "out_of_another_dtype":
        out = out.to(rng.choice([torch.float64, torch.int32, torch.float16, torch.bool]))
    elif misuse == "out_wider":
        out = torch.zeros(expected.shape[0], 3 if expected.dim() == 1 else expected.shape[1] + 1, dtype=expected.dtype)
    elif misuse == "out_narrower" and expected.dim() == 2:
        out = out[:, : expected.shape[1] - 1].contiguous() if expected.shape[1] > 1 else out[:0]
    elif misuse == "x_of_another_dtype":
        x = x.to(rng.choice([torch.float64, torch.int32, torch.float16, torch.bool]))
    return x, aux, idx, out


def _torch_answer(module: Any, arguments: tuple[Any, ...]) -> torch.Tensor | BaseException:
    """What the kernel computes by torch's rules (the steps on the whole x, stored into out), or torch's error."""
    x, aux, idx, out = arguments
    answer = out.clone()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = module.reference(x.contiguous(), aux, idx)
            if value.dim() == 1 and answer.dim() == 2:  # Helion's broadcast by tile: out[tile] = v fills each row
                answer[:, :] = value[:, None]
            elif value.dim() == 1:
                answer[:] = value
            else:
                answer[:, :] = value
    except Exception as error:  # noqa: BLE001 - torch refuses the misused call
        return error
    return answer


def run_misuse(seed: int, modes: tuple[str, ...] = ("eager", "interpret")) -> list[Finding]:
    """The findings of seed `seed`'s program called with one misused argument: each mode must give
    torch's answer or a located error, and a located error wherever torch refuses."""
    program = draw(seed)
    module = load(program)
    rng = random.Random(seed)
    misuse = rng.choice(MISUSES)
    if misuse in ("float_index", "bool_index", "matrix_index", "index_out_of_range") and "idx[" not in program.source():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = module.reference(program.x.contiguous(), program.aux, program.idx)
    arguments = _misused(program, expected, misuse, rng)
    answer = _torch_answer(module, arguments)
    described = f"misuse {misuse}: " + program.describe()
    findings = []
    for mode in modes:
        status, value = outcome(program, module, mode, expected, arguments)
        if status == "raw":
            findings.append(Finding(seed, "raw", f"{mode} ({misuse}): {type(value).__name__}: {str(value)[:300]}",
                                    described))
        elif status == "ok" and isinstance(answer, BaseException):
            if misuse == "index_out_of_range" and mode != "eager":
                continue  # registers cannot raise: an index outside the dim reads 0 (README limits)
            findings.append(Finding(seed, "wrong", f"{mode} ({misuse}): computes where torch raises "
                                    f"{type(answer).__name__}: {str(answer)[:200]}", described))
        elif status == "ok":
            problem = mismatch(value, answer, _tolerance(program, answer))
            if problem:
                findings.append(Finding(seed, "wrong", f"{mode} ({misuse}): {problem}", described))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misuse", action="store_true", help="call each program with one misused argument")
    return campaign(parser, argv, lambda options, seed: (run_misuse(seed), None) if options.misuse else run_seed(seed))


def campaign(parser: argparse.ArgumentParser, argv: list[str] | None,
             run: Callable[[argparse.Namespace, int], tuple[list[Finding], str | None]]) -> int:
    """Runs `run(options, seed)` over the seeds the command line asks for: one line per finding and
    a summary; 1 when anything was found."""
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--base", type=int, default=0)
    parser.add_argument("--show", action="store_true", help="print each finding's program")
    parser.add_argument("--refusals", action="store_true", help="print the error of each program refused")
    options = parser.parse_args(argv)
    found, refused = 0, 0
    for seed in range(options.base, options.base + options.seeds):
        findings, refusal = run(options, seed)
        refused += refusal is not None
        if refusal and options.refusals:
            print(f"[refused] seed {seed}: {refusal}", flush=True)
        for finding in findings:
            found += 1
            print(f"[{finding.kind}] seed {finding.seed}: {finding.detail}", flush=True)
            if options.show:
                print(finding.program, flush=True)
    print(f"total: {options.seeds} programs, {found} findings, {refused} refused in every mode", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
