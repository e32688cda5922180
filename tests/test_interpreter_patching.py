"""Triton's interpreter patches `triton.language` once per launch, not once per call of one of
Triton's library functions (`tl.sum`, `tl.zeros_like`, ...): interpret mode's main cost on
reduction loops (issue 15, Helion's gather_gemv and gdn_fwd_h examples timed out)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

T = torch.Tensor


def row_sums_in_chunks(x: T) -> T:
    out = torch.zeros(x.size(0), dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        acc = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(x.size(1)):
            acc = acc + torch.sum(x[tile_m, tile_n], dim=1) + torch.amax(x[tile_m, tile_n], dim=1) * 0
        out[tile_m] = acc
    return out


def _patchings(kernel: object, x: T, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many times one call's launch patches a language module (and checks its result)."""
    from triton.runtime import interpreter
    calls = []
    original = interpreter._patch_builtin
    with monkeypatch.context() as patch:
        patch.setattr(interpreter, "_patch_builtin", lambda *args: calls.append(args) or original(*args))
        torch.testing.assert_close(kernel(x), x.sum(1))
    return len(calls)


def test_library_calls_inside_a_launch_patch_the_language_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tessera.kernel(row_sums_in_chunks, mode="interpret", config=tessera.Config(block_sizes=[4, 4]))
    small, large = torch.randn(1, 1), torch.randn(9, 67)  # 1 loop body; 3 programs of 17 (each 2 library calls)
    kernel(small)  # imports Triton's interpreter (and patches it)
    assert 0 < _patchings(kernel, small, monkeypatch) == _patchings(kernel, large, monkeypatch)


def test_the_language_is_restored_after_a_launch() -> None:
    x = torch.randn(6, 10)
    kernel = tessera.kernel(row_sums_in_chunks, mode="interpret", config=tessera.Config(block_sizes=[4, 4]))
    kernel(x)
    import triton.language as tl
    assert tl.core.is_builtin(tl.core.reduce) and tl.core.is_builtin(tl.arange)  # Triton's own, not the interpreter's
    torch.testing.assert_close(kernel(x), x.sum(1))


@pytest.mark.parametrize(("addresses", "values", "mask", "conflict"), [
    ([8, 16, 24], [1.0, 2.0, 3.0], [True, True, True], False),       # increasing: the usual store
    ([24, 8, 16], [1.0, 2.0, 3.0], [True, True, True], False),       # a permutation
    ([8, 16, 8], [1.0, 2.0, 1.0], [True, True, True], False),        # repeated with equal values
    ([8, 16, 8], [float("nan"), 2.0, float("nan")], [True] * 3, False),  # NaN bits equal
    ([8, 16, 8], [1.0, 2.0, 5.0], [True, True, False], False),       # the clashing lane is masked
    ([8, 16, 8], [1.0, 2.0, 5.0], [True, True, True], True),
    ([8, 8], [0.0, -0.0], [True, True], True),                       # different bits
])
def test_the_interpreter_refuses_lanes_of_one_store_that_clash(addresses: list[int], values: list[float],
                                                               mask: list[bool], conflict: bool) -> None:
    import numpy as np

    from tessera.backends.triton.interpreter_patching import ConflictingStores, _check_store_lanes
    arrays = (np.array(addresses, dtype=np.uint64), np.array(values, dtype=np.float32), np.array(mask))
    if conflict:
        with pytest.raises(ConflictingStores):
            _check_store_lanes(*arrays)
    else:
        _check_store_lanes(*arrays)
