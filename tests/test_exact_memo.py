"""The exact-facts memos in front of the keyed hit path (tessera/runtime/exact_facts.py).

A repeat launch (or call) with the same exact facts repeats the keyed path's decision. These
tests change one fact at a time after a run of memo hits and check that the result is still
right and the cache counts say the change was seen; and that the memo holds no tensor.
"""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.runtime.exact_facts import Memo, exact_facts, launch_facts
from tessera.runtime.tuning import ConfigChoices

GIVEN = tessera.Config(block_sizes=[8, 8])


def summed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = a[tile_m, tile_n] + b[tile_m, tile_n]
    return out


def scaled_if_positive(x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        if factor > 0:  # a host condition on a float: the variant is guarded on it
            out[tile] = x[tile] * factor
        else:
            out[tile] = x[tile]
    return out


def expected_scaled(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor if factor > 0 else x


def test_the_same_tensor_twice_then_two_tensors(device: torch.device) -> None:
    kernel = tessera.kernel(summed, config=GIVEN)
    x, y = torch.randn(5, 7, device=device), torch.randn(5, 7, device=device)
    for a, b in ((x, x), (x, x), (x, y), (y, x), (y, y), (x, y)):
        torch.testing.assert_close(kernel(a, b), a + b)
    assert kernel.cache_info() == (5, 1, 1)


def test_a_guard_on_a_float_is_decided_per_value(device: torch.device) -> None:
    kernel = tessera.kernel(scaled_if_positive, config=tessera.Config(block_sizes=[8]))
    x = torch.randn(20, device=device)
    for factor in (2.0, 2.0, -1.0, -1.0, 3.0, -2.0, 2.0):
        torch.testing.assert_close(kernel(x, factor), expected_scaled(x, factor))
    assert kernel.cache_info().variants == 2


def test_a_nan_argument_is_never_remembered(device: torch.device) -> None:
    kernel = tessera.kernel(scaled_if_positive, config=tessera.Config(block_sizes=[8]))
    x = torch.randn(9, device=device)
    for _ in range(3):
        torch.testing.assert_close(kernel(x, float("nan")), x, equal_nan=True)
    assert all(len(memo) == 0 for memo in kernel.store.memos.values())
    assert len(kernel.config_choices.by_facts) == 0  # a given config= skips the choice; here: nothing kept


def test_in_place_metadata_changes_are_seen(device: torch.device) -> None:
    kernel = tessera.kernel(summed, config=GIVEN)
    x = torch.randn(6, 10, device=device)
    for _ in range(3):
        torch.testing.assert_close(kernel(x, x), x + x)
    x.t_()  # the same object, now column-major
    torch.testing.assert_close(kernel(x, x), x + x)
    x.resize_(3, 4)  # and now a smaller contiguous tensor
    torch.testing.assert_close(kernel(x, x), x + x)
    assert kernel.cache_info().variants == 2  # row-major (twice) and column-major


def test_mark_static_after_hits_builds_a_new_variant(device: torch.device) -> None:
    kernel = tessera.kernel(summed, config=GIVEN)
    x = torch.randn(4, 6, device=device)
    kernel(x, x)
    kernel(x, x)
    marked = tessera.mark_static(x, dims=[1])
    torch.testing.assert_close(kernel(marked, marked), x + x)
    assert kernel.cache_info() == (1, 2, 2)


def test_the_memo_holds_no_tensor(device: torch.device) -> None:
    kernel = tessera.kernel(summed, config=GIVEN)
    x = torch.randn(3, 3, device=device)
    kernel(x, x)
    out = kernel(x, x)
    alive = weakref.ref(out)
    del out
    gc.collect()
    assert alive() is None


def test_the_config_choice_is_remembered_and_forgotten() -> None:
    choices = ConfigChoices()
    facts = tuple(exact_facts([torch.empty(2, 3)], "interpret") or ())
    choices.by_facts.remember(facts, GIVEN)
    choices.set(("interpret", (), ()), tessera.Config(block_sizes=[16, 16]))
    assert len(choices) == 1 and len(choices.by_facts) == 0  # a new choice may replace the remembered one
    choices.by_facts.remember(facts, GIVEN)
    choices.clear()
    assert len(choices) == 0 and len(choices.by_facts) == 0


def test_exact_facts_tell_values_apart() -> None:
    base = torch.empty(4, 8)
    assert exact_facts([base]) == exact_facts([torch.empty(4, 8)])
    different = [base.t(), base[:, :4], base.view(8, 4), base.double(), base.view(-1)[1:29].view(4, 7)]
    for other in different:
        assert exact_facts([base]) != exact_facts([other])
    assert exact_facts([1]) != exact_facts([True])  # equal values of different types
    assert exact_facts([2]) != exact_facts([2.0])
    assert exact_facts([[base]]) is None  # a list of tensors takes the keyed path
    assert exact_facts([float("nan")]) is None


def test_launch_facts_refuse_tensor_bounds() -> None:
    from tessera.ir.tile_range import TileRange
    plain = TileRange([0], [8], [None], False, False, ("f", 1, 0))
    assert launch_facts(1, [], plain) is not None
    from_tensor = TileRange([0], [torch.tensor(8)], [None], False, False, ("f", 1, 0))
    assert launch_facts(1, [], from_tensor) is None


def test_a_full_memo_empties_itself() -> None:
    memo = Memo(capacity=3)
    for key in range(7):
        memo.remember(key, key)
    assert len(memo) <= 3 and memo[6] == 6


def test_repeat_launches_skip_the_binary_key(device: torch.device) -> None:
    if device.type != "cuda":
        pytest.skip("compiled mode only: the launcher runs Triton binaries")
    kernel = tessera.kernel(summed, config=GIVEN)
    x = torch.randn(5, 7, device=device)
    for _ in range(5):
        kernel(x, x)
    torch.cuda.synchronize()
    launcher = next(v for vs in kernel.store.variants.values() for v in vs).loaded.launcher
    assert launcher.enabled and launcher.fast_launches == 4 and launcher.slow_launches == 1  # the first launch compiles


def test_threads_calling_one_kernel_each_see_their_own_call(device: torch.device) -> None:
    import threading
    kernel = tessera.kernel(summed, config=GIVEN)
    failures: list[BaseException] = []

    def work(rows: int) -> None:
        try:
            for _ in range(6):
                a, b = torch.randn(rows, 3, device=device), torch.randn(rows, 3, device=device)
                torch.testing.assert_close(kernel(a, b), a + b)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(rows,)) for rows in (1, 5, 9, 17)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_memo_that_keeps_missing_stands_aside_then_tries_again() -> None:
    memo = Memo()
    for key in range(Memo.MISSES_BEFORE_BYPASS):
        assert memo.wanted() and memo.lookup(key) is None
        memo.remember(key, key)
    assert [memo.wanted() for _ in range(Memo.BYPASS_CALLS)] == [False] * Memo.BYPASS_CALLS
    assert memo.wanted() and memo.lookup(3) == 3  # tried again: remembered values are still there
    assert memo.misses_in_a_row == 0


def test_changing_shapes_then_a_steady_one(device: torch.device) -> None:
    kernel = tessera.kernel(summed, config=GIVEN)
    for cols in range(1, 40):  # a new shape on every call: the memo stands aside
        a, b = torch.randn(2, cols, device=device), torch.randn(2, cols, device=device)
        torch.testing.assert_close(kernel(a, b), a + b)
    memo = next(iter(kernel.store.memos.values()))
    assert memo.bypass_left > 0
    a, b = torch.randn(3, 5, device=device), torch.randn(3, 5, device=device)
    for _ in range(memo.bypass_left + 3):  # steady: once the bypass ends, it is remembered again
        torch.testing.assert_close(kernel(a, b), a + b)
    assert memo.bypass_left == 0 and memo.lookup(next(iter(memo))) is not None


def test_a_kernel_carrying_a_value_through_a_loop_repeats_calls_from_the_memo(device: torch.device) -> None:
    # every loop body captures the rewrite's UNDEFINED marker; it had no exact facts, so kernels with
    # a carried name (matmul's acc) took the keyed path on every call
    from examples.matmul import matmul

    kernel = tessera.kernel(matmul.fn)
    x, y = torch.randn(16, 32, device=device), torch.randn(32, 24, device=device)
    for _ in range(4):
        torch.testing.assert_close(kernel(x, y), x @ y, rtol=1e-2, atol=1e-2)
    memos = [memo for memo in kernel.store.memos.values() if len(memo)]
    assert memos and all(len(memo) == 1 for memo in memos)
    assert kernel.cache_info().hits == 3


def matmul_with_epilogue(x: torch.Tensor, y: torch.Tensor, epilogue=lambda acc, tile: acc) -> torch.Tensor:
    m, k = x.size()
    out = torch.empty([m, y.size(1)], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, y.size(1)]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n)).to(out.dtype)
    return out


def _with_bias(kernel, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    # a fresh closure on every call, as Helion's matmul examples make their epilogues
    return kernel(x, y, lambda acc, tile: acc * scale + bias[tile[0], tile[1]])


def test_a_fresh_closure_per_call_repeats_from_the_memo(device: torch.device) -> None:
    # closures had no exact facts: every call with an epilogue lambda took the keyed path (10x a plain
    # call's host time on the H100). Their facts are now the code and the captured values' facts.
    kernel = tessera.kernel(matmul_with_epilogue, config=tessera.Config(block_sizes=[16, 16, 16]), dot_precision="ieee")
    x, y = torch.randn(20, 16, device=device), torch.randn(16, 24, device=device)
    cases = [(torch.randn(20, 24, device=device), 1.0) for _ in range(3)]
    cases += [(cases[0][0], 2.0), (cases[0][0], -0.0), (torch.randn(20, 24, device=device).t().contiguous().t(), 1.0),
              (torch.randn(24, 20, device=device).t(), 1.0), (torch.randn(20, 1, device=device).expand(20, 24), 0.5)]
    for bias, scale in cases:
        torch.testing.assert_close(_with_bias(kernel, x, y, bias, scale), (x @ y) * scale + bias, rtol=1e-4, atol=1e-4)
    remembered = sum(len(memo) for memo in kernel.store.memos.values())
    hits = kernel.cache_info().hits
    assert remembered >= 2 and hits >= len(cases) - remembered
    alive = weakref.ref(cases[-1][0])
    del cases, bias
    gc.collect()
    assert alive() is None  # the memo holds no captured tensor


def test_exact_facts_of_closures_follow_their_captures() -> None:
    def made(value):
        return lambda acc: acc + value

    tensor = torch.zeros(2, 3)
    assert exact_facts([made(1.0)]) == exact_facts([made(1.0)])
    assert exact_facts([made(1.0)]) != exact_facts([made(2.0)])
    assert exact_facts([made(tensor)]) == exact_facts([made(torch.ones(2, 3))])
    assert exact_facts([made(tensor)]) != exact_facts([made(tensor.t())])
    assert exact_facts([made(object())]) is None  # an object may hold tensors: keyed path


def test_a_fresh_plain_function_per_call_reuses_its_variant(device: torch.device) -> None:
    # a function without a closure was keyed by identity: a lambda made on every call compiled a
    # variant per call until max_variants. Now its code and defaults key it, and the memo serves it.
    kernel = tessera.kernel(matmul_with_epilogue, config=tessera.Config(block_sizes=[16, 16, 16]), dot_precision="ieee")
    x, y = torch.randn(20, 16, device=device), torch.randn(16, 24, device=device)
    for scale in (2.0, 2.0, 2.0, 3.0):
        result = kernel(x, y, lambda acc, tile, factor=scale: acc * factor)
        torch.testing.assert_close(result, (x @ y) * scale, rtol=1e-4, atol=1e-4)
    assert kernel.cache_info().variants == 2  # one per default value, which is compiled in
    assert sum(len(memo) for memo in kernel.store.memos.values()) == 2


def test_keyword_only_defaults_of_a_closure_are_part_of_its_key(device: torch.device) -> None:
    # the keyed path keyed a closure by its positional defaults only: a closure whose keyword-only
    # default changed reused the variant with the first call's default compiled in (2.0 for 3.0)
    kernel = tessera.kernel(matmul_with_epilogue, config=tessera.Config(block_sizes=[16, 16, 16]), dot_precision="ieee")
    x, y = torch.randn(20, 16, device=device), torch.randn(16, 24, device=device)
    bias = torch.randn(20, 24, device=device)
    for scale in (2.0, 3.0, 2.0):
        result = kernel(x, y, lambda acc, tile, *, factor=scale: acc * factor + bias[tile[0], tile[1]])
        torch.testing.assert_close(result, (x @ y) * scale + bias, rtol=1e-4, atol=1e-4)
    assert kernel.cache_info().variants == 2
