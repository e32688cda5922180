"""Fast checks in front of the exact-facts memos (tessera/runtime/fast_checks.py).

A check built from some values must say True only for values whose exact facts equal theirs:
each test builds one, then offers values that differ in one fact and compares its answer with
`exact_facts`. The end-to-end tests repeat calls until the checks serve them, then change one
fact and check the answer and the cache counts.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera.ir.tile_range import TileRange
from tessera.runtime import fast_checks
from tessera.runtime.exact_facts import Memo, exact_facts, launch_facts
from tessera.runtime.fast_checks import facts_check


def _made(value):
    return lambda acc: acc + value


def _same_facts_when_accepted(base: list, others: list[list]) -> None:
    """The check of `base` accepts `base`, and accepts another list only if its facts are equal."""
    check = facts_check(base)
    assert check is not None and check(base, None)
    for other in others:
        if check(other, None):
            assert exact_facts(other) == exact_facts(base), other


def test_tensor_facts_are_all_checked() -> None:
    base = torch.randn(4, 8)
    others = [base.t(), base[:, :4], base.view(8, 4), base.double(), base.view(-1)[1:29].view(4, 7),
              torch.randn(33)[1:].view(4, 8), torch._neg_view(base), torch.randn(4, 8),
              torch.nn.Parameter(torch.randn(4, 8)), tessera.mark_static(torch.randn(4, 8), dims=[0]),
              torch.randn(4, 8).requires_grad_(), torch.randn(4, 1).expand(4, 8), 3, None]
    _same_facts_when_accepted([base], [[other] for other in others])
    check = facts_check([base])
    assert check([torch.randn(4, 8)], None) and not check([base.t()], None)


def test_tensor_facts_are_checked_without_torchs_tensor_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_checks, "_GUARDS_WORK", [False])  # as on a torch without TensorGuards
    base = torch.randn(4, 8)
    others = [base.t(), base.double(), torch.randn(33)[1:].view(4, 8), torch._neg_view(base), torch.randn(4, 8)]
    _same_facts_when_accepted([base], [[other] for other in others])
    assert facts_check([base])([torch.randn(4, 8)], None)


def test_scalars_are_checked_with_their_types() -> None:
    base = [2, 2.5, True, None, "s", torch.float16, (1, 2), [0.5], torch.add, tessera]
    variants = {0: [2.0, True, 3], 1: [2, 2.6, float("nan")], 2: [1, False], 3: [0, False], 4: ["t", b"s"],
                5: [torch.float32], 6: [(1, 2.0), (1, True), [1, 2], (1, 2, 3)], 7: [[-0.5], (0.5,)], 8: [torch.sub],
                9: [torch]}
    others = []
    for index, replacements in variants.items():
        for replacement in replacements:
            changed = list(base)
            changed[index] = replacement
            others.append(changed)
    _same_facts_when_accepted(base, others + [base[:-1], base + [1]])
    assert facts_check(base)(list(base), None)


def test_zero_floats_keep_their_sign() -> None:
    _same_facts_when_accepted([0.0], [[-0.0], [0]])
    _same_facts_when_accepted([-0.0], [[0.0]])
    assert facts_check([float("nan")]) is None  # no facts, so no check


def test_closures_are_checked_by_code_defaults_and_cells() -> None:
    tensor = torch.zeros(2, 3)
    base = [_made(tensor)]
    others = [[_made(torch.ones(2, 3))], [_made(tensor.t())], [_made(tensor.double())], [_made(1.0)],
              [lambda acc: acc + tensor], [_made(_made(tensor))]]
    _same_facts_when_accepted(base, others)
    assert facts_check(base)([_made(torch.ones(2, 3))], None)  # a fresh closure of the same code
    nested = [_made(_made(tensor))]
    _same_facts_when_accepted(nested, [[_made(_made(tensor.t()))], [_made(_made(2))], base])

    def with_default(scale):
        return lambda acc, *, factor=scale: acc * factor

    _same_facts_when_accepted([with_default(2.0)], [[with_default(3.0)], [with_default(2)], [with_default(-0.0)]])


def test_an_emptied_cell_fails_the_check() -> None:
    def maker():
        value = torch.zeros(3)
        function = lambda: value  # noqa: E731
        return function, lambda: function.__closure__[0].cell_contents

    function, _ = maker()
    check = facts_check([function])
    assert check([function], None)
    del_cell = function.__closure__[0]
    del del_cell.cell_contents
    assert not check([function], None)


def test_iteration_spaces_are_checked() -> None:
    base = TileRange([0, 0], [4, 8], [None, None], True, False, ("f", 3, 4))
    check = facts_check([], base)
    assert check([], base) and check([], TileRange([0, 0], [4, 8], [None, None], True, False, ("f", 3, 4)))
    others = [TileRange([0, 0], [4, 9], [None, None], True, False, ("f", 3, 4)),
              TileRange([0, 1], [4, 8], [None, None], True, False, ("f", 3, 4)),
              TileRange([0, 0], [4, 8], [16, None], True, False, ("f", 3, 4)),
              TileRange([0, 0], [4, 8], [None, None], False, False, ("f", 3, 4)),
              TileRange([0, 0], [4, 8], [None, None], True, True, ("f", 3, 4)),
              TileRange([0, 0], [4, 8], [None, None], True, False, ("f", 5, 4)),
              TileRange([0], [4], [None], True, False, ("f", 3, 4)),
              TileRange([0, 0], [4, 8.0], [None, None], True, False, ("f", 3, 4))]
    for other in others:
        assert not check([], other) or launch_facts(1, [], other) == launch_facts(1, [], base)
    typed = TileRange([0], [torch.tensor(4)], [None], False, False, ("f", 1, 0))
    assert facts_check([], typed) is None  # bounds that are not plain ints are left to the facts


def test_a_memo_serves_repeats_from_its_checks_most_recent_first() -> None:
    memo = Memo()
    first, second = [torch.zeros(2)], [torch.zeros(3)]
    for values, answer in ((first, "a"), (second, "b")):
        key = tuple(exact_facts(values, "site") or ())
        memo.remember(key, answer)
        assert memo.check_wanted(key) and not memo.check_wanted(key)  # built once per facts
        memo.add_check("site", facts_check(values), answer, key)
    assert memo.quick("site", [torch.ones(2)], None) == ("a", True) and memo.recent["site"][0][1] == "a"
    assert memo.quick("site", [torch.ones(4)], None) is None and memo.quick("other", first, None) is None
    memo.clear()
    assert not memo.recent and memo.quick("site", first, None) is None


def test_a_repeat_gets_its_fast_check_again_after_the_memo_dropped_it() -> None:
    # a kernel called with a new width on every call (a bypass), then with one shape again, stayed
    # on the slow path for good: the dropped check's key still counted as built (H100: 54 vs 33 us)
    memo = Memo()
    values = [torch.zeros(2)]
    key = tuple(exact_facts(values, "site") or ())
    memo.remember(key, "a")
    assert memo.check_wanted(key)
    memo.add_check("site", facts_check(values), "a", key)
    for width in range(3, 3 + Memo.MISSES_BEFORE_BYPASS):  # misses in a row: the memo stands aside
        memo.lookup(tuple(exact_facts([torch.zeros(width)], "site") or ()))
    assert not memo.recent and memo.check_wanted(key)
    memo.add_check("site", facts_check(values), "a", key)
    for width in range(3, 3 + Memo.RECENT):  # more repeated shapes than checks kept: the oldest drops out
        other = [torch.zeros(width)]
        other_key = tuple(exact_facts(other, "site") or ())
        assert memo.check_wanted(other_key)
        memo.add_check("site", facts_check(other), width, other_key)
    assert memo.quick("site", values, None) is None and memo.check_wanted(key)
    memo.forget_site("site")
    assert not memo.recent and memo.check_wanted(other_key)


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "alignment", "neg view", "mark_static"])
def test_a_changed_tensor_after_checked_hits_is_redispatched(change: str) -> None:
    kernel = tessera.kernel(_add, config=tessera.Config(block_sizes=[4, 8]))
    x, y = torch.randn(6, 16), torch.randn(6, 16)
    changed = {
        "shape": lambda: (torch.randn(7, 16), torch.randn(7, 16)),
        "stride": lambda: (torch.randn(16, 6).t(), torch.randn(6, 16)),
        "dtype": lambda: (torch.randn(6, 16, dtype=torch.float64), torch.randn(6, 16, dtype=torch.float64)),
        "alignment": lambda: (torch.randn(6 * 16 + 1)[1:].view(6, 16), torch.randn(6, 16)),
        "neg view": lambda: (torch.randn(6, 16), torch._neg_view(torch.randn(6, 16))),
        "mark_static": lambda: (tessera.mark_static(torch.randn(6, 16)), torch.randn(6, 16)),
    }[change]()
    for _ in range(4):  # the third and later calls are served by fast checks
        torch.testing.assert_close(kernel(x, y), x + y)
    assert any(memo.recent for memo in kernel.store.memos.values())
    a, b = changed
    if change == "neg view":
        with pytest.raises(tessera.exc.TesseraError, match="negation bit"):
            kernel(a, b)
        return
    for _ in range(3):
        torch.testing.assert_close(kernel(a, b), a.resolve_neg() + b.resolve_neg())
        torch.testing.assert_close(kernel(x, y), x + y)


def test_a_config_choice_is_served_by_a_check_and_follows_shapes() -> None:
    kernel = tessera.kernel(_add)  # heuristic Configs, chosen per call's facts
    small, large = (torch.randn(3, 5), torch.randn(3, 5)), (torch.randn(64, 80), torch.randn(64, 80))
    for inputs in [small] * 3 + [large] * 3 + [small, large]:
        torch.testing.assert_close(kernel(*inputs), inputs[0] + inputs[1])
    assert kernel.config_choices.by_facts.recent  # repeats were served by checks


def _write_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def test_a_partial_overlap_is_refused_on_a_checked_hit() -> None:
    kernel = tessera.kernel(_write_into, config=tessera.Config(block_sizes=[8]))
    base = torch.randn(40)
    for _ in range(4):
        x, out = base[:16], torch.empty(16)
        torch.testing.assert_close(kernel(x, out), x * 2)
    assert any(memo.recent for memo in kernel.store.memos.values())
    for _ in range(2):  # the same facts, but now the output overlaps the input half-way
        with pytest.raises(tessera.exc.TesseraError, match="overlap|share"):
            kernel(base[:16], base[8:24])
    same = base[:16].clone()
    torch.testing.assert_close(kernel(same, same), base[:16] * 2)  # the same view: an in-place op


def test_a_write_into_a_tensor_that_requires_grad_is_refused_on_a_checked_hit() -> None:
    kernel = tessera.kernel(_write_into, config=tessera.Config(block_sizes=[8]))
    x = torch.randn(16)
    for _ in range(4):
        kernel(x, torch.empty(16))
    assert any(memo.recent for memo in kernel.store.memos.values())
    out = torch.empty(16)
    version = out._version
    kernel(x, out)
    assert out._version > version  # autograd sees the write
    with pytest.raises(tessera.exc.TesseraError, match="requires grad"):
        kernel(x, torch.empty(16, requires_grad=True))


def test_a_check_with_disjoint_pairs_says_false_when_the_byte_ranges_meet() -> None:
    base = torch.zeros(64)
    extent = (0, 16 * 4)  # 16 float32s from the data pointer
    # values [tensor, closure over (int, tensor)]: opened, the closure's tensor is at index 2
    values = [base[:16], _made_pair(3, base[32:48])]
    check = facts_check(values, None, [(0, extent, 2, extent)])
    assert check is not None and check(values, None)
    assert check([base[16:32], _made_pair(3, base[48:64])], None)
    assert not check([base[32:48], _made_pair(3, base[32:48])], None)  # the same bytes
    assert not check([base[36:52], _made_pair(3, base[32:48])], None)  # half-way over them
    assert facts_check(values, None, [(0, extent, 1, extent)]) is None  # index 1 holds the int


def _made_pair(number, tensor):
    return lambda acc: acc * number + tensor


def test_a_check_gives_data_pointers_only_for_tensors_on_the_named_device() -> None:
    x, y = torch.randn(4), torch.randn(5)
    values = [x, _made_pair(2, y)]
    on_cpu = facts_check(values, None, (), torch.device("cpu"))
    assert on_cpu(values, None) == (x.data_ptr(), y.data_ptr())  # opened order: x, then the closure's y
    z = torch.randn(4)
    assert on_cpu([z, _made_pair(2, y)], None) == (z.data_ptr(), y.data_ptr())
    assert facts_check(values, None, (), torch.device("meta"))(values, None) is True  # elsewhere: no pointers
    assert facts_check(values)(values, None) is True


def test_keyword_arguments_take_the_memo_and_its_checks() -> None:
    def scaled(x: torch.Tensor, *, factor: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * factor + shift
        return out

    kernel = tessera.kernel(scaled)  # the Config is chosen per call: by facts for keyword calls too
    x = torch.randn(30)
    for factor, shift in [(2.0, 0.0)] * 3 + [(3.0, 1.0)] * 3 + [(2.0, 0.0)]:
        torch.testing.assert_close(kernel(x, factor=factor, shift=shift), x * factor + shift)
        torch.testing.assert_close(kernel(x, shift=shift, factor=factor), x * factor + shift)
    assert kernel.config_choices.by_facts.recent
    torch.testing.assert_close(kernel(x, factor=-0.0), x * -0.0)  # another form: a new choice
    with pytest.raises(tessera.exc.TesseraError, match="unexpected keyword|got an unexpected"):
        kernel(x, scale=2.0)
    with pytest.raises(tessera.exc.TesseraError):
        kernel(x, 2.0)  # factor is keyword-only


def test_checks_hold_no_tensor() -> None:
    import gc
    import weakref
    x, bias = torch.randn(4, 8), torch.randn(8)
    check = facts_check([x, _made(bias)], None, (), torch.device("cpu"))
    assert check([x, _made(bias)], None)
    alive = [weakref.ref(x), weakref.ref(bias)]
    del x, bias
    gc.collect()
    assert all(reference() is None for reference in alive)
