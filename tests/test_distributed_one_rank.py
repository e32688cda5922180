"""Helion's distributed ops with one rank (issue 15): `hl.make_async_remote_copy` to peer 0 is a
copy within the device and `hl.remote_barrier([0])` waits for nobody; another peer is refused."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

T = torch.Tensor


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def push_rows(x: T, out: T, peer: int) -> T:
    for tile in hl.tile(x.size(0)):
        copy = hl.make_async_remote_copy(x, [tile], peer, dst=out, dst_index=[tile])
        copy.start()
        copy.wait()
        hl.remote_barrier([peer])
    return out


def push_in_place(x: T, rank: hl.ProcessGroupName) -> T:
    for tile in hl.tile(x.size(0)):
        descriptor = hl.make_async_remote_copy(x, [tile], 0)
        descriptor.start()
        descriptor.wait_send()
        descriptor.wait_recv()
    return x


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (17, 8)], ids=str)
def test_a_push_to_peer_zero_copies_the_rows_with_their_whole_suffix(shape: tuple[int, int],
                                                                    device: torch.device) -> None:
    x = torch.randn(shape, device=device)
    for mode in _modes(device):
        out = torch.zeros_like(x)
        tessera.kernel(push_rows, mode=mode, config=tessera.Config(block_sizes=[4]))(x, out, 0)
        assert torch.equal(out, x), mode


def test_a_symmetric_push_leaves_the_tensor_as_it_was(device: torch.device) -> None:
    x = torch.randn(9, 3, device=device)
    for mode in _modes(device):
        assert torch.equal(tessera.kernel(push_in_place, mode=mode)(x.clone(), hl.ProcessGroupName("default")), x)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_a_peer_other_than_zero_is_refused_naming_the_one_rank(mode: str) -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="to peer 1: Tessera runs a kernel on one rank") as error:
        tessera.kernel(push_rows, mode=mode)(torch.zeros(4, 2), torch.zeros(4, 2), 1)
    assert "test_distributed_one_rank.py" in str(error.value)


def test_a_compiled_variant_for_peer_zero_does_not_serve_peer_one() -> None:
    kernel = tessera.kernel(push_rows, mode="interpret")
    kernel(torch.zeros(4, 2), torch.zeros(4, 2), 0)
    with pytest.raises(exc.UnsupportedOperationError, match="to peer 1"):
        kernel(torch.zeros(4, 2), torch.zeros(4, 2), 1)
