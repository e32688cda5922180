"""`hl.atomic_and/or/xor/xchg/cas` (issue 15): each returns the values before, as `hl.atomic_add`
does; masked lanes (tails) neither change memory nor fault; repeated indices combine one after
another; in every mode against a PyTorch reference."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor
SIZES = (1, 37, 64)


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def update_each(target: T, values: T, op: Callable[..., Any]) -> T:
    before = torch.empty_like(target)
    for tile in hl.tile(target.size(0)):
        before[tile] = op(target, [tile], values[tile])
    return before


CASES = {
    "and": (hl.atomic_and, torch.bitwise_and),
    "or": (hl.atomic_or, torch.bitwise_or),
    "xor": (hl.atomic_xor, torch.bitwise_xor),
    "xchg": (hl.atomic_xchg, lambda old, new: new),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("size", SIZES)
def test_bitwise_atomics_and_exchange_return_the_values_before(name: str, size: int, device: torch.device) -> None:
    atomic, reference = CASES[name]
    generator = torch.Generator().manual_seed(size)
    start = torch.randint(0, 2 ** 20, (size,), generator=generator, dtype=torch.int32)
    values = torch.randint(0, 2 ** 20, (size,), generator=generator, dtype=torch.int32)
    for mode in _modes(device):
        target = start.clone().to(device)
        before = tessera.kernel(update_each, mode=mode, config=tessera.Config(block_sizes=[16]))(
            target, values.to(device), atomic)
        assert torch.equal(before.cpu(), start), mode
        assert torch.equal(target.cpu(), reference(start, values)), mode


def compare_and_swap(target: T, expected: T, values: T) -> T:
    before = torch.empty_like(target)
    for tile in hl.tile(target.size(0)):
        before[tile] = hl.atomic_cas(target, [tile], expected[tile], values[tile])
    return before


@pytest.mark.parametrize("size", SIZES)
def test_compare_and_swap_writes_where_the_old_value_matched(size: int, device: torch.device) -> None:
    start = torch.arange(size, dtype=torch.int64) % 3
    expected = torch.ones(size, dtype=torch.int64)
    values = torch.full((size,), 7, dtype=torch.int64)
    for mode in _modes(device):
        target = start.clone().to(device)
        before = tessera.kernel(compare_and_swap, mode=mode, config=tessera.Config(block_sizes=[16]))(
            target, expected.to(device), values.to(device))
        assert torch.equal(before.cpu(), start), mode
        assert torch.equal(target.cpu(), torch.where(start == 1, values, start)), mode


def count_into_one_slot(counter: T, x: T) -> T:
    tickets = torch.empty(x.size(0), dtype=torch.int32, device=x.device)
    for tile in hl.tile(x.size(0)):
        tickets[tile] = hl.atomic_or(counter, [tile.index * 0], (x[tile] > 0).to(torch.int32) << (tile.index % 31))
    return tickets


def test_repeated_indices_combine_every_lane(device: torch.device) -> None:
    x = torch.tensor([1.0, -1.0, 2.0, 3.0, -4.0, 5.0, 6.0])
    expected_bits = sum(1 << i for i in range(7) if x[i] > 0)
    for mode in _modes(device):
        counter = torch.zeros(1, dtype=torch.int32, device=device)
        tessera.kernel(count_into_one_slot, mode=mode, config=tessera.Config(block_sizes=[4]))(counter, x.to(device))
        assert counter.item() == expected_bits, mode


def lock_step(lock: T, out: T) -> T:
    for tile in hl.tile(out.size(0), block_size=1):
        seen = hl.atomic_cas(lock, [tile.index * 0], 0, 1, sem="acquire")
        out[tile] = seen
        hl.atomic_xchg(lock, [tile.index * 0], 0, sem="release")
    return out


def test_a_spin_lock_style_exchange_with_scalars(device: torch.device) -> None:
    for mode in _modes(device):
        lock = torch.zeros(1, dtype=torch.int32, device=device)
        out = tessera.kernel(lock_step, mode=mode)(lock, torch.full((3,), -1, dtype=torch.int32, device=device))
        if mode == "compiled":
            # programs run at once on a GPU: a program may find the lock taken (1); someone took it
            seen = out.cpu().tolist()
            assert set(seen) <= {0, 1} and 0 in seen and lock.item() == 0, (mode, seen)
        else:
            assert out.cpu().tolist() == [0, 0, 0] and lock.item() == 0, mode


def test_a_bitwise_atomic_on_floats_is_refused() -> None:
    for mode in ("eager", "interpret"):
        with pytest.raises(exc.DtypeError, match="hl.atomic_and on a torch.float32 tensor"):
            tessera.kernel(update_each, mode=mode)(torch.zeros(4), torch.zeros(4), hl.atomic_and)


def scatter_bf16(target: T, slots: T, values: T, op: Callable[..., Any]) -> T:
    before = torch.empty_like(values)
    for tile in hl.tile(values.size(0)):
        before[tile] = op(target, [slots[tile]], values[tile])
    return before


BF16_CASES = {
    "add": (hl.atomic_add, lambda old, new: old + new),
    "max": (hl.atomic_max, torch.maximum),
    "min": (hl.atomic_min, torch.minimum),
    "xchg": (hl.atomic_xchg, lambda old, new: new),
}


@pytest.mark.parametrize("name", BF16_CASES)
@pytest.mark.parametrize("size", SIZES)
def test_bf16_atomics_with_repeated_slots_match_one_lane_after_another(name: str, size: int,
                                                                        device: torch.device) -> None:
    """bf16 read-modify-write atomics (Helion's split-K matmul adds its bf16 partial products):
    Triton's interpreter has none, Tessera's interpreted code swaps each lane in turn, so lanes
    of one block aimed at one element all count, each result rounded to bf16 as on the GPU."""
    atomic, update = BF16_CASES[name]
    generator = torch.Generator().manual_seed(size)
    slots = torch.randint(0, 3, (size,), generator=generator)
    values = torch.randn(size, generator=generator).to(torch.bfloat16)
    start = torch.randn(3, generator=generator).to(torch.bfloat16)
    expected = start.clone()
    for slot, value in zip(slots.tolist(), values):  # the interpreter's lane order: first to last
        expected[slot] = update(expected[slot], value)
    for mode in _modes(device):
        target = start.clone().to(device)
        kernel = tessera.kernel(scatter_bf16, mode=mode, config=tessera.Config(block_sizes=[16]))
        if mode == "compiled" and name != "add":  # Triton has no bf16 max/min/xchg for NVIDIA GPUs
            with pytest.raises(exc.UnsupportedOperationError, match=f"atomic_{name} on a bfloat16"):
                kernel(target, slots.to(device), values.to(device), atomic)
            continue
        before = kernel(target, slots.to(device), values.to(device), atomic)
        if name == "add":  # the order of lanes on one element differs between modes: sums round apart
            # (64 bf16 roundings on the GPU's order: a few ulps of the running sum)
            # the GPU (compiled, or eager's CUDA index_add) adds in its own order: allow a bf16
            # rounding of each update (2^-7 relative: the hardware may truncate) of the largest
            # running magnitude
            magnitude = float(start.float().abs().max() + values.float().abs().sum())
            atol = max(0.05, len(values) * magnitude * 2 ** -7) if device.type == "cuda" else 0.05
            torch.testing.assert_close(target.cpu().float(), expected.float(), atol=atol, rtol=0.02)
        else:
            assert torch.equal(target.cpu(), expected) or mode == "compiled", mode
        if mode == "interpret" and name != "add":
            # each lane's value before its own update
            order = torch.zeros(size, dtype=torch.bfloat16)
            running = start.clone()
            for lane, slot in enumerate(slots.tolist()):
                order[lane] = running[slot]
                running[slot] = update(running[slot], values[lane])
            assert torch.equal(before.cpu(), order), mode
