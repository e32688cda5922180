"""Random-program fuzz of session 12's ops and stores: eager vs interpret vs torch.

    python benchmarks/op_mix_fuzz.py                      # 50 seeds from 0
    python benchmarks/op_mix_fuzz.py --seeds 2000 --base 100 --show   # --show prints each finding's program

A sibling of program_fuzz.py (whose inputs, layouts and verdicts it shares). Each seed draws one
row kernel over `x` [m, n] and a second operand `y` like it: `v = x[tile, :]` (or a gather of
rows `x[rows[tile], :]` whose out-of-range lanes read 0), then 1 to 4 steps of session 12's ops
along the whole dim (spelled 1 or -1): torch's special functions (sinc, logit, erfinv, ldexp,
ndtr, xlog1py, entr), layer functions (F.linear, F.pad in its four modes, F.dropout where its
draw does not matter, cosine_similarity, one_hot), pointwise losses with reduction "none",
cross_entropy / nll_loss per row, torch.inner, sort / topk, factories made by a helper
(trace/factories.py), casts; then one store: plain, a window `out[t.begin:t.begin + B]`, a
write-back `out[tile, :] = torch.where(keep, v, out[tile, :])` (trace/write_back.py), a scatter
to permuted rows whose out-of-range lanes write nothing, or a total over the tiled dim added with
`hl.atomic_add` (sums, torch.dot / vdot / inner of vectors, losses with "sum", and "mean" where
one tile covers every row). Inputs are fp32, fp16, bf16, ints or bool, with NaN / inf / -0.0 /
-NaN, contiguous, column-major, strided with an offset, or broadcast (stride 0); sizes and block
sizes make size-1 dims and tails. The reference applies the same lines to the whole tensors.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tessera  # noqa: E402
from tessera import exc  # noqa: E402

import program_fuzz as base  # noqa: E402 - the sibling fuzz: inputs, layouts, verdicts

Finding = base.Finding
SIZES = (1, 2, 3, 4, 5, 7, 8, 13, 16, 17)
BLOCKS = (1, 2, 4, 8, 16, 32)
MAX_STEPS = 4
STORES = ("plain", "plain", "window", "write_back", "write_back_inverted", "scatter", "total")
TOLERANCES = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float64: 1e-9}


@dataclasses.dataclass
class Program:
    """One drawn kernel: its load, steps (expressions of `v`, `w`, `lab`), store, inputs and block."""

    seed: int
    load: str
    steps: list[str]
    store: str
    total: str
    x: torch.Tensor
    y: torch.Tensor
    aux: torch.Tensor      # a weight the steps read as aux[:, :]
    labels: torch.Tensor   # int64 classes per row
    rows: torch.Tensor     # the row of x each program lane gathers (load "gather")
    targets: torch.Tensor  # the row of out each lane scatters to (store "scatter")
    out: torch.Tensor      # the output before the kernel runs (write-back stores keep some of it)
    block: int
    layout: str
    inner_block: int = 0   # the inner loop's block ("tiles" programs: x[tile, tile_n] in a loop over n)
    s: float = 0.5         # a float and an int the kernel takes as arguments (runtime scalars)
    i: int = 1

    def source(self) -> str:
        reference_steps = "\n".join(f"    v = ({step}).contiguous()" for step in self.steps) or "    pass"
        if self.load == "tiles":
            steps = "\n".join(f"            v = {step}" for step in self.steps) or "            pass"
            return TILES_KERNEL.format(steps=steps, reference_steps=reference_steps, fold=self.total,
                                       start=_FOLDS[self.total][0], combine=_FOLDS[self.total][1])
        steps = "\n".join(f"        v = {step}" for step in self.steps) or "        pass"
        kernel_load = {"row": "x[tile, :]", "gather": "x[rows[tile], :]"}[self.load]
        reference_load = {"row": "x", "gather": "gather_rows(x, rows)"}[self.load]
        return KERNEL.format(steps=steps, reference_steps=reference_steps, load=kernel_load,
                             reference_load=reference_load, store=_KERNEL_STORES[self.store].format(total=self.total),
                             reference_store=_REFERENCE_STORES[self.store].format(total=self.total))

    def arguments(self) -> tuple[Any, ...]:
        return self.x, self.y, self.aux, self.labels, self.rows, self.targets, self.out.clone(), self.s, self.i

    def describe(self) -> str:
        return (f"seed {self.seed}: s {self.s}, i {self.i}, x {self.x.dtype} {list(self.x.shape)} {self.layout}, y {self.y.dtype}, "
                f"block {self.block}{f' x {self.inner_block}' if self.inner_block else ''}, aux {self.aux.dtype} {list(self.aux.shape)}, labels {self.labels.tolist()}, "
                f"rows {self.rows.tolist()}, targets {self.targets.tolist()}, out {self.out.dtype} "
                f"{list(self.out.shape)}\n" + self.source())


KERNEL = '''import torch
import torch.nn.functional as F
import tessera.language as hl


def filled(n, value, dtype):
    """A helper making a factory inside the tile loop (trace/factories.py)."""
    return torch.full((n,), value, dtype=dtype)


def positions(n):
    return torch.arange(n)


def kernel(x, y, aux, labels, rows, targets, out, s, i):
    for tile in hl.tile(x.size(0)):
        v = {load}
        w = y[tile, :]
        lab = labels[tile]
{steps}
{store}
    return out


def gather_rows(x, rows):
    """x[rows]: a row index outside x reads a row of zeros."""
    inside = (rows >= -x.size(0)) & (rows < x.size(0))
    picked = x.contiguous()[torch.where(inside, rows, 0)]
    return torch.where(inside[:, None], picked, torch.zeros((), dtype=x.dtype))


def reference(x, y, aux, labels, rows, targets, out, s, i):
    v = {reference_load}
    w = y
    lab = labels
{reference_steps}
{reference_store}
    return out
'''

TILES_KERNEL = '''import torch
import torch.nn.functional as F
import tessera.language as hl


def kernel(x, y, aux, labels, rows, targets, out, s, i):
    for tile in hl.tile(x.size(0)):
        acc = hl.full([tile], {start}, dtype=torch.float32)
        lab = labels[tile]
        for tile_n in hl.tile(x.size(1)):
            v = x[tile, tile_n]
            w = y[tile, tile_n]
{steps}
            acc = {combine}
        out[tile] = acc
    return out


def reference(x, y, aux, labels, rows, targets, out, s, i):
    v = x
    w = y
    lab = labels
{reference_steps}
    out[...] = {fold}
    return out
'''

# the row folds of the tiles kernel: the reference's expression of the whole v, then the inner
# loop's start value and its combination of the tile with `acc`
_FOLDS = {
    "v.float().sum(-1)": ("0.0", "acc + v.float().sum(-1)"),
    "(v.float() * 0.5).sum(1)": ("0.0", "acc + (v.float() * 0.5).sum(1)"),
    "v.float().amax(-1)": ("float('-inf')", "torch.maximum(acc, v.float().amax(-1))"),
    "v.float().amin(1)": ("float('inf')", "torch.minimum(acc, v.float().amin(1))"),
    "torch.nansum(v.float(), 1)": ("0.0", "acc + torch.nansum(v.float(), 1)"),
}

_KERNEL_STORES = {
    "plain": "        if v.dim() == 1:\n            out[tile] = v\n        else:\n            out[tile, :] = v",
    "window": "        if v.dim() == 1:\n            out[tile.begin:tile.begin + tile.block_size] = v\n"
              "        else:\n            out[tile.begin:tile.begin + tile.block_size, :] = v",
    "write_back": "        keep = v.float() > 0.25\n        if v.dim() == 1:\n"
                  "            out[tile] = torch.where(keep, v, out[tile])\n        else:\n"
                  "            out[tile, :] = torch.where(keep, v, out[tile, :])",
    "write_back_inverted": "        keep = v.float() > 0.25\n        if v.dim() == 1:\n"
                           "            out[tile] = torch.where(keep, out[tile], v)\n        else:\n"
                           "            out[tile, :] = torch.where(keep, out[tile, :], v)",
    "scatter": "        if v.dim() == 1:\n            out[targets[tile]] = v\n        else:\n"
               "            out[targets[tile], :] = v",
    "total": "        hl.atomic_add(out, [0], {total})",
}
_REFERENCE_STORES = {
    "plain": "    out[...] = v",
    "window": "    out[...] = v",
    "write_back": "    out[...] = torch.where(v.float() > 0.25, v, out)",
    "write_back_inverted": "    out[...] = torch.where(v.float() > 0.25, out, v)",
    "scatter": "    inside = (targets >= -out.size(0)) & (targets < out.size(0))\n    out[targets[inside]] = v[inside]",
    "total": "    out[0] += {total}",
}


# -- drawing steps ----------------------------------------------------------------------------------
class Draws:
    """The candidate steps for the current value `v` (whole reference tensor) of the program."""

    def __init__(self, rng: random.Random, program: Program) -> None:
        self.rng = rng
        self.program = program
        self.aux_used = False

    def dim(self) -> str:
        return self.rng.choice(["1", "-1"])

    def candidates(self, v: torch.Tensor) -> list[Callable[[torch.Tensor], str]]:
        if self.program.load == "tiles":  # lane for lane only: the value is a tile in both dims
            return [self.special, self.special, self.pointwise_loss, self.pointwise_loss, self.dropout, self.cast,
                    self.scalars]
        # (a 1-D value runs along the tile: torch's right alignment would pair it with a whole dim of
        # the reference, so only lane-wise steps of v alone follow it)
        if v.dim() == 1:
            return [self.special, self.special, self.dropout, self.cast, self.unsqueeze, self.pointwise_loss,
                    self.scalars]
        return [self.scalars, self.scalars, self.special, self.special, self.special, self.dropout, self.helper_factory,
                self.cast, self.pointwise_loss, self.pointwise_loss, self.linear, self.pad, self.pad, self.cosine,
                self.one_hot, self.classification, self.inner, self.sort, self.sort, self.topk]

    def special(self, v: torch.Tensor) -> str:
        forms = ["torch.sinc(v)", "torch.special.sinc(v)", "v.sinc()", "torch.sinc(v * 0.25)",
                 "torch.logit(v)", "torch.logit(torch.sigmoid(v) * 0.5 + 0.25, 1e-3)", "torch.special.logit(v, 0.25)",
                 "v.logit()", "torch.logit(torch.sigmoid(v.float()) * 0.5 + 0.25)",
                 "torch.erfinv(torch.tanh(v.float()) * 0.5)", "torch.special.erfinv(v)", "v.erfinv()",
                 "torch.erfinv(v * 0.01)", "torch.ldexp(v, torch.tensor(3))",
                 "torch.special.xlog1py(v, 2.0)", "torch.special.entr(v)", "torch.special.entr(v.abs() * 0.1)",
                 "torch.special.ndtr(v.abs())", "torch.special.ndtr(v.abs() - 0.5)"]
        if v.dim() == 1:
            forms += ["torch.ldexp(v, lab % 5)", "torch.special.xlog1py(v, w[:, 0])"]
        else:
            forms += ["torch.ldexp(v, lab[:, None] % 5)", "torch.special.xlog1py(v, w)",
                      "torch.special.xlog1py(w.abs(), v)"]
        if v.dim() == 2 and self.program.load != "tiles":
            forms.append(f"torch.special.ndtr(v.amax({self.dim()}, keepdim=True) - v)")
        return self.rng.choice(forms)

    def scalars(self, v: torch.Tensor) -> str:
        """Session 12's ops given the kernel's float `s` (0 < s < 1) or int `i` (1 <= i <= 3) argument."""
        forms = ["torch.logit(v, s * 0.1)", "F.huber_loss(v, w, reduction='none', delta=s + 0.5)",
                 "F.smooth_l1_loss(v, w * s, reduction='none', beta=s)", "F.dropout(v, s, training=False)",
                 "torch.special.xlog1py(v, s)", "torch.special.xlog1py(s, v)", "torch.sinc(v * s)",
                 "torch.ldexp(v, torch.tensor(i))", "F.soft_margin_loss(v * s, torch.sign(w), reduction='none')",
                 "torch.special.entr(v * s)", "torch.erfinv(torch.tanh(v.float()) * s)"]
        if v.dim() == 2 and self.program.load != "tiles":
            d = self.dim()
            forms += ["F.pad(v, (1, 2), value=s)", f"torch.cosine_similarity(v, w, {d}, s * 1e-3)",
                      "F.pad(v, (i, 1))", "F.pad(v, (1, i), mode='replicate')",
                      "F.one_hot(lab, v.size(1) + i)", "F.cross_entropy(v, lab, reduction='none', ignore_index=i)"]
            if v.dtype != torch.int64:  # (sorts take 32-bit keys)
                forms.append(f"torch.topk(v, min(i, v.size({d})), {d}).values")
        return self.rng.choice(forms)

    def dropout(self, v: torch.Tensor) -> str:
        return self.rng.choice(["F.dropout(v, 0.0)", "F.dropout(v, 1.0)", "F.dropout(v, 0.4, training=False)",
                                "F.dropout(v, p=0.0, training=True)", "torch.dropout(v, 0.7, False)"])

    def helper_factory(self, v: torch.Tensor) -> str:
        d = self.dim()
        return self.rng.choice([f"v + positions(v.size({d}))", f"v * filled(v.size({d}), 2, v.dtype)",
                                f"torch.where(v > 0, v, filled(v.size({d}), -1.5, torch.float32))",
                                f"v - filled(v.size({d}), 1, v.dtype)[None, :]"])

    def cast(self, v: torch.Tensor) -> str:
        dtype = self.rng.choice(['torch.float32', 'torch.float16', 'torch.bfloat16', 'torch.int32'])
        if dtype == "torch.int32" and v.dtype.is_floating_point:  # truncating 2.9999999 or 3.0000001: noise
            return "v.round().to(torch.int32)"
        return f"v.to({dtype})"

    def unsqueeze(self, v: torch.Tensor) -> str:
        return self.rng.choice(["v[:, None]", "v.unsqueeze(1)", "v[:, None].expand(-1, 3)"])

    def pointwise_loss(self, v: torch.Tensor) -> str:
        target = self.rng.choice(["w", "w", "w * 0.5", "torch.zeros_like(v)", "1.5"] if v.dim() == 2 else ["w[:, 0]"])
        kind = self.rng.choice(["mse", "l1", "smooth", "huber", "soft_margin", "kl", "bce"])
        if kind == "soft_margin":
            target = self.rng.choice(["torch.sign(w)", "torch.where(w > 0, 1.0, -1.0)"])
            target = target if v.dim() == 2 else f"({target})[:, 0]"
        if kind == "kl":
            forms = [f"F.kl_div(v, {target}, reduction='none')", f"F.kl_div(v, {target}, reduction='none', log_target=True)"]
            if self.program.load != "tiles" and v.dim() == 2:  # (a 1-D value's softmax would run along the tile)
                forms.append(f"F.kl_div(torch.log_softmax(v, -1), {target}.softmax(-1), reduction='none')")
            return self.rng.choice(forms)
        if kind == "bce":
            return self.rng.choice([f"F.binary_cross_entropy_with_logits(v, torch.sigmoid({target}), reduction='none')",
                                    f"F.binary_cross_entropy_with_logits(v, (w > 0).to(v.dtype), reduction='none', "
                                    "pos_weight=torch.tensor(2.0))"])
        call = {"mse": "F.mse_loss", "l1": "F.l1_loss", "smooth": "F.smooth_l1_loss", "huber": "F.huber_loss",
                "soft_margin": "F.soft_margin_loss"}[kind]
        extra = {"smooth": f", beta={self.rng.choice([0.0, 0.5, 1.0, 2.0])}",
                 "huber": f", delta={self.rng.choice([0.5, 1.0, 3.0])}"}.get(kind, "")
        return f"{call}(v, {target}, reduction='none'{extra})"

    def linear(self, v: torch.Tensor) -> str:
        if self.aux_used:
            return "v"
        self.aux_used = True
        n = v.shape[1]
        dtype = self.rng.choice([v.dtype, v.dtype, torch.float32])
        self.program.aux = base._values(self.rng, dtype, (self.rng.choice([1, 2, 3, 5, 16]), n), False)
        return self.rng.choice(["F.linear(v, aux[:, :])", "F.linear(v, aux[:, :], aux[:, 0])",
                                "torch.nn.functional.linear(v, aux[:, :], bias=aux[:, -1])"])

    def pad(self, v: torch.Tensor) -> str:
        n = v.shape[1]
        mode = self.rng.choice(["constant", "constant", "reflect", "replicate", "circular"])
        if mode == "constant":
            before, after = self.rng.randint(-n + 1 if n > 1 else 0, 3), self.rng.randint(-1, 3)
            value = self.rng.choice(["", ", value=2.5", ", value=-1", ", 'constant', 0.0", ", value=float('nan')"])
            return f"F.pad(v, ({before}, {after}){value})"
        limit = n - 1 if mode == "reflect" else n
        before, after = self.rng.randint(0, max(limit, 0)), self.rng.randint(0, max(limit, 0))
        return f"F.pad(v, ({before}, {after}), mode='{mode}')"

    def cosine(self, v: torch.Tensor) -> str:
        d = self.dim()
        return self.rng.choice([f"F.cosine_similarity(v, w, dim={d})", f"torch.cosine_similarity(v, w, {d}, 1e-3)",
                                f"F.cosine_similarity(v, w[:, :1], dim={d})",
                                f"F.cosine_similarity(v, v.flip({d}), {d})[:, None]"])

    def one_hot(self, v: torch.Tensor) -> str:
        classes = int(self.program.labels.max()) + 1 + self.rng.randint(0, 2)
        return self.rng.choice([f"F.one_hot(lab, {classes})", f"F.one_hot(lab, num_classes={classes}) * v[:, :1]",
                                f"v[:, :1] + F.one_hot(lab, {classes}).to(v.dtype)"])

    def classification(self, v: torch.Tensor) -> str:
        ignore = self.rng.choice(["", ", ignore_index=0", ", ignore_index=-100", ", ignore_index=1"])
        return self.rng.choice([f"F.cross_entropy(v, lab, reduction='none'{ignore})",
                                f"F.nll_loss(torch.log_softmax(v, 1), lab, reduction='none'{ignore})",
                                f"F.nll_loss(v, lab, reduction='none'{ignore})",
                                "F.cross_entropy(v, w.softmax(-1), reduction='none')",
                                f"F.cross_entropy(v, lab, reduction='none')[:, None] * v"])

    def inner(self, v: torch.Tensor) -> str:
        if self.aux_used:
            return self.rng.choice(["torch.inner(v, torch.ones(v.size(1)))", "v @ torch.ones(v.size(-1), 2)"])
        self.aux_used = True
        n = v.shape[1]
        self.program.aux = base._values(self.rng, self.rng.choice([v.dtype, torch.float32]),
                                        (self.rng.choice([1, 2, 3, 5]), n), False)
        return self.rng.choice(["torch.inner(v, aux[:, :])", "v.inner(aux[:, :])", "torch.inner(v, aux[0, :])"])

    def sort(self, v: torch.Tensor) -> str:
        if v.dtype == torch.int64:  # sorts take 32-bit keys (README limits): the fuzz narrows first
            return "v.to(torch.int32)"
        d = self.dim()
        part = self.rng.choice(["values", "indices"]) if base._distinct_rows(v) else "values"
        descending = self.rng.choice([True, False])
        return self.rng.choice([f"torch.sort(v, {d}, descending={descending}).{part}",
                                f"torch.sort(v, dim={d}, descending={descending}, stable=True)"
                                f"[{0 if part == 'values' else 1}]",
                                f"v.sort({d})[{0 if part == 'values' else 1}]",
                                f"torch.sort(v, stable=True, dim={d}).values * 1"])

    def topk(self, v: torch.Tensor) -> str:
        if v.dtype == torch.int64:
            return "v.to(torch.int32)"
        n = v.shape[1]
        k = self.rng.randint(1, n)
        d = self.dim()
        part = self.rng.choice(["values", "indices"]) if base._distinct_rows(v) else "values"
        largest = self.rng.choice([True, False])
        return self.rng.choice([f"torch.topk(v, {k}, {d}, largest={largest}).{part}",
                                f"v.topk({k}, dim={d}, largest={largest}, sorted=True)[{0 if part == 'values' else 1}]"])


def _totals(rng: random.Random, v: torch.Tensor, whole_tile: bool) -> list[str]:
    """Scalars of the tile value `v` whose sum over the tiles is the same expression of the whole `v`."""
    forms = ["v.sum()", "v.float().sum()", "(v * v).sum()"]
    if v.dim() == 2:
        forms += ["torch.dot(v[:, 0], v[:, -1])", "torch.vdot(v.sum(1), w.sum(1))", "torch.inner(v[:, 0], w[:, 0])",
                  "torch.dot(v.float().sum(-1), w.float().sum(-1))",
                  "F.mse_loss(v, w, reduction='sum')", "F.l1_loss(v, w * 0.5, reduction='sum')",
                  "F.cross_entropy(v, lab, reduction='sum')", "F.nll_loss(v, lab, reduction='sum', ignore_index=0)",
                  "F.huber_loss(v, w, reduction='sum', delta=0.5)", "F.soft_margin_loss(v, torch.sign(w), reduction='sum')",
                  "F.binary_cross_entropy_with_logits(v, torch.sigmoid(w), reduction='sum')",
                  "F.kl_div(v, w, reduction='sum')"]
        if whole_tile:  # one tile holds every row: a mean over it is the whole mean
            forms += ["F.mse_loss(v, w)", "F.cross_entropy(v, lab)", "F.nll_loss(v, lab, ignore_index=1)",
                      "F.smooth_l1_loss(v, w, beta=0.5)", "v.mean()",
                      "F.binary_cross_entropy_with_logits(v, torch.sigmoid(w))", "F.cross_entropy(v, lab, ignore_index=0)"]
    else:
        forms += ["torch.dot(v, v)", "torch.vdot(v, w[:, 0])", "torch.inner(v, v)"]
    return forms


def _edge_values(rng: random.Random, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """program_fuzz's values, with a -NaN and a few domain edges (0, +-1, 0.5) for floats now and then."""
    values = base._values(rng, dtype, shape, rng.random() < 0.3)
    if dtype.is_floating_point and values.numel() > 2 and rng.random() < 0.3:
        flat = values.view(-1)
        for _ in range(rng.randint(1, 3)):
            flat[rng.randrange(flat.numel())] = rng.choice([-float("nan"), 0.0, 1.0, -1.0, 0.5, -0.0, 1e-30])
    return values


def draw(seed: int) -> Program:
    """The program of `seed`."""
    rng = random.Random(seed * 7919 + 3)
    dtype = rng.choice(base.DTYPES)
    m, n = rng.choice(SIZES), rng.choice(SIZES)
    layout = rng.choice(sorted(base._LAYOUTS))
    x = base._LAYOUTS[layout](_edge_values(rng, dtype, (m, n)))
    y_dtype = rng.choice([dtype, dtype, torch.float32])
    y = base._LAYOUTS[rng.choice(sorted(base._LAYOUTS))](_edge_values(rng, y_dtype, (m, n)))
    labels = torch.tensor([rng.randrange(n) for _ in range(m)])
    rows = torch.tensor([rng.randrange(-m, m) if rng.random() < 0.8 else rng.choice([m, m + 2, -m - 1])
                         for _ in range(m)])
    targets = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
    if m > 1 and rng.random() < 0.5:
        targets[rng.randrange(m)] = rng.choice([m, m + 5, -m - 1])
    block = rng.choice(BLOCKS)
    program = Program(seed, rng.choice(["row", "row", "row", "gather", "tiles"]), [], rng.choice(STORES), "", x, y,
                      torch.zeros(1, 1), labels, rows, targets, torch.zeros(1), block, layout)
    if program.load == "tiles":
        program.inner_block = rng.choice(BLOCKS)
    program.s, program.i = rng.choice([0.25, 0.5, 0.75, 0.1]), rng.randint(1, 3)
    draws = Draws(rng, program)
    v = _evaluate("v", _gather_rows(x, rows) if program.load == "gather" else x, program)
    for _ in range(rng.randint(1, MAX_STEPS)):
        for _attempt in range(8):
            step = rng.choice(draws.candidates(v))(v)
            saved = (program.aux, draws.aux_used)
            try:
                result = _evaluate(step, v, program)
            except Exception:  # noqa: BLE001 - torch refuses this step here: draw another
                program.aux, draws.aux_used = saved
                continue
            if not isinstance(result, torch.Tensor) or result.dim() not in (1, 2) or result.shape[0] != m \
                    or result.numel() == 0:
                program.aux, draws.aux_used = saved
                continue
            program.steps.append(step)
            v = result
            break
    _draw_store(rng, program, v)
    return program


def _draw_store(rng: random.Random, program: Program, v: torch.Tensor) -> None:
    if program.load == "tiles":
        program.store, program.total = "fold", rng.choice(sorted(_FOLDS))
        program.out = torch.zeros(v.shape[0])
        return
    if program.store == "total":
        for _attempt in range(8):
            total = rng.choice(_totals(rng, v, program.block >= v.shape[0]))
            try:
                value = _evaluate(total, v, program)
            except Exception:  # noqa: BLE001 - torch refuses it: draw another
                continue
            if value.dim() == 0 and (value.dtype.is_floating_point or value.dtype == torch.int64):
                program.total = total
                program.out = torch.zeros(1, dtype=value.dtype if value.dtype.is_floating_point else torch.int64)
                return
        program.store = "plain"
    if program.store == "scatter" and v.dim() == 2 and v.stride(0) == 0:
        program.store = "plain"
    out = _edge_values(rng, v.dtype, tuple(v.shape)) if v.dtype != torch.bool else torch.rand(v.shape) > 0.5
    program.out = out.contiguous()


def _gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    inside = (rows >= -x.size(0)) & (rows < x.size(0))
    picked = x.contiguous()[torch.where(inside, rows, 0)]
    return torch.where(inside[:, None], picked, torch.zeros((), dtype=x.dtype))


def _evaluate(step: str, v: torch.Tensor, program: Program) -> Any:
    import torch.nn.functional as F  # noqa: N812,F401 - the steps' namespace

    def filled(n: int, value: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.full((n,), value, dtype=dtype)

    namespace = {"torch": torch, "F": F, "filled": filled, "positions": torch.arange}  # the module's helpers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return eval(step, namespace, {"v": v, "w": program.y, "aux": program.aux,  # noqa: S307
                                      "lab": program.labels, "s": program.s, "i": program.i})


# -- running ----------------------------------------------------------------------------------------
def outcome(program: Program, module: Any, mode: str) -> tuple[str, Any]:
    """("ok", result) or ("located", error) or ("raw", error) of one run in `mode`; the inputs keep
    their layouts (a fresh copy of `out` per run)."""
    blocks = [program.block, program.inner_block] if program.load == "tiles" else [program.block]
    kernel = tessera.kernel(module.kernel, mode=mode, config=tessera.Config(block_sizes=blocks))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", kernel(*program.arguments())
    except exc.TesseraError as error:
        return "located", error
    except Exception as error:  # noqa: BLE001 - a raw crash is what the fuzz reports
        return "raw", error


def _tolerance(program: Program, expected: torch.Tensor) -> float:
    dtypes = [program.x.dtype, program.y.dtype, program.aux.dtype, expected.dtype]
    dtypes += [d for d in (torch.float16, torch.bfloat16) if str(d) in " ".join(program.steps)]  # a cast to it
    tolerance = max(TOLERANCES.get(d, 0.0) for d in dtypes)
    if tolerance > TOLERANCES[torch.float32] and any("erfinv" in step for step in program.steps[1:]):
        tolerance *= 4  # erfinv near +-1 multiplies a 16-bit input's last-bit difference
    if any(word in step for step in program.steps for word in ("linear", "inner")):
        tolerance = max(tolerance, 2e-4)  # sums of products in another order, with cancellation
    if program.store in ("total", "fold"):  # a sum over tiles in another order
        tolerance = max(tolerance * 4, 1e-4)
    return tolerance


def run_seed(seed: int, modes: tuple[str, ...] = ("eager", "interpret")) -> tuple[list[Finding], str | None]:
    """The findings of seed `seed`'s program, and the refusal when every mode refused it."""
    program = draw(seed)
    module = base.load(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = module.reference(*program.arguments())
    outcomes = {mode: outcome(program, module, mode) for mode in modes}
    return base.verdicts(seed, outcomes, expected, _tolerance(program, expected), program.describe())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    return base.campaign(parser, argv, lambda _options, seed: run_seed(seed))


if __name__ == "__main__":
    sys.exit(main())
