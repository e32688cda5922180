"""One row per primitive, run in every mode the device has, checked against PyTorch.

A row names the primitive, a kernel shape (`LAYOUTS`) and the expression the kernel applies to
its tiles; the reference applies the same expression to whole tensors with torch. Adding an op
means adding a row here: `test_every_primitive_has_a_row` fails until it exists. Shapes hold
size 1, a non-power-of-two and tail tiles (blocks of 4 x 16 over 5 x 37).
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import backends
from tessera.ir.graph import Op
from tessera.ir.primitive import ALL_PRIMITIVES
from tessera.language.elementwise import ELEMENTWISE_OPS
from tessera.language.reductions import REDUCTIONS
from tessera.language.rng import draw_seeds, philox_first_word, philox_words

SHAPES = ((5, 37), (1, 1))
CONFIG = tessera.Config(block_sizes=[4, 16])
# layouts with a second tile loop take two more entries (compiled mode reaches it)
LAYOUT_CONFIGS = {"assembled": tessera.Config(block_sizes=[4, 16, 4, 16])}
T = torch.Tensor


# -- kernel layouts: how a row's expression meets the tiles --------------------------------------
def elementwise(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = op(x[tile_m, tile_n], y[tile_m, tile_n], z[tile_m, tile_n])
    return out


def row_to_value(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m in hl.tile(x.size(0)):
        out[tile_m] = op(x[tile_m, :])
    return out


def row_to_row(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m in hl.tile(x.size(0)):
        out[tile_m, :] = op(x[tile_m, :])
    return out


def transposed(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = op(x[tile_n, tile_m])
    return out


def matrix(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = op(x[tile_m, :], y[:, tile_n], z[tile_m, tile_n])
    return out


def load_store(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        value = hl.load(x, [tile_m, tile_n], extra_mask=tile_n.index < 7, eviction_policy="evict_first")
        hl.store(out, [tile_m, tile_n], value * 2, extra_mask=(tile_m.index >= 1)[:, None])
    return out


def atomic_rows(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(x.size()):
        hl.atomic_add(out, [tile_m], x[tile_m, tile_n].sum(1))
    return out


def creation(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m in hl.tile(out.size(0)):
        filled = hl.full([tile_m, 8], 1.5, dtype=torch.float32)
        out[tile_m, :] = filled + hl.arange(8, dtype=torch.float32)[None, :] + hl.zeros([tile_m, 8])
    return out


def random_tiles(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = hl.rand([tile_m, tile_n], seed=11) + x[tile_m, tile_n]
    return out


def _philox_uniform(x: T) -> T:
    """hl.rand's numbers: Philox's first word at each element's row-major number, to [0, 1)."""
    word = philox_first_word(11, torch.arange(x.numel()).reshape(x.shape))
    signed = torch.where(word >= 2 ** 31, word - 2 ** 32, word)
    return torch.where(signed < 0, -signed - 1, signed).float() * 4.6566127342e-10 + x


def implicit_random(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    torch.manual_seed(5)  # the launch draws its seeds from torch's generator, as Helion's
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = op(x[tile_m, tile_n], tile_m, tile_n)
    return out


def stacked(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    sources = torch.tensor([x.data_ptr(), y.data_ptr(), z.data_ptr()], dtype=torch.uint64, device=x.device)
    targets = torch.tensor([out.data_ptr()], dtype=torch.int64, device=x.device)
    for tile_m, tile_n in hl.tile(out.size()):
        loaded = hl.stacktensor_like(x, sources[:])[tile_m, tile_n]  # [3, tile_m, tile_n]
        hl.stacktensor_like(out, targets[:])[tile_m, tile_n] = op(loaded)[None, :, :]
    return out


def scaled_matrix(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    x_scale = torch.full((x.size(0), x.size(1) // 32), 128, dtype=torch.uint8, device=x.device)  # 2**1
    y_scale = torch.full((y.size(1), y.size(0) // 32), 126, dtype=torch.uint8, device=x.device)  # 2**-1
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = op(x[tile_m, :], x_scale[tile_m, :], y[:, tile_n], y_scale[tile_n, :], z[tile_m, tile_n])
    return out


def pushed(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m in hl.tile(out.size(0)):
        hl.make_async_remote_copy(x, [tile_m], 0, dst=out).start()  # one rank: peer 0 is this device
    return out


REFERENCE_DEVICE = [torch.device("cpu")]  # the test's device: where the reference draws its seed


def _implicit_reference(x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    """The reference of torch.rand_like & co.: the launch's one seed, drawn as the kernel draws
    it, and Philox's words at each element's row-major number."""
    torch.manual_seed(5)
    seed = int(draw_seeds(1, REFERENCE_DEVICE[0])[0])
    return op(x, philox_words(seed, torch.arange(x.numel()).reshape(x.shape)))


def _uniform(word: T) -> T:
    signed = torch.where(word >= 2 ** 31, word - 2 ** 32, word)
    return torch.where(signed < 0, -signed - 1, signed).float() * 4.6566127342e-10


def _normal(words: tuple[T, ...]) -> T:
    radius = torch.sqrt(-2.0 * torch.log(torch.clamp_min(_uniform(words[0]), 1e-7)))
    return radius * torch.cos(6.283185307179586 * _uniform(words[1]))


def joined(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        first, second = hl.split(hl.join(x[tile_m, tile_n], y[tile_m, tile_n]))
        pair = torch.stack([first, second], dim=0)
        both = torch.cat([pair, pair], dim=0)
        out[tile_m, tile_n] = both.sum(0) - second
    return out


def assembled(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n]
    hl.barrier()  # between the launches
    if out.is_cuda:  # PTX: compiled mode only
        for tile_m, tile_n in hl.tile(out.size()):
            out[tile_m, tile_n] = hl.inline_asm_elementwise("add.f32 $0, $1, $1;", "=r,r", [out[tile_m, tile_n]],
                                                            dtype=torch.float32, is_pure=True, pack=1) * 0.5
    return out


BREAKPOINTS: list[int] = []


def debugged(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    hook, sys.breakpointhook = sys.breakpointhook, lambda: BREAKPOINTS.append(1)  # no debugger in tests
    try:
        for tile_m, tile_n in hl.tile(out.size()):
            hl.device_print("x", x[tile_m, tile_n])
            if op is not None:
                hl.breakpoint()
            out[tile_m, tile_n] = x[tile_m, tile_n]
    finally:
        sys.breakpointhook = hook
    return out


def reshaped(out: T, x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    rows = hl.specialize(x.size(0))
    cols = hl.specialize(x.size(1))
    for tile in hl.tile(rows * cols):
        flat = x.reshape(rows * cols)
        out[tile] = flat[tile] + 1
    return out


@dataclasses.dataclass(frozen=True)
class Layout:
    kernel: Callable[..., T]
    reference: Callable[..., T]  # (x, y, z, op) -> the expected result


def _matrix_reference(x: T, y: T, z: T, op: Callable[..., Any]) -> T:
    return op(x.double(), y.double(), z.double()).to(x.dtype)


LAYOUTS: dict[str, Layout] = {
    "elementwise": Layout(elementwise, lambda x, y, z, op: op(x, y, z)),
    "row_to_value": Layout(row_to_value, lambda x, y, z, op: op(x)),
    "row_to_row": Layout(row_to_row, lambda x, y, z, op: op(x)),
    "transposed": Layout(transposed, lambda x, y, z, op: op(x).contiguous()),
    "matrix": Layout(matrix, _matrix_reference),
    "load_store": Layout(load_store, lambda x, y, z, op: torch.where(
        (torch.arange(x.size(0))[:, None] >= 1) & (torch.arange(x.size(1))[None, :] < 7), x * 2, 0 * x)),
    "atomic_rows": Layout(atomic_rows, lambda x, y, z, op: x.sum(1)),
    "creation": Layout(creation, lambda x, y, z, op: 1.5 + torch.arange(8.0)[None, :].expand(x.size(0), 8)),
    "reshaped": Layout(reshaped, lambda x, y, z, op: x.reshape(-1) + 1),
    "random": Layout(random_tiles, lambda x, y, z, op: _philox_uniform(x)),
    "implicit_random": Layout(implicit_random, _implicit_reference),
    "stacked": Layout(stacked, lambda x, y, z, op: op(torch.stack([x, y, z]))),
    "scaled_matrix": Layout(scaled_matrix, lambda x, y, z, op: op(x, y, z)),
    "pushed": Layout(pushed, lambda x, y, z, op: x),
    "joined": Layout(joined, lambda x, y, z, op: 2 * x + y),
    "assembled": Layout(assembled, lambda x, y, z, op: x),
    "debugged": Layout(debugged, lambda x, y, z, op: x),
}


@dataclasses.dataclass(frozen=True)
class OpCase:
    primitive: str
    op: Callable[..., Any] | None = None
    layout: str = "elementwise"
    dtype: torch.dtype = torch.float32
    domain: str = "any"            # "positive" | "nonzero" | "small_int" | "bool": what inputs the op needs
    tolerance: float = 1e-5
    reference: Callable[..., Any] | None = None  # what the reference applies, when not `op` (hl-only ops)
    not_compiled: bool = False     # hl.breakpoint: the debugger needs Python, so compiled mode refuses it
    compiled_only: bool = False    # hl.inline_triton: Triton code, which eager mode refuses (located)

    @property
    def id(self) -> str:
        return f"{self.primitive}-{self.layout}-{str(self.dtype).replace('torch.', '')}"


F = torch.nn.functional
OPS: tuple[OpCase, ...] = (
    # elementwise (language/elementwise.py)
    OpCase("add", lambda x, y, z: x + y), OpCase("add", lambda x, y, z: torch.add(x, y, alpha=2), dtype=torch.bfloat16,
                                                 tolerance=1e-2),
    OpCase("sub", lambda x, y, z: 2 - x), OpCase("mul", lambda x, y, z: x * y),
    OpCase("truediv", lambda x, y, z: x / y, domain="nonzero"),
    OpCase("truediv", lambda x, y, z: torch.div(x, y, rounding_mode="floor"), domain="nonzero"),
    OpCase("truediv", lambda x, y, z: torch.div(x, other=y, rounding_mode="trunc"), dtype=torch.int32,
           domain="nonzero"),
    OpCase("floordiv", lambda x, y, z: x // y, dtype=torch.int32, domain="nonzero"),
    OpCase("mod", lambda x, y, z: x % y, dtype=torch.int32, domain="nonzero"),
    OpCase("pow", lambda x, y, z: x ** 2.5, domain="positive", tolerance=1e-4),
    OpCase("pow", lambda x, y, z: x ** 3.0, tolerance=1e-4),  # a negative base, an integral exponent
    OpCase("maximum", lambda x, y, z: torch.maximum(x, y)), OpCase("minimum", lambda x, y, z: torch.minimum(x, y)),
    OpCase("lt", lambda x, y, z: x < y), OpCase("le", lambda x, y, z: x <= y), OpCase("gt", lambda x, y, z: x > y),
    OpCase("ge", lambda x, y, z: x >= y), OpCase("eq", lambda x, y, z: x == x), OpCase("ne", lambda x, y, z: x != y),
    OpCase("bitwise_and", lambda x, y, z: x & y, dtype=torch.int32, domain="small_int"),
    OpCase("bitwise_or", lambda x, y, z: x | y, dtype=torch.int32, domain="small_int"),
    OpCase("bitwise_xor", lambda x, y, z: x ^ y, dtype=torch.int32, domain="small_int"),
    OpCase("invert", lambda x, y, z: ~x, dtype=torch.int32, domain="small_int"),
    OpCase("lshift", lambda x, y, z: x << (y & 7), dtype=torch.int32, domain="small_int"),
    OpCase("rshift", lambda x, y, z: torch.bitwise_right_shift(x, 2), dtype=torch.int32, domain="small_int"),
    OpCase("invert", lambda x, y, z: ~(x > y)),
    OpCase("logical_and", lambda x, y, z: torch.logical_and(x, y), dtype=torch.int32, domain="small_int"),
    OpCase("logical_or", lambda x, y, z: torch.logical_or(x, y > 0)),
    OpCase("logical_xor", lambda x, y, z: torch.logical_xor(x, y), dtype=torch.int32, domain="small_int"),
    OpCase("logical_not", lambda x, y, z: torch.logical_not(x), dtype=torch.int32, domain="small_int"),
    OpCase("neg", lambda x, y, z: -x), OpCase("abs", lambda x, y, z: abs(x)), OpCase("relu", lambda x, y, z: torch.relu(x)),
    OpCase("exp", lambda x, y, z: torch.exp(x)), OpCase("exp2", lambda x, y, z: torch.exp2(x)),
    OpCase("log", lambda x, y, z: torch.log(x), domain="positive"),
    OpCase("log2", lambda x, y, z: torch.log2(x), domain="positive"),
    OpCase("log1p", lambda x, y, z: torch.log1p(x), domain="positive"),
    OpCase("sqrt", lambda x, y, z: torch.sqrt(x), domain="positive"),
    OpCase("rsqrt", lambda x, y, z: torch.rsqrt(x), domain="positive", tolerance=1e-4),
    OpCase("reciprocal", lambda x, y, z: torch.reciprocal(x) + y.reciprocal(), domain="nonzero"),
    OpCase("sigmoid", lambda x, y, z: torch.sigmoid(x)), OpCase("tanh", lambda x, y, z: torch.tanh(x)),
    OpCase("sin", lambda x, y, z: torch.sin(x)), OpCase("cos", lambda x, y, z: torch.cos(x)),
    OpCase("erf", lambda x, y, z: torch.erf(x)), OpCase("gelu", lambda x, y, z: F.gelu(x)),
    OpCase("silu", lambda x, y, z: F.silu(x), tolerance=1e-4),
    OpCase("where", lambda x, y, z: torch.where(x > 0, y, z)),
    OpCase("where_method", lambda x, y, z: y.where(x > 0, z)),
    OpCase("floor", lambda x, y, z: torch.floor(x * 3)), OpCase("ceil", lambda x, y, z: (x * 3).ceil()),
    OpCase("trunc", lambda x, y, z: torch.trunc(x * 3), dtype=torch.bfloat16),
    OpCase("floor", lambda x, y, z: torch.floor(x) + y, dtype=torch.int32, domain="small_int"),
    # written with other primitives (language/composites.py)
    OpCase("masked_fill", lambda x, y, z: x.masked_fill(y > 0, -1.5)),
    OpCase("masked_fill", lambda x, y, z: torch.masked_fill(x, y > 0, 3), dtype=torch.bfloat16),
    OpCase("tan", lambda x, y, z: torch.tan(x), tolerance=1e-4),
    OpCase("sign", lambda x, y, z: torch.sign(x) * y), OpCase("sign", lambda x, y, z: x.sign(), dtype=torch.int32,
                                                             domain="small_int"),
    OpCase("isnan", lambda x, y, z: torch.where(torch.isnan(torch.log(x)), y, z)),
    OpCase("isinf", lambda x, y, z: torch.where((1 / (x * (x > 0))).isinf(), y, z)),
    OpCase("isfinite", lambda x, y, z: torch.where(torch.isfinite(torch.log(x) / (y > 0)), y, z)),
    OpCase("isposinf", lambda x, y, z: torch.where(torch.isposinf(torch.log(x) / (y > 0)), y, z)),
    OpCase("isneginf", lambda x, y, z: torch.where((torch.log(x) / (y > 0)).isneginf(), y, z)),
    OpCase("positive", lambda x, y, z: torch.positive(x) + y.positive()),
    OpCase("softplus", lambda x, y, z: F.softplus(x * 30), tolerance=1e-4),
    OpCase("softplus", lambda x, y, z: F.softplus(x, beta=2.0, threshold=1.0), tolerance=1e-4),
    # activations (language/activations.py): torch's formulas, fp32 inside for 16-bit inputs
    OpCase("leaky_relu", lambda x, y, z: F.leaky_relu(x, 0.2)),
    OpCase("leaky_relu", lambda x, y, z: F.leaky_relu(x), dtype=torch.bfloat16),
    OpCase("elu", lambda x, y, z: F.elu(x * 4, alpha=0.5), tolerance=1e-5),
    OpCase("selu", lambda x, y, z: F.selu(x * 4), tolerance=1e-5),
    OpCase("celu", lambda x, y, z: F.celu(x * 4, 2.0), dtype=torch.float16, tolerance=1e-3),
    OpCase("mish", lambda x, y, z: F.mish(x * 10), tolerance=1e-5),
    OpCase("hardtanh", lambda x, y, z: F.hardtanh(x, -0.5, 0.25)),
    OpCase("hardtanh", lambda x, y, z: F.hardtanh(x, -3, 2), dtype=torch.int32, domain="small_int"),
    OpCase("relu6", lambda x, y, z: F.relu6(x * 5)),
    OpCase("hardsigmoid", lambda x, y, z: F.hardsigmoid(x * 5)),
    OpCase("hardswish", lambda x, y, z: F.hardswish(x * 5), dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("logsigmoid", lambda x, y, z: F.logsigmoid(x * 30), tolerance=1e-5),
    OpCase("softsign", lambda x, y, z: F.softsign(x)),
    OpCase("gelu", lambda x, y, z: F.gelu(x * 3, approximate="tanh"), tolerance=1e-5),
    OpCase("gelu", lambda x, y, z: F.gelu(x, approximate="tanh"), dtype=torch.float16, tolerance=1e-3),
    OpCase("nan_to_num", lambda x, y, z: torch.nan_to_num(torch.log(x) / (y > 0))),
    OpCase("nan_to_num", lambda x, y, z: (torch.log(x) / (y > 0)).nan_to_num(1.5, 2.0, -3.0), dtype=torch.bfloat16),
    OpCase("normalize", lambda v: F.normalize(v, dim=1), layout="row_to_row", tolerance=1e-5),
    OpCase("normalize", lambda v: F.normalize(v, 1.0, -1) * 0 + F.normalize(v * 0, dim=-1), layout="row_to_row"),
    OpCase("pad", lambda v: F.pad(v, (1, 2)) + F.pad(v, (2, 1), value=-1.5) + F.pad(v, (3, 0), mode="replicate"),
           layout="row_to_row"),
    OpCase("pad", lambda v: F.pad(v, (1, 1), mode="circular") + F.pad(v[:, None, :], (1, 1, 1, 1)).sum(1),
           layout="row_to_row", dtype=torch.int32, domain="small_int"),
    OpCase("dropout", lambda x, y, z: F.dropout(x, 0.3, training=False) + F.dropout(y, 0.0) * 2
           + torch.dropout(z, 0.7, False) + torch.dropout(x, 0.0, train=True)),
    # pointwise losses (language/losses.py): reduction "none" lane by lane, "sum"/"mean" of the whole tile value
    OpCase("mse_loss", lambda x, y, z: F.mse_loss(x, y, reduction="none") + F.mse_loss(x, z * 0 + 2, reduction="none")),
    OpCase("l1_loss", lambda x, y, z: F.l1_loss(x, y, reduction="none"), dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("smooth_l1_loss", lambda x, y, z: F.smooth_l1_loss(x, y, reduction="none", beta=0.5)
           + F.smooth_l1_loss(x, z, reduction="none", beta=0.0)),
    OpCase("huber_loss", lambda x, y, z: F.huber_loss(x, y, reduction="none", delta=0.75)),
    OpCase("soft_margin_loss", lambda x, y, z: F.soft_margin_loss(x, y.sign(), reduction="none"), tolerance=1e-5),
    OpCase("kl_div", lambda x, y, z: F.kl_div(x, y.abs(), reduction="none") + F.kl_div(x, y, reduction="none",
                                                                                        log_target=True), tolerance=1e-5),
    OpCase("binary_cross_entropy_with_logits", lambda x, y, z: F.binary_cross_entropy_with_logits(
        x * 4, y.sigmoid(), reduction="none") + F.binary_cross_entropy_with_logits(
        x, y.sigmoid(), z.abs(), reduction="none", pos_weight=z.abs() + 0.5), tolerance=1e-5),
    OpCase("cosine_similarity", lambda v: F.cosine_similarity(v, v.flip([1]) * 2 + 1) + torch.cosine_similarity(
        v, v[:, :1], dim=-1, eps=1e-3), layout="row_to_value", tolerance=1e-5),
    OpCase("cosine_similarity", lambda v: F.cosine_similarity(v, v * v), layout="row_to_value", dtype=torch.float16,
           tolerance=1e-3),
    OpCase("mse_loss", lambda v: F.mse_loss(v, v.flip([1])) + v.sum(1) * 0 + F.huber_loss(v, v * 0.5, reduction="sum"),
           layout="row_to_value", tolerance=1e-4,
           reference=lambda v: torch.cat([F.mse_loss(c, c.flip([1])) + c.sum(1) * 0 + F.huber_loss(c, c * 0.5, reduction="sum")
                                          for c in v.split(4)])),
    OpCase("cross_entropy", lambda v: F.cross_entropy(v, v.argmin(1), reduction="none") + F.cross_entropy(v, v.argmax(1)),
           layout="row_to_value", tolerance=1e-5,
           reference=lambda v: torch.cat([F.cross_entropy(c, c.argmin(1), reduction="none") + F.cross_entropy(c, c.argmax(1))
                                          for c in v.split(4)])),
    OpCase("nll_loss", lambda v: F.nll_loss(v.log_softmax(1), v.argmax(1), reduction="none"), layout="row_to_value",
           tolerance=1e-5),
    OpCase("one_hot", lambda v: F.one_hot((v.abs() * 2).long().clamp(0, 5), 6).sum(1) + F.one_hot(v.long() * 0, 1).sum(1),
           layout="row_to_row", reference=lambda v: F.one_hot((v.abs() * 2).long().clamp(0, 5), 6).sum(1)
           + F.one_hot(v.long() * 0, 1).sum(1)),
    # arithmetic (language/arithmetic.py)
    OpCase("rsub", lambda x, y, z: torch.rsub(x, y, alpha=2) + torch.rsub(x, 1.5)),
    OpCase("addcmul", lambda x, y, z: torch.addcmul(x, y, z, value=0.5)),
    OpCase("addcmul", lambda x, y, z: x.addcmul(y, z), dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("addcdiv", lambda x, y, z: torch.addcdiv(x, y, z, value=-2), domain="nonzero", tolerance=1e-5),
    OpCase("fmax", lambda x, y, z: torch.fmax(torch.log(x), y)),
    OpCase("fmin", lambda x, y, z: torch.fmin(x, torch.log(y)) + torch.fmin(x * 4, y * 4).float().int().float(),
           dtype=torch.float16),
    OpCase("fmin", lambda x, y, z: torch.fmin(x, y), dtype=torch.int32, domain="small_int"),
    OpCase("copysign", lambda x, y, z: torch.copysign(x, y * (y > 0.5)) + torch.copysign(y, -0.0)),
    OpCase("signbit", lambda x, y, z: torch.where(torch.signbit(x * (x > 0.5) * -1.0), y, z)),
    OpCase("signbit", lambda x, y, z: torch.where(x.signbit(), y, z), dtype=torch.bfloat16),
    OpCase("heaviside", lambda x, y, z: torch.heaviside(torch.round(x), y)),
    OpCase("xlogy", lambda x, y, z: torch.xlogy(x * (x > 0.5), y.abs()) + torch.xlogy(2, y.abs()), tolerance=1e-5),
    OpCase("float_power", lambda x, y, z: torch.float_power(x, 3) + x.float_power(y), domain="positive",
           tolerance=1e-6),
    OpCase("round", lambda x, y, z: torch.round(x * 4) + torch.round(x * 5 + 0.5)),
    OpCase("round", lambda x, y, z: torch.round(x * 40, decimals=1) + x.round(decimals=-1), tolerance=1e-5),
    OpCase("round", lambda x, y, z: torch.round(x * 4), dtype=torch.bfloat16),
    OpCase("frac", lambda x, y, z: torch.frac(x * 7), tolerance=1e-6),
    OpCase("fmod", lambda x, y, z: torch.fmod(x * 8, y), domain="nonzero"),
    OpCase("fmod", lambda x, y, z: torch.fmod(x, y) + x.fmod(-3), dtype=torch.int32, domain="nonzero"),
    OpCase("fmod", lambda x, y, z: torch.fmod(x * 8, 1.5), dtype=torch.bfloat16),
    OpCase("square", lambda x, y, z: torch.square(x) + y.square()),
    OpCase("clamp_min", lambda x, y, z: x.clamp_min(0.1) + torch.clamp_min(x, y)),
    OpCase("clamp_max", lambda x, y, z: x.clamp_max(0.1) + torch.clamp_max(x, y)),
    # transcendentals (language/transcendentals.py): fp32 within 1e-5 relative of torch
    OpCase("expm1", lambda x, y, z: torch.expm1(x * 1e-4) * 1e4 + torch.expm1(x * 20) * 1e-8, tolerance=1e-5),
    OpCase("log10", lambda x, y, z: torch.log10(x), domain="positive", tolerance=1e-5),
    OpCase("atan", lambda x, y, z: torch.atan(x * 5) + torch.atan(x * 1e-3) * 1e3, tolerance=1e-5),
    OpCase("asin", lambda x, y, z: torch.asin(torch.clamp(x * 0.45, -1, 1)) + torch.asin(x * 1e-3) * 1e3, tolerance=1e-5),
    OpCase("acos", lambda x, y, z: torch.acos(torch.clamp(x * 0.45, -1, 1)), tolerance=1e-5),
    OpCase("atan2", lambda x, y, z: torch.atan2(x, y) + torch.atan2(x * (x > 0), -0.0 * y), tolerance=1e-5),
    OpCase("sinh", lambda x, y, z: torch.sinh(x * 10) * 1e-4 + torch.sinh(x * 1e-3) * 1e3, tolerance=1e-5),
    OpCase("cosh", lambda x, y, z: torch.cosh(x * 10) * 1e-4, tolerance=1e-5),
    OpCase("asinh", lambda x, y, z: torch.asinh(x * 100) + torch.asinh(x * 1e-3) * 1e3, tolerance=1e-5),
    OpCase("acosh", lambda x, y, z: torch.acosh(x * 100), domain="positive", tolerance=1e-5),
    OpCase("atanh", lambda x, y, z: torch.atanh(torch.clamp(x * 0.3, -0.999, 0.999)) + torch.atanh(x * 1e-3) * 1e3, tolerance=1e-5),
    # the tail's argument is a sum, not `a * b + c`: the GPU contracts that into one FMA (also in
    # fp16/bf16, skipping the product's 16-bit rounding) and log(erfc) at 3.3 turns its ulp into 1.5%
    OpCase("erfc", lambda x, y, z: torch.erfc(x * 4) + torch.log(torch.erfc(x.abs() + 3)), tolerance=1e-5),
    OpCase("erfc", lambda x, y, z: torch.erfc(x), dtype=torch.bfloat16, tolerance=1e-2),
    # special functions (language/special.py): erfinv over its whole domain (|x| > 1 is NaN, +-1 inf)
    OpCase("sinc", lambda x, y, z: torch.sinc(x * 3) + x.sinc() * 2, tolerance=1e-5),
    # log-gamma and digamma (language/gamma.py): poles at 0 and the negative integers as torch
    OpCase("lgamma", lambda x, y, z: torch.lgamma(x * 4) + torch.special.gammaln(y.round()) + z.lgamma(), tolerance=1e-5),
    OpCase("digamma", lambda x, y, z: torch.digamma(x * 4) + torch.special.psi(y.round() * 0.5) + z.digamma(),
           tolerance=1e-5),
    OpCase("mvlgamma", lambda x, y, z: torch.mvlgamma(x.abs() + 2, 3) + y.abs().add(1).mvlgamma(p=1), tolerance=1e-5),
    OpCase("sinc", lambda x, y, z: torch.special.sinc(x), dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("logit", lambda x, y, z: torch.logit(torch.sigmoid(x * 3)) + x.logit(0.25) * 0 + torch.logit(y, eps=0.1),
           tolerance=1e-5),
    OpCase("logit", lambda x, y, z: torch.special.logit(torch.sigmoid(x)), dtype=torch.float16, tolerance=1e-3),
    OpCase("erfinv", lambda x, y, z: torch.erfinv(x * 0.375) + torch.erfinv(x.clamp(-1, 1)), tolerance=1e-5),
    OpCase("erfinv", lambda x, y, z: torch.special.erfinv(x * 0.5) + x.erfinv(), dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("ndtr", lambda x, y, z: torch.special.ndtr(x * 4), tolerance=1e-5),
    OpCase("xlog1py", lambda x, y, z: torch.special.xlog1py(x * (x > 0.5), y.abs()) + torch.special.xlog1py(2, x.abs()),
           tolerance=1e-5),
    OpCase("entr", lambda x, y, z: torch.special.entr(x) + torch.special.entr(x * (x > 0.5)), tolerance=1e-5),
    OpCase("ldexp", lambda x, y, z: torch.ldexp(x, torch.round(y * 4)) + x.ldexp(torch.round(z)), tolerance=1e-5),
    OpCase("clamp", lambda x, y, z: torch.clamp(x, -0.5, 0.5)),
    OpCase("lerp", lambda x, y, z: torch.lerp(x, y, z)),
    OpCase("lerp", lambda x, y, z: x.lerp(y, 0.75), dtype=torch.float16, tolerance=1e-3),
    # more compositions (language/pointwise_extras.py)
    OpCase("logaddexp", lambda x, y, z: torch.logaddexp(x * 30, y) + torch.logaddexp(x, x), tolerance=1e-5),
    OpCase("logaddexp2", lambda x, y, z: x.logaddexp2(y * 50), dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("hypot", lambda x, y, z: torch.hypot(x * 1e30, y * 1e30) * 1e-30 + torch.hypot(x, y), tolerance=1e-5),
    OpCase("deg2rad", lambda x, y, z: torch.deg2rad(x * 90) + torch.rad2deg(y).deg2rad(), tolerance=1e-5),
    OpCase("rad2deg", lambda x, y, z: torch.rad2deg(x), dtype=torch.int32, domain="small_int"),
    OpCase("expit", lambda x, y, z: torch.special.expit(x * 4)),
    OpCase("tanhshrink", lambda x, y, z: F.tanhshrink(x), tolerance=1e-5),
    OpCase("softshrink", lambda x, y, z: F.softshrink(x, 0.3) + F.softshrink(y)),
    OpCase("hardshrink", lambda x, y, z: F.hardshrink(x) + torch.hardshrink(y, 0.2), dtype=torch.float16),
    OpCase("threshold", lambda x, y, z: F.threshold(x, 0.1, 20.0)),
    OpCase("sgn", lambda x, y, z: torch.sgn(x) + y.sgn()),
    OpCase("isclose", lambda x, y, z: torch.where(torch.isclose(x, x + y * 1e-6) & ~x.isclose(y, atol=0.5), y, z)),
    OpCase("softmin", lambda v: F.softmin(v, 1), layout="row_to_row", tolerance=1e-5),
    OpCase("nansum", lambda v: torch.nansum(torch.log(v), 1), layout="row_to_value", tolerance=1e-4),
    OpCase("nanmean", lambda v: v.log().nanmean(-1, keepdim=True) + v, layout="row_to_row", tolerance=1e-4),
    OpCase("aminmax", lambda v: torch.aminmax(v, dim=1).min + v.aminmax(dim=-1, keepdim=True).max.squeeze(1),
           layout="row_to_value"),
    # casts and views (language/view.py)
    OpCase("to", lambda x, y, z: x.to(torch.float16), tolerance=1e-3),
    OpCase("float", lambda x, y, z: x.float(), dtype=torch.bfloat16), OpCase("half", lambda x, y, z: x.half(), tolerance=1e-3),
    OpCase("bfloat16", lambda x, y, z: x.bfloat16(), tolerance=1e-2), OpCase("int", lambda x, y, z: (x * 4).int()),
    OpCase("long", lambda x, y, z: (x * 4).long()), OpCase("bool", lambda x, y, z: (x > 0).int().bool()),
    OpCase("double", lambda x, y, z: x.double()), OpCase("type_as", lambda x, y, z: (x * 4).int().type_as(y)),
    OpCase("short", lambda x, y, z: (x * 4).short()), OpCase("char", lambda x, y, z: (x * 4).char()),
    OpCase("byte", lambda x, y, z: (x * 4).abs().byte()),
    OpCase("type", lambda x, y, z: (x * 4).type(torch.int16) + y.type(dtype=torch.float16).float()),
    OpCase("getitem", lambda v: v[:, None].sum(1), layout="row_to_row"),
    # copies and masks (language/copies.py): tril/triu count rows within the tile (block 4), as eager's block does
    OpCase("clone", lambda x, y, z: x.clone() + torch.clone(y)),
    OpCase("contiguous", lambda x, y, z: x.contiguous() * 2), OpCase("detach", lambda x, y, z: x.detach() - y),
    OpCase("flatten", lambda v: v.unsqueeze(2).flatten(1) + torch.flatten(v[:, None, :], 1, 2), layout="row_to_row"),
    OpCase("tril", lambda v: torch.tril(v) + v.tril(-1), layout="row_to_row",
           reference=lambda v: torch.cat([torch.tril(c) + c.tril(-1) for c in v.split(4)])),
    OpCase("triu", lambda v: torch.triu(v, 2), layout="row_to_row", dtype=torch.bfloat16,
           reference=lambda v: torch.cat([torch.triu(c, 2) for c in v.split(4)])),
    # constant slices and ints of whole dims (language/slicing.py)
    OpCase("getitem", lambda v: v[:, ::2].sum(1) + v[..., -1] * 2, layout="row_to_value", tolerance=1e-5),
    OpCase("getitem", lambda v: v[:, :1] * v + v[:, 0:1], layout="row_to_row", dtype=torch.bfloat16,
           tolerance=1e-2),  # the GPU may contract v * v + w into one rounding (1 bf16 ulp)
    OpCase("cat", lambda v: torch.cat([v[:, -1:], v, v[:, :1] * 2], 1).sum(1), layout="row_to_value", tolerance=1e-5),
    OpCase("hstack", lambda v: torch.hstack([v, v * 2, v[:, :1]]).sum(1), layout="row_to_value", tolerance=1e-5),
    # amax, not a sum: the fuzz's edge values make a sum's order visible (the row checks the stacking)
    OpCase("column_stack", lambda v: torch.column_stack([v[:, -1] * 2, v[:, 0], v]).amax(1), layout="row_to_value",
           tolerance=1e-5),
    OpCase("diff", lambda v: torch.diff(v, dim=1, prepend=v[:, :1]), layout="row_to_row"),
    OpCase("diff", lambda v: torch.diff(torch.cat([v, v * v, v], 1), 2).sum(1), layout="row_to_value",
           dtype=torch.float16, tolerance=1e-2),
    OpCase("torch_split", lambda v: torch.cat(list(reversed(torch.split(torch.cat([v, v * 2, v * 3], 1), [v.size(1), 2 * v.size(1)], 1))), 1).sum(1), layout="row_to_value", tolerance=1e-5),
    OpCase("chunk", lambda v: torch.cat(list(reversed(v.chunk(3, 1))), 1), layout="row_to_row",
           dtype=torch.bfloat16),
    OpCase("unbind", lambda v: sum(torch.unbind(v * 2, 1)), layout="row_to_value", tolerance=1e-5),
    OpCase("glu", lambda v: F.glu(torch.cat([v, v * 3], 1), 1), layout="row_to_row"),
    OpCase("unsqueeze", lambda v: v.unsqueeze(1).sum(1), layout="row_to_row"),
    OpCase("squeeze", lambda v: v.amax(-1, keepdim=True).squeeze(-1), layout="row_to_value"),
    OpCase("expand", lambda v: v.amax(-1, keepdim=True).expand_as(v), layout="row_to_row"),
    OpCase("permute", lambda v: v.permute(1, 0), layout="transposed"),
    OpCase("transpose", lambda v: v.transpose(0, 1), layout="transposed"),
    OpCase("t", lambda v: v.t(), layout="transposed"),
    # reductions (language/reductions.py)
    OpCase("sum", lambda v: v.sum(-1), layout="row_to_value", tolerance=1e-4),
    OpCase("sum", lambda v: v.sum(-1), layout="row_to_value", dtype=torch.bfloat16, tolerance=2e-2),
    OpCase("mean", lambda v: v.mean(-1), layout="row_to_value", tolerance=1e-4),
    OpCase("amax", lambda v: v.amax(-1), layout="row_to_value"), OpCase("amin", lambda v: v.amin(-1), layout="row_to_value"),
    OpCase("argmax", lambda v: v.argmax(-1), layout="row_to_value"),
    OpCase("argmin", lambda v: v.argmin(-1), layout="row_to_value"),
    OpCase("max", lambda v: v.max(-1).values, layout="row_to_value"),
    OpCase("min", lambda v: v.min(-1).indices, layout="row_to_value"),
    OpCase("softmax", lambda v: torch.softmax(v, -1), layout="row_to_row", tolerance=1e-5),
    OpCase("log_softmax", lambda v: torch.log_softmax(v, -1), layout="row_to_row", tolerance=1e-5),
    # reductions built from those (language/statistics.py)
    OpCase("var", lambda v: v.var(-1), layout="row_to_value", tolerance=1e-4),
    OpCase("var", lambda v: torch.var(v, -1, correction=0, keepdim=True).squeeze(-1), layout="row_to_value",
           dtype=torch.bfloat16, tolerance=2e-2),
    OpCase("std", lambda v: v.std(-1, unbiased=False), layout="row_to_value", tolerance=1e-4),
    OpCase("var_mean", lambda v: torch.var_mean(v, -1, correction=0)[0] * 3 + torch.var_mean(v, -1)[1],
           layout="row_to_value", tolerance=1e-4),
    OpCase("std_mean", lambda v: torch.std_mean(v, 1, keepdim=True)[0] - torch.std_mean(v, 1, keepdim=True)[1] + v,
           layout="row_to_row", dtype=torch.bfloat16, tolerance=2e-2),
    OpCase("logsumexp", lambda v: torch.logsumexp(v, -1), layout="row_to_value", tolerance=1e-4),
    OpCase("logsumexp", lambda v: torch.logsumexp(torch.where(v < 10, float("-inf"), v), -1), layout="row_to_value"),
    OpCase("any", lambda v: (v > 0.9).any(-1), layout="row_to_value"),
    OpCase("all", lambda v: torch.all(v > -0.9, -1), layout="row_to_value"),
    OpCase("count_nonzero", lambda v: torch.count_nonzero(v > 0, -1), layout="row_to_value"),
    OpCase("layer_norm", lambda v: F.layer_norm(v, [v.size(1)]), layout="row_to_row", tolerance=1e-4),
    OpCase("layer_norm", lambda v: F.layer_norm(v, (v.size(1),), v.amax(0) * 0 + 2, v.amin(0) * 0 + 0.5, eps=1e-3),
           layout="row_to_row", dtype=torch.bfloat16, tolerance=2e-2),
    OpCase("rms_norm", lambda v: F.rms_norm(v, [v.size(1)], eps=1e-6), layout="row_to_row", tolerance=1e-4),
    OpCase("rms_norm", lambda v: F.rms_norm(v, [v.size(1)]), layout="row_to_row", dtype=torch.bfloat16,
           tolerance=2e-2),
    OpCase("vector_norm", lambda v: torch.linalg.vector_norm(v, dim=-1), layout="row_to_value", tolerance=1e-4),
    OpCase("vector_norm", lambda v: torch.linalg.vector_norm(v, 3, -1, keepdim=True) + v, layout="row_to_row",
           tolerance=1e-4),
    OpCase("vector_norm", lambda v: torch.linalg.vector_norm(v * (v > 0), 0, 1), layout="row_to_value"),
    OpCase("vector_norm", lambda v: torch.linalg.vector_norm(v, float("-inf"), 1), layout="row_to_value"),
    OpCase("norm", lambda v: v.norm(dim=1), layout="row_to_value", dtype=torch.bfloat16, tolerance=2e-2),
    OpCase("norm", lambda v: torch.norm(v, 1, -1), layout="row_to_value", tolerance=1e-4),
    # scans and user combine functions (language/scans.py)
    OpCase("cumsum", lambda v: torch.cumsum(v, -1), layout="row_to_row", tolerance=1e-4),
    OpCase("cumprod", lambda v: v.cumprod(1), layout="row_to_row", tolerance=1e-4),
    OpCase("associative_scan", lambda v: hl.associative_scan(torch.maximum, v, 1, reverse=True), layout="row_to_row",
           reference=lambda v: v.flip(1).cummax(1).values.flip(1)),
    OpCase("reduce", lambda v: hl.reduce(torch.minimum, v, 1), layout="row_to_value", reference=lambda v: v.amin(1)),
    OpCase("prod", lambda v: (v * 0.1 + 1).prod(-1), layout="row_to_value", tolerance=1e-4),
    OpCase("prod", lambda v: torch.prod(v * 0.1 + 1, 1, keepdim=True, dtype=torch.float64).float() + v,
           layout="row_to_row", tolerance=1e-4),
    # gathers from registers (language/gather.py): each row picks its lanes in sorted order
    OpCase("gather", lambda v: torch.gather(v, 1, torch.sort(v, dim=1).indices), layout="row_to_row"),
    OpCase("take_along_dim", lambda v: torch.take_along_dim(v, v.argsort(1), dim=1)
           + v.take_along_dim(v.argmax(1, keepdim=True), 1), layout="row_to_row"),
    # sorting (language/sorting.py)
    OpCase("sort", lambda v: torch.sort(v, dim=1, descending=True).values, layout="row_to_row"),
    OpCase("topk", lambda v: v.topk(1, dim=1).values.squeeze(1), layout="row_to_value"),
    # lanes moved within whole dims (language/rearrange.py)
    OpCase("flip", lambda v: torch.flip(v, [1]) * 2 + v[:, None, :].flip((1, 2)).sum(1), layout="row_to_row"),
    OpCase("flip", lambda v: v.flip([-1]), layout="row_to_row", dtype=torch.bfloat16),
    OpCase("roll", lambda v: torch.roll(v, 3, 1) - v.roll(-40, -1), layout="row_to_row", dtype=torch.int32,
           domain="small_int"),
    OpCase("repeat", lambda v: v.repeat(1, 3).cumsum(1).sum(1) + v[:, None, :].repeat(1, 3, 2).sum((1, 2)),
           layout="row_to_value", tolerance=1e-4),
    OpCase("torch_tile", lambda v: torch.tile(v[:, None, :], (2, 1)).sum(1) + v.tile((1, 2)).cumsum(1).amax(1, True),
           layout="row_to_row", tolerance=1e-4),
    OpCase("index_select", lambda v: torch.index_select(v, 1, v.size(1) - 1 - torch.arange(v.size(1)))
           + v.index_select(1, torch.tensor([0])), layout="row_to_row", dtype=torch.float16, tolerance=1e-3),
    OpCase("tensor_split", lambda v: sum(p.sum(1) * (k + 1) for k, p in enumerate(torch.tensor_split(
        torch.cat([v, v, v], 1), 3, 1))), layout="row_to_value", tolerance=1e-4),
    OpCase("narrow", lambda v: v.narrow(1, v.size(1) - 1, 1) * v + torch.narrow(v, 1, 0, 1), layout="row_to_row"),
    OpCase("select", lambda v: v.select(1, -1) + torch.select(v, 1, 0) * 2, layout="row_to_value"),
    OpCase("movedim", lambda v: torch.movedim(v[:, None, :], 0, 2).movedim(2, 0).sum(1), layout="row_to_row"),
    OpCase("view_as", lambda v: v[:, None, :].view_as(v) + v.unsqueeze(1).reshape_as(v), layout="row_to_row"),
    OpCase("unflatten", lambda v: v.unflatten(1, (1, v.size(1))).sum(1), layout="row_to_row"),
    # products of vectors and einsum (language/contractions.py)
    OpCase("outer", lambda v: torch.outer(v.sum(1), v.amax(0)), layout="row_to_row", tolerance=1e-4,
           reference=lambda v: torch.cat([torch.outer(c.sum(1), c.amax(0)) for c in v.split(4)])),
    OpCase("mv", lambda v: torch.mv(v, v.amin(0)) + v @ v.amax(0), layout="row_to_value", tolerance=1e-4,
           reference=lambda v: torch.cat([torch.mv(c, c.amin(0)) + c @ c.amax(0) for c in v.split(4)])),
    OpCase("einsum", lambda v: torch.einsum("ij,ij->i", v, v) + torch.einsum("ij->i", v), layout="row_to_value",
           tolerance=1e-4),
    OpCase("einsum", lambda v: torch.einsum("ji->ij", v), layout="transposed", dtype=torch.bfloat16),
    OpCase("vector_dot", lambda v: torch.dot(v.amax(0), v.amin(0)) + v.sum(1) * v.amin(0).vdot(v.amin(0)),
           layout="row_to_value", tolerance=1e-4,
           reference=lambda v: torch.cat([torch.dot(c.amax(0), c.amin(0)) + c.sum(1) * c.amin(0).vdot(c.amin(0))
                                          for c in v.split(4)])),
    OpCase("inner", lambda v: torch.inner(v, v.amax(0)) + v.amin(0).inner(v.amax(0)), layout="row_to_value",
           tolerance=1e-4, reference=lambda v: torch.cat([torch.inner(c, c.amax(0)) + c.amin(0).inner(c.amax(0))
                                                          for c in v.split(4)])),
    # running extremes and order statistics (language/order_statistics.py)
    OpCase("cummax", lambda v: torch.cummax(v, 1).values + v.cummax(-1).indices, layout="row_to_row"),
    OpCase("cummin", lambda v: v.cummin(1)[0] * 1000 + v.cummin(1)[1], layout="row_to_row", dtype=torch.int32,
           domain="small_int"),
    OpCase("logcumsumexp", lambda v: torch.logcumsumexp(v * 30, 1), layout="row_to_row", tolerance=1e-4),
    # indices through gathers: tied lanes may be named in another order by torch (ties pick the earliest here)
    OpCase("argsort", lambda v: torch.gather(v, 1, torch.argsort(v, 1, descending=True)), layout="row_to_row"),
    OpCase("kthvalue", lambda v: torch.kthvalue(v, 1, 1).values + torch.gather(v, 1, v.kthvalue(1, 1, True).indices)
           .squeeze(1) * 2, layout="row_to_value"),
    OpCase("median", lambda v: v.median(1).values * 100 + torch.gather(v, 1, torch.median(v, -1, True).indices)
           .squeeze(1), layout="row_to_value", dtype=torch.bfloat16, tolerance=1e-2),
    # products (language/math.py)
    OpCase("mm", lambda a, b, c: a @ b, layout="matrix", tolerance=1e-4),
    OpCase("addmm", lambda a, b, c: torch.addmm(c, a, b), layout="matrix", tolerance=1e-4),
    # torch.nn.functional's layer functions (language/layer_functions.py)
    OpCase("linear", lambda a, b, c: F.linear(a, b.t(), b[0]) + F.linear(a[None], b.t())[0], layout="matrix",
           tolerance=1e-4),
    OpCase("linear", lambda a, b, c: F.linear(a, b.t()), layout="matrix", dtype=torch.bfloat16, tolerance=1e-2),
    OpCase("dot", lambda a, b, c: hl.dot(a, b, acc=c), layout="matrix", tolerance=1e-4,
           reference=lambda a, b, c: c + a @ b),
    OpCase("dot_scaled", lambda a, sa, b, sb, c: hl.dot_scaled(a.to(torch.bfloat16), sa, "bf16", b.to(torch.bfloat16),
                                                                sb, "bf16", acc=c),
           layout="scaled_matrix", tolerance=1e-4,
           reference=lambda x, y, z: z + x.to(torch.bfloat16).float() @ y.to(torch.bfloat16).float()),
    # memory and creation (language/memory.py, language/creation.py, language/constexpr.py)
    OpCase("load", layout="load_store"), OpCase("store", layout="load_store"),
    OpCase("atomic", layout="atomic_rows", tolerance=1e-4),
    OpCase("setitem", lambda x, y, z: x), OpCase("reshape", layout="reshaped"),
    OpCase("full", layout="creation"), OpCase("arange", layout="creation"),
    OpCase("specialize", layout="reshaped"),
    OpCase("random", layout="random"),  # hl.rand / hl.randint (language/rng.py)
    # torch's random functions, seeded from torch's generator at each launch (language/rng.py)
    OpCase("torch_rand_like", lambda v, tm, tn: torch.rand_like(v) + v, layout="implicit_random",
           reference=lambda x, words: _uniform(words[0]) + x),
    OpCase("torch_randn_like", lambda v, tm, tn: torch.randn_like(v, dtype=torch.float64).float() * v,
           layout="implicit_random", tolerance=1e-4, reference=lambda x, words: _normal(words) * x),
    OpCase("torch_randint_like", lambda v, tm, tn: torch.randint_like(v, -3, 9) + v, layout="implicit_random",
           reference=lambda x, words: (-3 + torch.where(words[0] >= 2 ** 31, words[0] - 2 ** 32, words[0]).abs() % 12) + x),
    OpCase("torch_rand", lambda v, tm, tn: torch.rand([tm, tn]) - v, layout="implicit_random",
           reference=lambda x, words: _uniform(words[0]) - x),
    OpCase("torch_randn", lambda v, tm, tn: torch.randn([tm, tn], dtype=torch.float16) + v, layout="implicit_random",
           tolerance=2e-3, reference=lambda x, words: _normal(words).half().float() + x),
    OpCase("dropout", lambda v, tm, tn: F.dropout(v, 0.25) + F.dropout(v, 0.5, training=False), layout="implicit_random",
           reference=lambda x, words: x * torch.where(_uniform(words[0]) >= 0.25, 1 / 0.75, 0.0) + x),
    # stacks of like tensors by data pointer (language/stack.py)
    OpCase("stacktensor_like", lambda s: s.amax(0), layout="stacked"),
    OpCase("stack_load", lambda s: s.sum(0), layout="stacked", tolerance=1e-5),
    OpCase("stack_store", lambda s: s.amin(0) * 2, layout="stacked"),
    OpCase("remote_copy", layout="pushed"),  # hl.make_async_remote_copy with one rank (language/distributed.py)
    # joins (language/joins.py), the barrier and inline assembly (language/tile.py, inline_asm.py)
    OpCase("join", layout="joined"), OpCase("split", layout="joined"), OpCase("stack", layout="joined"),
    OpCase("cat", layout="joined"), OpCase("barrier", layout="assembled"),
    OpCase("inline_asm_elementwise", layout="assembled"),
    OpCase("inline_triton", lambda x, y, z: hl.inline_triton("t = {0} * 2\nt + {1}", args=(x, y),
                                                              output_like=x),
           reference=lambda x, y, z: 2 * x + y, compiled_only=True),
    # debugging (language/debug.py)
    OpCase("device_print", layout="debugged"), OpCase("breakpoint", print, layout="debugged", not_compiled=True),
    # torch's allocations shaped like a tile value (language/creation.py)
    OpCase("zeros_like", lambda x, y, z: torch.zeros_like(x) + x),
    OpCase("ones_like", lambda x, y, z: torch.ones_like(x, dtype=torch.float16) + x, tolerance=1e-3),
    OpCase("empty_like", lambda x, y, z: torch.empty_like(x) * 0 + x, reference=lambda x, y, z: x),
    OpCase("full_like", lambda x, y, z: torch.full_like(x, 2.5) * x),
    OpCase("new_zeros", lambda x, y, z: x.new_zeros(x.shape) + y),
    OpCase("new_ones", lambda x, y, z: x.new_ones(x.size(), dtype=torch.int32) + y),
    OpCase("new_empty", lambda x, y, z: x.new_empty(x.shape) * 0 + y, reference=lambda x, y, z: y),
    OpCase("new_full", lambda x, y, z: x.new_full(x.shape, -1.5) - y),
    OpCase("new_tensor", lambda x, y, z: x.new_tensor(2.5) * y + x.new_tensor(3, dtype=torch.int32)),
    # torch's factories with tile sizes (language/creation.py)
    OpCase("torch_zeros", lambda x, y, z: torch.zeros(x.shape) + x),
    OpCase("torch_ones", lambda x, y, z: torch.ones(x.shape, dtype=torch.float16) + x, tolerance=1e-3),
    OpCase("torch_empty", lambda x, y, z: torch.empty(x.shape, dtype=torch.int8) * 0 + y,
           reference=lambda x, y, z: torch.zeros(x.shape, dtype=torch.int8) + y),
    OpCase("torch_full", lambda x, y, z: torch.full(x.shape, 2) * x),
    # torch.arange(v.size(d)) of a tile dim counts that tile's lanes (tile_n's block is 16)
    OpCase("torch_arange", lambda v: v.t() + torch.arange(v.size(0)), layout="transposed",
           reference=lambda v: v.t() + torch.arange(v.size(0)) % 16),
)


def _inputs(case: OpCase, shape: tuple[int, int], device: torch.device) -> tuple[T, T, T]:
    generator = torch.Generator().manual_seed(0)
    rows, cols = shape
    if case.layout == "matrix":
        sizes = [(rows, 16), (16, cols), (rows, cols)]
    elif case.layout == "scaled_matrix":  # K of two scale groups
        sizes = [(rows, 64), (64, cols), (rows, cols)]
    elif case.layout == "transposed":
        sizes = [(cols, rows)] * 3
    else:
        sizes = [shape] * 3
    values = []
    for size in sizes:
        value = torch.randn(size, generator=generator)
        if case.domain == "positive":
            value = value.abs() + 0.1
        elif case.domain == "nonzero":
            value = torch.where(value.abs() < 0.25, torch.full_like(value, 0.5), value) * 8
        elif case.domain == "small_int":
            value = value * 8
        values.append(value.to(case.dtype).to(device))
    return values[0], values[1], values[2]


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", OPS, ids=lambda c: c.id)
def test_op_matches_torch_in_every_mode(case: OpCase, shape: tuple[int, int], device: torch.device) -> None:
    layout = LAYOUTS[case.layout]
    REFERENCE_DEVICE[0] = device
    x, y, z = _inputs(case, shape, device)
    reference = layout.reference(x.cpu(), y.cpu(), z.cpu(), case.reference or case.op)
    for mode in _modes(device):
        if case.layout == "assembled" and mode == "eager" and device.type == "cuda":
            continue  # its inline PTX runs compiled only; eager refuses it (tests/test_joins.py)
        if case.not_compiled and mode == "compiled" or case.compiled_only and mode == "eager":
            continue  # refused there, located (tests/test_hl_extras.py, tests/test_inline_triton.py)
        # products in ieee float32: the row checks the op, not tf32's rounding (the GPU default)
        options = {"dot_precision": "ieee"} if case.layout in ("matrix", "scaled_matrix") else {}
        kernel = tessera.kernel(layout.kernel, mode=mode, config=LAYOUT_CONFIGS.get(case.layout, CONFIG), **options)
        out = torch.zeros_like(reference, device=device)
        result = kernel(out, x, y, z, case.op)
        torch.testing.assert_close(result.cpu(), reference, rtol=case.tolerance, atol=case.tolerance,
                                   equal_nan=True, msg=lambda text: f"{case.id} in {mode} mode: {text}")


def test_every_primitive_has_a_row() -> None:
    assert sorted(set(ALL_PRIMITIVES) - {case.primitive for case in OPS}) == []


@pytest.mark.parametrize("name", backends.names())
def test_every_backend_lowers_every_op_it_supports(name: str) -> None:
    backend = backends.get(name)
    missing = [op.value for op in sorted(backend.supported_ops, key=lambda op: op.value) if not backend.lowers(op)]
    if Op.ELEMENTWISE in backend.supported_ops:
        missing += [f"elementwise {op.name}" for op in ELEMENTWISE_OPS if not backend.lowers(Op.ELEMENTWISE, op.name)]
    if Op.REDUCE in backend.supported_ops:
        missing += [f"reduce {fn}" for fn in REDUCTIONS if not backend.lowers(Op.REDUCE, fn)]
    assert missing == []


def test_the_triton_backend_supports_every_op() -> None:
    assert backends.get("triton").supported_ops == frozenset(Op)


def test_every_primitive_has_an_eager_rule_and_a_trace_rule() -> None:
    missing = [f"{name}: {rule}" for name, primitive in sorted(ALL_PRIMITIVES.items())
               for rule in ("eager_rule", "trace_rule") if getattr(primitive, rule) is None]
    assert missing == []


def test_negative_zero_constant_keeps_its_sign() -> None:
    """Triton reads a -0.0 constant as +0.0; `-0.0 * y` must still give torch's signed zeros."""
    def kernel(y: T, out: T) -> T:
        for tile in hl.tile(y.size(0)):
            out[tile] = -0.0 * y[tile]
        return out
    y = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.0])
    for mode in ("eager", "interpret"):
        got = tessera.kernel(kernel, mode=mode)(y, torch.empty(5))
        assert torch.equal(torch.signbit(got), torch.signbit(-0.0 * y)), mode
