"""`hl.stacktensor_like` / `hl.StackTensor` (issue 15): tensors laid out alike, reached through a
tensor of their data pointers and indexed as one, in every mode against torch.stack."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def _pointers(tensors: list[T], dtype: torch.dtype = torch.uint64) -> T:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=dtype, device=tensors[0].device)


def load_all(dev_ptrs: T, example: T) -> T:
    out = torch.empty(dev_ptrs.size(0), *example.shape, dtype=example.dtype, device=example.device)
    for tile_m, tile_n in hl.tile(example.size()):
        out[:, tile_m, tile_n] = hl.stacktensor_like(example, dev_ptrs[:])[tile_m, tile_n]
    return out


def load_by_pointer_tiles(dev_ptrs: T, example: T) -> T:
    out = torch.empty(*dev_ptrs.shape, example.size(0), dtype=example.dtype, device=example.device)
    for tile in hl.tile(example.size(0)):
        for tile_a, tile_b in hl.tile(dev_ptrs.size()):  # 2-D pointers, tail tiles masked
            out[tile_a, tile_b, tile] = hl.stacktensor_like(example, dev_ptrs[tile_a, tile_b])[tile]
    return out


def store_broadcast(x: T, dev_ptrs: T, example: T) -> None:
    for tile in hl.tile(x.size(0)):
        stack = hl.stacktensor_like(example, dev_ptrs[:])
        stack[tile] = x[tile][None, :] + 1


def sum_of_stack(dev_ptrs: T, example: T) -> T:
    out = torch.empty_like(example)
    for tile in hl.tile(example.size(0)):
        out[tile] = hl.stacktensor_like(example, dev_ptrs[:])[tile].sum(0)
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (3, 16)], ids=str)
def test_a_stack_load_reads_every_tensor(shape: tuple[int, int], device: torch.device) -> None:
    tensors = [torch.randn(shape, device=device, dtype=torch.float16) for _ in range(3)]
    for mode in _modes(device):
        kernel = tessera.kernel(load_all, mode=mode, config=tessera.Config(block_sizes=[4, 16]))
        assert torch.equal(kernel(_pointers(tensors), tensors[0]), torch.stack(tensors)), mode


def test_two_dimensional_pointers_in_tail_tiles(device: torch.device) -> None:
    tensors = [torch.randn(11, device=device) for _ in range(15)]
    pointers = _pointers(tensors, torch.int64).reshape(3, 5)
    for mode in _modes(device):
        kernel = tessera.kernel(load_by_pointer_tiles, mode=mode, config=tessera.Config(block_sizes=[4, 2, 4]))
        assert torch.equal(kernel(pointers, tensors[0]), torch.stack(tensors).reshape(3, 5, 11)), mode


def test_a_stack_store_writes_the_value_into_every_tensor(device: torch.device) -> None:
    for mode in _modes(device):
        tensors = [torch.zeros(21, device=device) for _ in range(4)]
        x = torch.randn(21, device=device)
        tessera.kernel(store_broadcast, mode=mode, config=tessera.Config(block_sizes=[8]))(x, _pointers(tensors), tensors[0])
        for tensor in tensors:
            assert torch.equal(tensor, x + 1), mode


def test_the_pointers_are_data_the_same_kernel_reads_other_tensors(device: torch.device) -> None:
    for mode in _modes(device):
        kernel = tessera.kernel(sum_of_stack, mode=mode, config=tessera.Config(block_sizes=[16]))
        for count in (2, 5):
            tensors = [torch.randn(19, device=device) for _ in range(count)]
            torch.testing.assert_close(kernel(_pointers(tensors), tensors[0]), torch.stack(tensors).sum(0))


def float_pointers(dev_ptrs: T, example: T) -> T:
    out = torch.empty_like(example)
    for tile in hl.tile(example.size(0)):
        out[tile] = hl.stacktensor_like(example, dev_ptrs[:])[tile].sum(0)
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_pointers_must_be_a_64_bit_integer_tensor(mode: str) -> None:
    with pytest.raises(exc.DtypeError, match="data pointers"):
        tessera.kernel(float_pointers, mode=mode)(torch.zeros(3), torch.zeros(4))


def through_hl_load_and_store(x: T, dev_ptrs: T, example: T) -> None:
    for tile in hl.tile(x.size(0)):
        stack = hl.stacktensor_like(example, dev_ptrs[:])
        hl.store(stack, [tile], hl.load(stack, [tile]) + x[tile][None, :])


def test_hl_load_and_hl_store_take_a_stack(device: torch.device) -> None:
    for mode in _modes(device):
        tensors = [torch.randn(10, device=device) for _ in range(2)]
        before = [t.clone() for t in tensors]
        x = torch.randn(10, device=device)
        tessera.kernel(through_hl_load_and_store, mode=mode, config=tessera.Config(block_sizes=[4]))(
            x, _pointers(tensors), tensors[0])
        for tensor, old in zip(tensors, before):
            torch.testing.assert_close(tensor, old + x)
