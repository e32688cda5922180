"""NVFP4 helpers (issue 15): `hl.float4_e2m1fn_x2_to_float32`, `hl.load_float4_e2m1fn_x16_to_float16`
and `torch.float4_e2m1fn_x2` tensors as kernel arguments, checked bit for bit against a table
derived here from the e2m1 format, in every mode the device has."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
FP4X2 = torch.float4_e2m1fn_x2


def e2m1_table() -> T:
    """The 16 e2m1 numbers from the format: sign bit, 2 exponent bits, 1 mantissa bit, bias 1;
    exponent 0 is subnormal (no implicit 1)."""
    values = []
    for code in range(16):
        sign, exponent, mantissa = code >> 3, (code >> 1) & 3, code & 1
        magnitude = mantissa / 2 if exponent == 0 else 2.0 ** (exponent - 1) * (1 + mantissa / 2)
        values.append(-magnitude if sign else magnitude)
    return torch.tensor(values, dtype=torch.float32)


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def _same_bits(actual: T, expected: T) -> bool:
    """Equal values and equal signs of zero."""
    return torch.equal(actual, expected) and torch.equal(torch.signbit(actual), torch.signbit(expected))


def unpack_pairs(packed: T) -> tuple[T, T]:
    lo = torch.empty(packed.shape, dtype=torch.float32, device=packed.device)
    hi = torch.empty_like(lo)
    for tile_m, tile_n in hl.tile(packed.size()):
        first, second = hl.float4_e2m1fn_x2_to_float32(packed[tile_m, tile_n])
        lo[tile_m, tile_n] = first
        hi[tile_m, tile_n] = second
    return lo, hi


def load_groups(storage: T, groups: int, limit: int, loader: Any = hl.load_float4_e2m1fn_x16_to_float16) -> T:
    rows = storage.size(0)
    out = torch.empty(rows, groups, 16, dtype=torch.float16, device=storage.device)
    for tile_m, tile_g in hl.tile([rows, groups]):
        offsets = tile_m.index[:, None] * groups + tile_g.index[None, :]
        lanes = loader(storage, offsets, extra_mask=tile_g.index[None, :] < limit)
        for lane in hl.static_range(16):
            out[tile_m, tile_g, lane] = lanes[lane]
    return out


def test_the_table_holds_the_sixteen_e2m1_numbers() -> None:
    assert e2m1_table().tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert torch.signbit(e2m1_table()[8])


@pytest.mark.parametrize("as_fp4", [True, False], ids=["float4_e2m1fn_x2", "uint8"])
@pytest.mark.parametrize("shape", [(16, 16), (1, 1), (5, 37)], ids=str)
def test_every_byte_unpacks_to_its_two_nibbles(shape: tuple[int, int], as_fp4: bool, device: torch.device) -> None:
    codes = (torch.arange(shape[0] * shape[1]) * 7 % 256).to(torch.uint8).reshape(shape).to(device)
    packed = codes.view(FP4X2) if as_fp4 else codes
    table = e2m1_table()
    expected = (table[(codes & 15).long().cpu()], table[(codes >> 4).long().cpu()])
    for mode in _modes(device):
        kernel = tessera.kernel(unpack_pairs, mode=mode, config=tessera.Config(block_sizes=[4, 16]))
        for actual, wanted in zip(kernel(packed), expected):
            assert _same_bits(actual.cpu(), wanted), mode


@pytest.mark.parametrize("rows,groups,limit", [(3, 5, 4), (1, 1, 1), (4, 8, 8)])
def test_groups_of_eight_bytes_unpack_to_sixteen_halves(rows: int, groups: int, limit: int,
                                                        device: torch.device) -> None:
    storage = torch.randint(0, 256, (rows, groups * 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    table = e2m1_table()
    bytes_ = storage.reshape(rows, groups, 8).long()
    expected = torch.stack([table[bytes_ & 15], table[bytes_ >> 4]], dim=-1).reshape(rows, groups, 16)
    expected[:, limit:, :] = 0  # masked groups read 0
    expected = expected.to(torch.float16)
    for as_fp4 in (False, True):
        argument = storage.to(device).view(FP4X2) if as_fp4 else storage.to(device)
        for mode in _modes(device):
            kernel = tessera.kernel(load_groups, mode=mode, config=tessera.Config(block_sizes=[2, 4]))
            assert _same_bits(kernel(argument, groups, limit).cpu(), expected), (mode, as_fp4)


def converts_fp4(packed: T) -> T:
    out = torch.empty(packed.shape, dtype=torch.float32, device=packed.device)
    for tile in hl.tile(packed.size(0)):
        out[tile] = packed[tile].to(torch.float32)
    return out


def test_a_value_conversion_of_packed_fp4_is_refused_as_torch_refuses_it() -> None:
    packed = torch.zeros(4, dtype=torch.uint8).view(FP4X2)
    with pytest.raises(exc.DtypeError, match="converts no values to or from packed fp4"):
        tessera.kernel(converts_fp4, mode="interpret")(packed)


def test_the_helpers_refuse_other_dtypes() -> None:
    with pytest.raises(exc.DtypeError, match="expects packed fp4 bytes"):
        tessera.kernel(unpack_pairs, mode="interpret")(torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(exc.DtypeError, match="expects packed fp4 bytes"):
        tessera.kernel(unpack_pairs, mode="eager")(torch.zeros(2, 2))


def negates(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = -x[tile]
    return out


def test_negating_zero_gives_negative_zero_as_in_torch(device: torch.device) -> None:
    # Triton's unary minus is 0 - x, which made -(0.0) +0.0
    x = torch.tensor([0.0, -0.0, 1.5, float("inf")], device=device)
    for mode in _modes(device):
        assert _same_bits(tessera.kernel(negates, mode=mode)(x).cpu(), (-x).cpu()), mode


def wraps_tile_offsets(x: T, period: int) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0), block_size=4):
        out[tile] = x[tile] + (tile.begin % period)
    return out


def test_a_tile_offset_modulo_a_constant_compiles(device: torch.device) -> None:
    x = torch.zeros(13, device=device)
    expected = torch.tensor([float((i // 4 * 4) % 3) for i in range(13)])
    for mode in _modes(device):
        assert torch.equal(tessera.kernel(wraps_tile_offsets, mode=mode)(x, 3).cpu(), expected), mode


@pytest.mark.parametrize("rows,groups,limit", [(3, 5, 4), (1, 1, 1), (4, 8, 8)])
def test_groups_of_sixteen_bfloat16_values_load_as_halves(rows: int, groups: int, limit: int,
                                                          device: torch.device) -> None:
    storage = torch.randn(rows, groups * 16, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).to(device)
    expected = storage.reshape(rows, groups, 16).half().cpu()
    expected[:, limit:, :] = 0
    for mode in _modes(device):
        kernel = tessera.kernel(load_groups, mode=mode, config=tessera.Config(block_sizes=[2, 4]))
        assert torch.equal(kernel(storage, groups, limit, hl.load_bfloat16_x16_to_float16).cpu(), expected), mode


def test_bfloat16_groups_need_bfloat16_storage() -> None:
    with pytest.raises(exc.DtypeError, match="expects bfloat16 storage"):
        tessera.kernel(load_groups, mode="interpret")(torch.zeros(2, 16), 1, 1, hl.load_bfloat16_x16_to_float16)
