"""Fuzz of recently added language features: eager vs interpret (or compiled) vs PyTorch.

    python benchmarks/feature_fuzz.py                       # 20 seeds per probe, seed base 0
    python benchmarks/feature_fuzz.py --seeds 200 --base 7 --only tail_reductions broadcast_by_tile
    python benchmarks/feature_fuzz.py --device cuda         # compiled mode on the GPU

Each probe draws a small kernel over one feature (`and`/`or`/`not`/chained comparisons, device
`range` loops, module-global tensors, tuples of tensors, `hl.constexpr`, broadcast by tile,
size-1 dims, lerp/gather/stack/reshape, `view(dtype)`, stepped slices, var_mean/std_mean, mean
over tiles, split-K, mixed-dtype promotion, non-contiguous views, register_block_size tails)
with seeded random shapes, block sizes, dtypes and values, and its PyTorch reference. Every
draw runs in eager mode and in the device's generated mode; a result that differs from the
reference is a silent wrong answer, an exception other than a located `TesseraError` is a raw
crash, a located error in one mode where the other computes is a disagreement, and one in every
mode is a refusal (each probe draws only programs PyTorch computes). Prints one
line per finding and a summary; exits 1 when anything was found. tests/test_feature_fuzz.py
runs a few seeds of every probe.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tessera  # noqa: E402
import tessera.language as hl  # noqa: E402
from tessera import exc  # noqa: E402


@dataclasses.dataclass
class Draw:
    """One fuzz case: the kernel function, its arguments, the expected result."""

    what: str
    kernel: Callable[..., Any]
    args: tuple
    expected: Any
    config: tessera.Config | None = None
    tolerance: float = 1e-5


def _size(rng: random.Random, largest: int = 19) -> int:
    return rng.choice([1, 2, 3, 4, 5, 7, 8, 9, 13, 16, largest])


def _block(rng: random.Random) -> int:
    return rng.choice([1, 2, 4, 8, 16])


def probe_logic(rng: random.Random) -> Draw:
    """`and` / `or` / `not` / chained comparisons on host scalars and on values loaded per program."""
    low, high, v, w = rng.randint(-3, 3), rng.randint(0, 6), rng.randint(-4, 8), rng.randint(-2, 3)

    def kernel(x: torch.Tensor, flags: torch.Tensor, v: int, w: int) -> torch.Tensor:
        out = torch.zeros_like(x)
        for row in hl.grid(x.size(0)):
            flag = flags[row]
            if low < flag < high and not (v > 2 or w == 1):
                out[row, :] = x[row, :] * 2.0
            elif flag == low or not flag < high:
                out[row, :] = x[row, :] + 1.0
            else:
                out[row, :] = -x[row, :]
        return out
    m, n = _size(rng), _size(rng)
    x = torch.randn(m, n)
    flags = torch.randint(-4, 8, (m,), dtype=rng.choice([torch.int32, torch.int64]))
    expected = torch.empty_like(x)
    for row in range(m):
        flag = int(flags[row])
        if low < flag < high and not (v > 2 or w == 1):
            expected[row] = x[row] * 2.0
        elif flag == low or not flag < high:
            expected[row] = x[row] + 1.0
        else:
            expected[row] = -x[row]
    return Draw(f"logic low={low} high={high} v={v} w={w} m={m} n={n}", kernel, (x, flags, v, w), expected)


def probe_device_range(rng: random.Random) -> Draw:
    """`range(k)` with a runtime k inside a tile loop (a device loop), with a step."""
    k, step = rng.randint(0, 5), rng.choice([1, 2])

    def kernel(x: torch.Tensor, k: int) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            acc = x[tile] * 0
            for i in range(1, k, step):
                acc = acc + x[tile] * i
            out[tile] = acc
        return out
    n = _size(rng)
    x = torch.randn(n)
    expected = x * float(sum(range(1, k, step)))
    return Draw(f"device_range k={k} step={step} n={n}", kernel, (x, k), expected,
                tessera.Config(block_sizes=[_block(rng)]))


GLOBAL_OFFSETS = torch.zeros(1)


def probe_module_global(rng: random.Random) -> Draw:
    """A module-global tensor read inside the tile loop, reassigned between calls."""
    global GLOBAL_OFFSETS
    n = _size(rng)
    GLOBAL_OFFSETS = torch.randn(n)

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + GLOBAL_OFFSETS[tile]
        return out
    x = torch.randn(n)
    return Draw(f"module_global n={n}", kernel, (x,), x + GLOBAL_OFFSETS, tessera.Config(block_sizes=[_block(rng)]))


def probe_tensor_tuple(rng: random.Random) -> Draw:
    """A tuple (or list) of tensors as a kernel parameter, indexed by constants and iterated."""
    count, n = rng.randint(1, 3), _size(rng)
    as_list = rng.random() < 0.5

    def kernel(xs: Any, scale: float) -> torch.Tensor:
        out = torch.zeros_like(xs[0])
        for tile in hl.tile(out.size(0)):
            acc = xs[0][tile] * scale
            for x in xs[1:]:
                acc = acc + x[tile]
            out[tile] = acc
        return out
    xs = [torch.randn(n) for _ in range(count)]
    scale = rng.choice([0.5, -2.0, 3.0])
    expected = xs[0] * scale + sum(xs[1:], torch.zeros(n))
    return Draw(f"tensor_tuple count={count} list={as_list} n={n}", kernel,
                (list(xs) if as_list else tuple(xs), scale), expected, tessera.Config(block_sizes=[_block(rng)]))


def probe_constexpr(rng: random.Random) -> Draw:
    """`hl.constexpr` parameters choosing a branch and a scale."""
    flag, power = rng.random() < 0.5, rng.randint(0, 3)

    def kernel(x: torch.Tensor, flag: hl.constexpr, power: hl.constexpr) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            v = x[tile]
            if flag:
                v = v * 2
            out[tile] = v ** power
        return out
    n = _size(rng)
    x = torch.randn(n)
    expected = (x * 2 if flag else x) ** power
    return Draw(f"constexpr flag={flag} power={power} n={n}", kernel, (x, flag, power), expected,
                tessera.Config(block_sizes=[_block(rng)]), 1e-4)


def probe_broadcast_by_tile(rng: random.Random) -> Draw:
    """`a[t0, t1] op b[t0]` and `b[t1]`, square or not, stored or combined."""
    m, n = _size(rng), _size(rng)
    if rng.random() < 0.5:
        n = m
    block = _block(rng)
    by_row = rng.random() < 0.5
    op = rng.choice(["add", "mul", "where", "store"])

    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        for t0, t1 in hl.tile(a.shape):
            side = b[t0] if by_row else b[t1]
            if op == "add":
                out[t0, t1] = a[t0, t1] + side
            elif op == "mul":
                out[t0, t1] = side * a[t0, t1]
            elif op == "where":
                out[t0, t1] = torch.where(side > 0, a[t0, t1], side)
            else:
                out[t0, t1] = side
        return out
    a = torch.randn(m, n)
    b = torch.randn(m if by_row else n)
    side = b[:, None] if by_row else b[None, :]
    expected = {"add": a + side, "mul": side * a, "where": torch.where(side > 0, a, side),
                "store": side.expand(m, n)}[op]
    return Draw(f"broadcast_by_tile m={m} n={n} block={block} by_row={by_row} op={op}", kernel, (a, b),
                expected.contiguous(), tessera.Config(block_sizes=[block, block]))


def probe_size_one_dims(rng: random.Random) -> Draw:
    """Size-1 dims read by tiles (they broadcast), keepdim reductions, `[:, None]`."""
    m, n = _size(rng), _size(rng)

    def kernel(x: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm, tn in hl.tile(x.shape):
            v = x[tm, tn] + row[0, tn] + col[tm, 0:1]
            out[tm, tn] = v - v.amax(1, keepdim=True) + col[tm, 0][:, None]
        return out
    x, row, col = torch.randn(m, n), torch.randn(1, n), torch.randn(m, 1)
    block = _block(rng)
    # the row max is per tile of columns: use one column tile
    config = tessera.Config(block_sizes=[block, max(16, 1 << (n - 1).bit_length())])
    v = x + row + col
    expected = v - v.amax(1, keepdim=True) + col
    return Draw(f"size_one_dims m={m} n={n}", kernel, (x, row, col), expected, config)


def probe_lerp_gather_stack(rng: random.Random) -> Draw:
    """torch.lerp, torch.gather along a whole dim, torch.stack and a reshape of tile values."""
    m, n = _size(rng), rng.choice([1, 2, 4, 8, 16])
    choice = rng.choice(["lerp", "gather", "stack", "reshape"])

    def kernel(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), x.size(1)], dtype=x.dtype, device=x.device)
        for tm in hl.tile(x.size(0)):
            a, b = x[tm, :], y[tm, :]
            if choice == "lerp":
                r = torch.lerp(a, b, 0.25)
            elif choice == "gather":
                r = torch.gather(a, 1, idx[tm, :])
            elif choice == "stack":
                r = torch.stack([a, b], dim=2).sum(2)
            else:
                r = a.reshape(a.size(0), a.size(1)) * 2
            out[tm, :] = r
        return out
    x, y = torch.randn(m, n), torch.randn(m, n)
    idx = torch.randint(0, n, (m, n))
    expected = {"lerp": torch.lerp(x, y, 0.25), "gather": torch.gather(x, 1, idx), "stack": x + y,
                "reshape": x * 2}[choice]
    return Draw(f"lerp_gather_stack {choice} m={m} n={n}", kernel, (x, y, idx), expected,
                tessera.Config(block_sizes=[_block(rng)]), 1e-5)


def probe_view_dtype(rng: random.Random) -> Draw:
    """`v.view(dtype)` of a tile value: a bitcast between dtypes of one width."""
    pair = rng.choice([(torch.float32, torch.int32), (torch.int32, torch.float32), (torch.float16, torch.int16),
                       (torch.bfloat16, torch.int16), (torch.int16, torch.float16)])

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=pair[1], device=x.device)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile].view(pair[1])
        return out
    n = _size(rng)
    x = torch.randn(n).to(pair[0]) if pair[0].is_floating_point else torch.randint(-1000, 1000, (n,), dtype=pair[0])
    if not pair[1].is_floating_point or pair[0].is_floating_point:
        expected = x.view(pair[1])
    else:  # ints viewed as floats: keep to finite, non-NaN patterns
        x = torch.randn(n).to(pair[1]).view(pair[0])
        expected = x.view(pair[1])
    return Draw(f"view_dtype {pair} n={n}", kernel, (x,), expected, tessera.Config(block_sizes=[_block(rng)]), 0.0)


def probe_stepped_slice(rng: random.Random) -> Draw:
    """Stepped slices of a tensor argument inside a tile loop."""
    step, start = rng.choice([1, 2, 3]), rng.randint(0, 2)
    n = _size(rng) + start + 1

    def kernel(x: torch.Tensor) -> torch.Tensor:
        view = x[start::step]
        out = torch.empty([view.size(0)], dtype=x.dtype, device=x.device)
        for tile in hl.tile(view.size(0)):
            out[tile] = x[start::step][tile] * 2
        return out
    x = torch.randn(n)
    return Draw(f"stepped_slice start={start} step={step} n={n}", kernel, (x,), x[start::step] * 2,
                tessera.Config(block_sizes=[_block(rng)]))


def probe_statistics(rng: random.Random) -> Draw:
    """var_mean / std_mean / mean over a whole row, with a correction."""
    m, n = _size(rng), rng.choice([1, 2, 3, 5, 8, 16])
    which, correction = rng.choice(["var_mean", "std_mean"]), rng.choice([0, 1])
    if n == 1:
        correction = 0

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), 2], dtype=x.dtype, device=x.device)
        for tm in hl.tile(x.size(0)):
            spread, mean = getattr(torch, which)(x[tm, :], dim=1, correction=correction)
            out[tm, 0] = spread
            out[tm, 1] = mean
        return out
    x = torch.randn(m, n)
    spread, mean = getattr(torch, which)(x, dim=1, correction=correction)
    return Draw(f"statistics {which} correction={correction} m={m} n={n}", kernel, (x,),
                torch.stack([spread, mean], 1), tessera.Config(block_sizes=[_block(rng)]), 1e-4)


def probe_mean_over_tiles(rng: random.Random) -> Draw:
    """`mean` over a tile's dim (the tail tile counts its own lanes), summed per tile."""
    m, n = _size(rng), _size(rng)
    block = _block(rng)

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros([x.size(0), (x.size(1) + block - 1) // block], dtype=x.dtype, device=x.device)
        for tm, tn in hl.tile(x.shape, block_size=[None, block]):
            out[tm, tn.id] = x[tm, tn].mean(1)
        return out
    x = torch.randn(m, n)
    pad = (-n) % block
    chunks = torch.nn.functional.pad(x, (0, pad)).reshape(m, -1, block)
    counts = torch.tensor([min(block, n - i * block) for i in range(chunks.size(1))], dtype=x.dtype)
    expected = chunks.sum(2) / counts
    return Draw(f"mean_over_tiles m={m} n={n} block={block}", kernel, (x,), expected,
                tessera.Config(block_sizes=[_block(rng)]), 1e-5)


def probe_split_k(rng: random.Random) -> Draw:
    """A matmul with the `split_k` Config key (interpret/compiled) against torch."""
    m, n, k = _size(rng), _size(rng), rng.choice([1, 7, 16, 33, 64, 100])
    split = rng.choice([1, 2, 3, 4])

    def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), y.size(1)], dtype=x.dtype, device=x.device)
        for tm, tn in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(x.size(1)):
                acc = torch.addmm(acc, x[tm, tk], y[tk, tn])
            out[tm, tn] = acc.to(out.dtype) * 2
        return out
    x, y = torch.randn(m, k), torch.randn(k, n)
    config = tessera.Config(block_sizes=[16, 16, rng.choice([16, 32])], split_k=split)
    return Draw(f"split_k m={m} n={n} k={k} split={split}", kernel, (x, y), (x @ y) * 2, config, 1e-3)


_PROMOTION_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                     torch.float16, torch.bfloat16, torch.float32)


def probe_promotion(rng: random.Random) -> Draw:
    """Mixed int/float/bool operands of arithmetic, comparisons and where: torch's promotion."""
    da, db = rng.choice(_PROMOTION_DTYPES), rng.choice(_PROMOTION_DTYPES)
    op = rng.choice(["add", "mul", "sub", "max", "where", "ge", "div", "scalar"])
    if op == "sub" and torch.bool in (da, db):
        op = "add"

    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty(a.shape, dtype=expected.dtype, device=a.device)
        for tile in hl.tile(a.size(0)):
            x, y = a[tile], b[tile]
            if op == "add":
                r = x + y
            elif op == "mul":
                r = x * y
            elif op == "sub":
                r = x - y
            elif op == "max":
                r = torch.maximum(x, y)
            elif op == "where":
                r = torch.where(x > 0, x, y)
            elif op == "ge":
                r = x >= y
            elif op == "div":
                r = x / (y.abs() + 1)
            else:
                r = x * 3 + 1.5
            out[tile] = r
        return out
    n = _size(rng)

    def values(dtype: torch.dtype) -> torch.Tensor:
        if dtype == torch.bool:
            return torch.rand(n) < 0.5
        if dtype.is_floating_point:
            return (torch.randn(n) * 4).to(dtype)
        low = 0 if dtype == torch.uint8 else -5
        return torch.randint(low, 6, (n,), dtype=dtype)
    a, b = values(da), values(db)
    expected = {"add": lambda: a + b, "mul": lambda: a * b, "sub": lambda: a - b, "max": lambda: torch.maximum(a, b),
                "where": lambda: torch.where(a > 0, a, b), "ge": lambda: a >= b,
                "div": lambda: a / (b.abs() + 1), "scalar": lambda: a * 3 + 1.5}[op]()
    tolerance = 1e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1e-5
    return Draw(f"promotion {op} {da} {db} n={n}", kernel, (a, b), expected, tessera.Config(block_sizes=[_block(rng)]),
                tolerance)


def probe_views(rng: random.Random) -> Draw:
    """Transposed, sliced and expanded views as inputs; an output aliasing its input."""
    m, n = _size(rng), _size(rng)
    layout = rng.choice(["transposed", "sliced", "expanded", "in_place"])

    def kernel(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tm, tn in hl.tile(out.shape):
            out[tm, tn] = x[tm, tn] * 2 + 1
        return out
    base = torch.randn(n, m) if layout == "transposed" else torch.randn(m, n + 3)
    if layout == "transposed":
        x = base.t()
    elif layout == "sliced":
        x = base[:, 1:n + 1]
    elif layout == "expanded":
        x = torch.randn(1, n).expand(m, n)
    else:
        x = torch.randn(m, n)
    expected = x * 2 + 1
    out = x if layout == "in_place" else torch.empty(m, n)
    return Draw(f"views {layout} m={m} n={n}", kernel, (x, out), expected,
                tessera.Config(block_sizes=[_block(rng), _block(rng)]))


def probe_tail_reductions(rng: random.Random) -> Draw:
    """register_block_size accumulators of max/min/prod/sum/where over inner tiles with tails."""
    m, n = _size(rng), _size(rng, 23)
    kind = rng.choice(["max", "min", "prod", "sum", "where_max", "logical_all"])
    inits = {"max": float("-inf"), "min": float("inf"), "prod": 1.0, "sum": 0.0, "where_max": float("-inf"),
             "logical_all": True}

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
        block = hl.register_block_size(x.size(1))
        for tm in hl.tile(x.size(0)):
            acc = hl.full([tm, block], inits[kind], dtype=torch.bool if kind == "logical_all" else torch.float32)
            for tn in hl.tile(x.size(1), block_size=block):
                v = x[tm, tn]
                if kind == "max":
                    acc = torch.maximum(acc, v)
                elif kind == "min":
                    acc = torch.minimum(v, acc)
                elif kind == "prod":
                    acc = acc * v
                elif kind == "sum":
                    acc = acc + v
                elif kind == "where_max":
                    acc = torch.where(v > acc, v, acc)
                else:
                    acc = torch.logical_and(acc, v < 0)
            if kind in ("max", "where_max"):
                out[tm] = acc.amax(1)
            elif kind == "min":
                out[tm] = acc.amin(1)
            elif kind == "prod":
                out[tm] = acc.prod(1)
            elif kind == "sum":
                out[tm] = acc.sum(1)
            else:
                out[tm] = acc.all(1).float()
        return out
    x = -(torch.rand(m, n) + 0.5) if kind != "min" else torch.rand(m, n) + 0.5
    if kind == "prod":
        x = torch.rand(m, n) + 0.5
    expected = {"max": lambda: x.amax(1), "where_max": lambda: x.amax(1), "min": lambda: x.amin(1),
                "prod": lambda: x.prod(1), "sum": lambda: x.sum(1), "logical_all": lambda: (x < 0).all(1).float()}[kind]()
    config = tessera.Config(block_sizes=[rng.choice([1, 2, 4, 8, 16]), _block(rng)])
    return Draw(f"tail_reductions {kind} m={m} n={n} blocks={config.get('block_sizes')}", kernel, (x,), expected,
                config, 1e-4)


_TILE_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda v: v.sum(1), "amax": lambda v: v.amax(1), "amin": lambda v: v.amin(1),
    "argmax": lambda v: v.argmax(1).float(), "argmin": lambda v: v.argmin(1).float(), "prod": lambda v: v.prod(1),
    "mean": lambda v: v.mean(1), "all": lambda v: (v < 0).all(1).float(), "any": lambda v: (v > 0).any(1).float(),
    "logsumexp": lambda v: torch.logsumexp(v, 1), "softmax_max": lambda v: torch.softmax(v, 1).amax(1),
    "var": lambda v: torch.var(v, 1, correction=0), "max_values": lambda v: v.max(1).values,
    "std_mean": lambda v: torch.std_mean(v, 1, correction=0)[0],
}


def probe_tile_reductions(rng: random.Random) -> Draw:
    """A reduction over a tile's dim whose tail tile has padding lanes (values all of one sign)."""
    m, n, block = _size(rng), _size(rng, 23), _block(rng)
    kind = rng.choice(sorted(_TILE_REDUCTIONS))
    reduce = _TILE_REDUCTIONS[kind]

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros([x.size(0), (x.size(1) + block - 1) // block], dtype=torch.float32, device=x.device)
        for tm, tn in hl.tile(x.shape, block_size=[None, block]):
            out[tm, tn.id] = reduce(x[tm, tn])
        return out
    sign = rng.choice([-1.0, 1.0])
    x = sign * (torch.rand(m, n) + 0.5)
    chunks = [x[:, i:i + block] for i in range(0, n, block)]
    expected = torch.stack([reduce(chunk) for chunk in chunks], 1)
    return Draw(f"tile_reductions {kind} sign={sign} m={m} n={n} block={block}", kernel, (x,), expected,
                tessera.Config(block_sizes=[_block(rng)]), 1e-4)


def probe_sort_tails(rng: random.Random) -> Draw:
    """torch.sort / topk / cumsum / cummax over a tile's dim with a tail (padding must not sort in)."""
    m, n, block = _size(rng), _size(rng), rng.choice([2, 4, 8, 16])
    kind = rng.choice(["sort", "sort_descending", "cumsum", "cumprod"])

    def kernel(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm, tn in hl.tile(x.shape, block_size=[None, block]):
            v = x[tm, tn]
            if kind == "sort":
                r = torch.sort(v, dim=1).values
            elif kind == "sort_descending":
                r = torch.sort(v, dim=1, descending=True).values
            elif kind == "cumsum":
                r = torch.cumsum(v, dim=1)
            else:
                r = torch.cumprod(v, dim=1)
            out[tm, tn] = r
        return out
    x = rng.choice([-1.0, 1.0]) * (torch.rand(m, n) + 0.5)
    pieces = []
    for i in range(0, n, block):
        chunk = x[:, i:i + block]
        pieces.append({"sort": lambda: torch.sort(chunk, 1).values,
                       "sort_descending": lambda: torch.sort(chunk, 1, descending=True).values,
                       "cumsum": lambda: chunk.cumsum(1), "cumprod": lambda: chunk.cumprod(1)}[kind]())
    return Draw(f"sort_tails {kind} m={m} n={n} block={block}", kernel, (x,), torch.cat(pieces, 1),
                tessera.Config(block_sizes=[_block(rng)]), 1e-4)


PROBES: dict[str, Callable[[random.Random], Draw]] = {
    name.removeprefix("probe_"): function for name, function in globals().items() if name.startswith("probe_")}


@dataclasses.dataclass
class Finding:
    probe: str
    seed: int
    kind: str      # "wrong" | "raw" | "disagree" | "refused" (in every mode)
    detail: str


def _outcome(draw: Draw, mode: str) -> tuple[str, Any]:
    """("ok", result) or ("located", error) or ("raw", error) of one run."""
    args = tuple(a.clone() if isinstance(a, torch.Tensor) and a._base is None and a.stride() != (0,) * a.dim()
                 else a for a in draw.args)
    if len(draw.args) > 1 and draw.args[-1] is draw.args[0]:  # an output aliasing its input
        args = (args[0], args[0]) + args[2:]
    kernel = tessera.kernel(draw.kernel, mode=mode, config=draw.config)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", kernel(*args)
    except exc.TesseraError as error:
        return "located", error
    except Exception as error:  # noqa: BLE001 - a raw crash is what the fuzz reports
        return "raw", error


def _compare(result: Any, expected: Any, tolerance: float) -> str | None:
    try:
        torch.testing.assert_close(result.cpu(), expected, rtol=tolerance, atol=tolerance, equal_nan=True)
    except AssertionError as error:
        return str(error).strip().splitlines()[0] + " " + " ".join(str(error).split()[-12:])
    return None


def run_probe(name: str, seed: int, modes: tuple[str, ...]) -> list[Finding]:
    """Run one draw of probe `name` in each mode; its findings."""
    draw = PROBES[name](random.Random(seed * 7919 + sum(map(ord, name))))
    torch.manual_seed(seed)
    findings: list[Finding] = []
    outcomes = {mode: _outcome(draw, mode) for mode in modes}
    for mode, (status, value) in outcomes.items():
        if status == "raw":
            findings.append(Finding(name, seed, "raw", f"{mode}: {draw.what}: {type(value).__name__}: {value}"))
        elif status == "ok":
            problem = _compare(value, draw.expected, draw.tolerance)
            if problem:
                findings.append(Finding(name, seed, "wrong", f"{mode}: {draw.what}: {problem}"))
    statuses = {status for status, _ in outcomes.values()}
    if statuses == {"located"}:  # torch computes it: a probe of a supported feature is never refused
        error = next(iter(outcomes.values()))[1]
        findings.append(Finding(name, seed, "refused", f"{draw.what}: {str(error).splitlines()[0]}"))
    if statuses == {"ok", "located"}:
        errors = "; ".join(f"{mode}: {str(value).splitlines()[0]}" for mode, (status, value) in outcomes.items()
                           if status == "located")
        findings.append(Finding(name, seed, "disagree", f"{draw.what}: {errors}"))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--base", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(PROBES))
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args(argv)
    modes = ("eager", "compiled" if options.device == "cuda" else "interpret")
    if options.device == "cuda":
        torch.set_default_device("cuda")
    findings: list[Finding] = []
    for name in options.only or sorted(PROBES):
        mine = [f for seed in range(options.base, options.base + options.seeds) for f in run_probe(name, seed, modes)]
        print(f"{name}: {options.seeds} draws, {len(mine)} findings", flush=True)
        for finding in mine:
            print(f"  [{finding.kind}] seed {finding.seed}: {finding.detail[:400]}", flush=True)
        findings += mine
    print(f"total: {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
