"""Device-side communication (Helion's distributed ops), with one rank: `hl.make_async_remote_copy`,
`hl.remote_barrier`, `hl.AsyncCopyDescriptor`, `hl.ProcessGroupName`.

Tessera runs a kernel on one GPU and has no symmetric memory (NVSHMEM), so the communication
mesh has one rank, 0. There a push to peer 0 is a copy within the device (`dst[dst_index] =
src[src_index]`, the suffix dims whole) and a barrier with peer 0 waits for nobody. A peer other
than 0, or a call while torch.distributed runs several ranks, is refused at its line: the
copy would have no destination.

>>> hl.make_async_remote_copy(x, [tile], 0, dst=out).start()      # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from tessera import exc
from tessera.ir import interpreter
from tessera.ir.primitive import defined_primitive
from tessera.language.constexpr import constexpr
from tessera.language.memory import load, store
from tessera.location import user_location
from tessera.trace.proxy import TileValue
from tessera.trace.tracer import Tracer


class ProcessGroupName(constexpr):
    """A kernel parameter naming a torch.distributed process group (Helion's annotation): a
    compile-time constant, as `hl.constexpr`. With one rank no collective runs on it.

    >>> def kernel(x: torch.Tensor, group: hl.ProcessGroupName): ...   # doctest: +SKIP
    """


def _refuse_several_ranks(what: str) -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        raise exc.UnsupportedOperationError(
            f"{what} with {torch.distributed.get_world_size()} ranks: Tessera kernels run on one GPU, without "
            "the symmetric memory (NVSHMEM) a push to another rank needs", location=user_location(3),
            hint="communicate with torch.distributed collectives on the host between kernel calls")


def _check_peer(what: str, peer: Any) -> None:
    """Peer ids must name rank 0, the only one."""
    if isinstance(peer, torch.Tensor):
        peer = peer.reshape(-1).tolist()
    peers = list(peer) if isinstance(peer, (list, tuple)) else [peer]
    for item in peers:
        if isinstance(item, torch.Tensor):
            _check_peer(what, item)
            continue
        if isinstance(item, TileValue):
            raise exc.UnsupportedOperationError(f"{what}: a peer id loaded in the kernel", location=user_location(3),
                                                hint="with one rank the only peer is 0: pass 0 (or a host int)")
        value = item
        if isinstance(item, sympy.Basic):  # a runtime scalar: this call's value, and a guard for the next ones
            tracer = interpreter.active()
            value = tracer.symbols.evaluate_or_none(item)
            if value == 0:
                tracer.symbols.guard(sympy.Eq(item, 0), f"{what}: peer {item} is rank 0, the only one")
        if value != 0:
            raise exc.UnsupportedOperationError(
                f"{what} to peer {value}: Tessera runs a kernel on one rank, 0", location=user_location(3),
                hint="with one rank the only peer is 0; multi-rank kernels need NVSHMEM symmetric memory, "
                     "which Tessera does not manage")


class AsyncCopyDescriptor:
    """One push from `hl.make_async_remote_copy`: `start()` issues it, the waits complete it
    (with one rank the copy is done when `start()` returns, so they have nothing to wait for).
    """

    def __init__(self, src: Any, src_index: tuple, dst: Any, dst_index: tuple) -> None:
        self.src, self.src_index, self.dst, self.dst_index = src, src_index, dst, dst_index

    def start(self) -> None:
        remote_copy_p.bind(self.src, self.src_index, self.dst, self.dst_index)

    def wait(self) -> None:
        """The send drained and the matching receive arrived (the copy itself, with one rank)."""

    def wait_send(self) -> None:
        """The source may be reused."""

    def wait_recv(self) -> None:
        """The destination may be read."""


def make_async_remote_copy(src: Any, src_index: Sequence[Any], device_id: Any, dst: Any = None,
                           dst_index: Sequence[Any] | None = None) -> AsyncCopyDescriptor:
    """A push of `src[src_index]` (the indices select leading dims, the rest is copied whole) to
    `dst[dst_index]` (default: the same tensor and index) on peer `device_id`, issued by
    `.start()`. With one rank the peer must be 0 and the push is a copy.

    >>> hl.make_async_remote_copy(x, [tile], 0, dst=out, dst_index=[tile]).start()   # doctest: +SKIP
    """
    _refuse_several_ranks("hl.make_async_remote_copy")
    _check_peer("hl.make_async_remote_copy", device_id)
    src_index = tuple(src_index)
    dst = src if dst is None else dst
    dst_index = src_index if dst_index is None else tuple(dst_index)
    for name, tensor, index in (("src", src, src_index), ("dst", dst, dst_index)):
        if len(index) > tensor.dim():
            raise exc.IndexingError(f"hl.make_async_remote_copy: {len(index)} indices for the {tensor.dim()}-D {name}",
                                    location=user_location(), hint="index the leading dims only")
    return AsyncCopyDescriptor(src, src_index, dst, dst_index)


def remote_barrier(device_ids: Any) -> None:
    """Wait until the listed peers reach their barrier too: with one rank (peer 0) nobody else.

    >>> hl.remote_barrier([0])                                     # doctest: +SKIP
    """
    _refuse_several_ranks("hl.remote_barrier")
    _check_peer("hl.remote_barrier", device_ids)


def _whole_suffix(tensor: Any, index: tuple) -> tuple:
    return (*index, *(slice(None),) * (tensor.dim() - len(index)))


def _remote_copy(src: Any, src_index: tuple, dst: Any, dst_index: tuple) -> None:
    """The same ops in every mode: a load of the source region, a store into the destination."""
    store(dst, _whole_suffix(dst, dst_index), load(src, _whole_suffix(src, src_index)))


def _remote_copy_trace(tracer: Tracer, src: Any, src_index: tuple, dst: Any, dst_index: tuple) -> None:
    _remote_copy(src, src_index, dst, dst_index)


remote_copy_p = defined_primitive("remote_copy", _remote_copy, _remote_copy_trace)
