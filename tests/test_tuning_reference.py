"""Which accuracy reference a tuning run uses: eager when affordable, else the heuristic compiled.

Eager mode costs Python time per tile; a big kernel (attention at 4x32x4096x4096) took minutes
there, so above `EAGER_REFERENCE_TILES` tile iterations the reference is the compiled result of
the Config the call would run without tuning.
"""
from __future__ import annotations

import torch

import tessera
from examples.add import add
from tessera.autotune.reference import bind_on_copies, compiled_reference, eager_is_affordable


def test_eager_reference_only_when_its_tile_count_is_affordable(device: torch.device) -> None:
    bound = add.bind(torch.randn(256, 256, device=device), torch.randn(256, 256, device=device))
    assert eager_is_affordable(bound, tessera.Config(block_sizes=[64, 64]))  # 16 programs
    assert not eager_is_affordable(bound, tessera.Config(block_sizes=[2, 2]))  # 16384 programs


def test_compiled_reference_matches_and_restores_the_tuning_copies(device: torch.device) -> None:
    x, y = torch.randn(7, 13, device=device), torch.randn(7, 13, device=device)
    working = bind_on_copies(add.bind(x, y))
    (reference,) = compiled_reference(working, tessera.Config(block_sizes=[4, 8]))
    torch.testing.assert_close(reference, x + y)
    for copy, pristine in working.tuning_storages:
        assert torch.equal(copy, pristine)


def test_a_kernel_with_a_shared_loop_over_loaded_sizes_takes_the_compiled_reference(device: torch.device) -> None:
    from examples.grouped_gemm import flatten_groups, grouped_gemm_impl, make_inputs
    As, Bs = make_inputs(((4, 8, 8), (2, 8, 8)), dtype=torch.float32, device=str(device))
    arguments, _ = flatten_groups(As, Bs)
    # two programs under the default Config, but how many tiles each walks is data
    assert not eager_is_affordable(grouped_gemm_impl.bind(*arguments), tessera.Config(block_sizes=[16, 16, 16]))
