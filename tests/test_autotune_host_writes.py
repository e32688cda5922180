"""Tuning a kernel whose host code writes into its arguments (before the tile loop, after it, an
`hl.store` on the host): every candidate is checked against what one call computes, none is
taken for wrong because of the host's writes (all were), and the user's tensors are left as they
were; the call after tuning leaves them as one eager call does. Tuned in Triton's interpreter."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.autotune.host_writes import record_host_writes
from tessera.autotune.pipeline import TuneOptions, tune
from tessera.autotune.reference import bind_on_copies

pytestmark = pytest.mark.usefixtures("private_cache")
T = torch.Tensor


def bump_then_scale(x: T, y: T, out: T) -> T:
    x.add_(1.0)  # before the launch: the launch reads the bumped x
    for tile in hl.tile(x.size(0)):
        y[tile] = y[tile] * 2 + x[tile]  # the launch updates y in place
        out[tile] = x[tile] + y[tile]
    out.mul_(3.0)  # after the launch: the result is finished on the host
    return out


def store_then_add(x: T, y: T, out: T) -> T:
    result = torch.empty_like(x)  # allocated on the host, per call
    hl.store(out, [torch.arange(min(3, out.size(0)))], torch.ones(min(3, out.size(0))))
    for tile in hl.tile(x.size(0)):
        result[tile] = x[tile] + out[tile]
    out.mul_(5.0)
    return result


def zero_then_accumulate(x: T, y: T, out: T) -> tuple[T, T]:
    out.zero_()  # the launch accumulates into what the host cleared
    for tile in hl.tile(x.size(0)):
        hl.atomic_add(out, [tile], x[tile] * 2)
    x.sub_(1.0)
    return out, x


def bump_before(x: T, y: T, out: T) -> T:
    x.add_(1.0)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


KERNELS = [bump_then_scale, store_then_add, zero_then_accumulate, bump_before]


def _arguments(size: int) -> tuple[T, T, T]:
    generator = torch.Generator().manual_seed(size)
    return tuple(torch.randn(size, generator=generator) for _ in range(3))  # type: ignore[return-value]


def _flat(result: T | tuple[T, ...]) -> list[T]:
    return list(result) if isinstance(result, tuple) else [result]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_the_host_writes_are_recorded_before_and_after_the_first_launch(kernel: Callable[..., T]) -> None:
    arguments = _arguments(7)
    working = bind_on_copies(tessera.kernel(kernel, mode="interpret").bind(*arguments))
    seen = record_host_writes(working)
    assert (seen.before_launch, seen.after_launch) == (True, kernel is not bump_before)
    assert working.host_writes_after_launch == seen.after_launch
    for copy, state in working.tuning_storages:  # the copies hold the launch-time state
        assert torch.equal(copy, state)


@pytest.mark.parametrize("size", [1, 37])
def test_tuning_a_kernel_with_host_writes_checks_every_candidate_as_one_call(interpreter_workers: None,
                                                                           size: int) -> None:
    options = TuneOptions(compile_workers=1, rep_ms=1, final_rep_ms=1, progress=False)
    for kernel in KERNELS:
        originals = _arguments(size)
        expected_arguments = [a.clone() for a in originals]
        expected = _flat(tessera.kernel(kernel, mode="eager")(*expected_arguments))
        arguments = [a.clone() for a in originals]
        tuned = tessera.kernel(kernel, mode="interpret")
        result = tune(tuned.bind(*arguments), effort="quick", budget_seconds=30, options=options)
        # every candidate was "wrong" (a loaded machine may still run out of budget or time out)
        assert result.failures.get("wrong", 0) == 0 and len(result.search.trials) > 3, (kernel.__name__, result.failures)
        for argument, original in zip(arguments, originals):
            assert torch.equal(argument, original), kernel.__name__  # tuning works on copies
        got = _flat(tuned.bind(*arguments).run(result.config))
        for value, want in zip([*got, *arguments], [*expected, *expected_arguments]):
            torch.testing.assert_close(value, want, msg=kernel.__name__)
