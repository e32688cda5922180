"""Grouped GEMM over flat buffers, with each group's sizes and offsets read inside the kernel.

This is the kernel of Helion issue #459 (seed 000), fixed: six metadata values per group
`[m, n, k, a_offset, b_offset, c_offset]`, and results written to the flat output `C`.
One program per group (`hl.grid`) loads its metadata with `hl.load`, views its operands as
`flat[offset : offset + rows * cols].reshape(rows, cols)` — runtime offsets and sizes, which
are pointer metadata, not allocations — and runs an ordinary tiled matmul over them.
"""

from __future__ import annotations

import torch

import tessera
import tessera.language as hl
from examples._harness import DOT_TOLERANCES, Example, run_examples

VALUES_PER_GROUP = 6  # m, n, k, a_offset, b_offset, c_offset


@tessera.kernel
def grouped_gemm_impl(
    flattened_A: torch.Tensor,
    flattened_B: torch.Tensor,
    flattened_C: torch.Tensor,
    group_sizes: torch.Tensor,
    group_size_dummy: torch.Tensor,
) -> torch.Tensor:
    """For each group g: `C_g = A_g @ B_g`, all three stored flat; returns `flattened_C`."""
    group_size = group_size_dummy.shape[0]
    for group in hl.grid(group_size):
        m = hl.load(group_sizes, [group * 6])
        n = hl.load(group_sizes, [group * 6 + 1])
        k = hl.load(group_sizes, [group * 6 + 2])
        A_offset = hl.load(group_sizes, [group * 6 + 3])
        B_offset = hl.load(group_sizes, [group * 6 + 4])
        C_offset = hl.load(group_sizes, [group * 6 + 5])

        A = flattened_A[A_offset : A_offset + m * k].reshape(m, k)
        B = flattened_B[B_offset : B_offset + k * n].reshape(k, n)
        C = flattened_C[C_offset : C_offset + m * n].reshape(m, n)

        for tile_m, tile_n in hl.tile([m, n]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, A[tile_m, tile_k], B[tile_k, tile_n])
            C[tile_m, tile_n] = acc.to(C.dtype)
    return flattened_C


def flatten_groups(As: list[torch.Tensor], Bs: list[torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], list[int]]:
    """The kernel's five arguments for groups `A_g @ B_g` (operands concatenated flat, an
    uninitialized flat output, the metadata on the device), and the metadata as host ints."""
    device = As[0].device
    metadata: list[int] = []
    a_offset = b_offset = c_offset = 0
    for A, B in zip(As, Bs, strict=True):
        m, k = A.shape
        k2, n = B.shape
        assert k == k2, f"size mismatch in a group: A is [{m}, {k}], B is [{k2}, {n}]"
        metadata += [m, n, k, a_offset, b_offset, c_offset]
        a_offset += m * k
        b_offset += k * n
        c_offset += m * n
    flattened_A = torch.cat([A.reshape(-1) for A in As])
    flattened_B = torch.cat([B.reshape(-1) for B in Bs])
    flattened_C = torch.empty(c_offset, dtype=flattened_A.dtype, device=device)
    group_sizes = torch.tensor(metadata, dtype=torch.int32, device=device)
    group_size_dummy = torch.empty(len(As), device=device)
    return (flattened_A, flattened_B, flattened_C, group_sizes, group_size_dummy), metadata


def split_groups(flattened_C: torch.Tensor, metadata: list[int]) -> list[torch.Tensor]:
    """Each group's `[m, n]` result, a view of the flat output."""
    results = []
    for group in range(len(metadata) // VALUES_PER_GROUP):
        m, n, _, _, _, c_start = metadata[group * VALUES_PER_GROUP:(group + 1) * VALUES_PER_GROUP]
        results.append(flattened_C[c_start : c_start + m * n].reshape(m, n))
    return results


def grouped_gemm(As: list[torch.Tensor], Bs: list[torch.Tensor]) -> list[torch.Tensor]:
    """`[A @ B for A, B in zip(As, Bs)]`, as one kernel launch over flattened operands."""
    arguments, metadata = flatten_groups(As, Bs)
    flattened_C = grouped_gemm_impl(*arguments)
    return split_groups(flattened_C, metadata)


def reference(As: list[torch.Tensor], Bs: list[torch.Tensor]) -> list[torch.Tensor]:
    """One float32 `torch.matmul` per group, cast back to the inputs' dtype."""
    return [(A.float() @ B.float()).to(A.dtype) for A, B in zip(As, Bs)]


def make_inputs(
    shapes: tuple[tuple[int, int, int], ...], *, dtype: torch.dtype, device: str
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One `(A [m, k], B [k, n])` pair per `(m, k, n)` in `shapes`, scaled so outputs are O(1)."""
    As = [torch.randn(m, k, device=device).to(dtype) for m, k, _ in shapes]
    Bs = [(torch.randn(k, n, device=device) / max(k, 1) ** 0.5).to(dtype) for _, k, n in shapes]
    return As, Bs


EXAMPLE = Example(
    "grouped_gemm",
    run=grouped_gemm,
    reference=reference,
    make_inputs=make_inputs,
    sizes={
        "cpu": {"shapes": ((128, 256, 96), (64, 128, 256), (200, 64, 72), (32, 512, 128))},
        "cuda": {"shapes": ((1024, 512, 2048), (512, 1024, 2048), (1024, 2048, 4096), (4096, 2048, 4096))},
    },
    tolerances=DOT_TOLERANCES,
)
EXAMPLES = [EXAMPLE]

if __name__ == "__main__":
    run_examples(EXAMPLES)
