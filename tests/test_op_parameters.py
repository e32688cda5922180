"""Parameters of `hl` functions are honoured or refused, never silently ignored."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled"] if device.type == "cuda" else ["eager", "interpret"]


def test_zeros_on_the_kernels_device_is_accepted(device: torch.device) -> None:
    def fill(out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size(0)):
            out[tile] = hl.zeros([tile], dtype=torch.float32, device=out.device) + 1
        return out
    for mode in _modes(device):
        assert torch.equal(tessera.kernel(fill, mode=mode)(torch.empty(5, device=device)), torch.ones(5, device=device))
        # a bound kernel's runs (planning, tuning) trace on the arguments' device too
        bound = tessera.kernel(fill, mode=mode).bind(torch.empty(5, device=device))
        assert torch.equal(bound.run(tessera.Config(block_sizes=[4])), torch.ones(5, device=device))


def test_zeros_on_another_device_is_a_located_error(device: torch.device) -> None:
    other = "meta"

    def fill(out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size(0)):
            out[tile] = hl.zeros([tile], dtype=torch.float32, device=other)
        return out
    for mode in _modes(device):
        with pytest.raises(exc.DeviceMismatchError, match="device=meta") as info:
            tessera.kernel(fill, mode=mode)(torch.empty(5, device=device))
        assert "hl.zeros([tile], dtype=torch.float32, device=other)" in str(info.value)


def test_an_unknown_eviction_policy_is_refused(device: torch.device) -> None:
    def copy(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size(0)):
            out[tile] = hl.load(x, [tile], eviction_policy="keep_forever")
        return out
    for mode in _modes(device):
        with pytest.raises(exc.TesseraError, match="unknown eviction_policy 'keep_forever'"):
            tessera.kernel(copy, mode=mode)(torch.empty(5, device=device), torch.randn(5, device=device))


def test_an_eviction_policy_reaches_the_generated_load(device: torch.device) -> None:
    def copy(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(out.size(0)):
            out[tile] = hl.load(x, [tile], eviction_policy="evict_first")
        return out
    x = torch.randn(5, device=device)
    code = tessera.kernel(copy).bind(torch.empty(5, device=device), x).to_triton_code(tessera.Config(block_sizes=[8]))
    assert "eviction_policy='evict_first'" in code


def test_an_atomic_memory_order_reaches_the_generated_atomic_and_an_unknown_one_is_refused(device: torch.device) -> None:
    def total(out: torch.Tensor, x: torch.Tensor, sem: str) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            hl.atomic_add(out, [0], x[tile].sum(), sem=sem)
        return out
    x = torch.randn(37, device=device)
    code = tessera.kernel(total).bind(torch.zeros(1, device=device), x, "acq_rel").to_triton_code(
        tessera.Config(block_sizes=[8]))
    assert "sem='acq_rel'" in code
    with pytest.raises(exc.TesseraError, match="sem='strict'"):
        tessera.kernel(total)(torch.zeros(1, device=device), x, "strict")


def _atomic_into_a_tile_value(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        registers = hl.zeros([tile], dtype=x.dtype)
        hl.atomic_add(registers, [tile], x[tile])  # line: atomic-on-registers
    return x


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_an_atomic_on_a_tile_value_is_refused_at_its_line(mode):
    with pytest.raises(exc.AtomicOnDeviceTensor, match=r"hl\.atomic_add\(\) on a tile value") as info:
        tessera.kernel(_atomic_into_a_tile_value, mode=mode)(torch.ones(37))
    assert "# line: atomic-on-registers" in str(info.value)
    assert isinstance(info.value, exc.IndexingError)


def test_an_invalid_memory_semantic_is_helions_internal_error():
    def bad(x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            hl.atomic_add(x, [tile], x[tile], sem="ERROR")
        return x
    with pytest.raises(exc.InternalError, match="Invalid memory semantic 'ERROR'"):
        tessera.kernel(bad, mode="interpret")(torch.ones(5))
