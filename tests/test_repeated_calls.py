"""Repeated calls (tessera/runtime/repeated_calls.py): a plain call whose arguments repeat an
earlier call's exact facts repeats its mode, Config and device.

Each test makes a run of repeats (so the fast check answers), then changes one thing the
decision depends on (the environment, an override, a kernel setting, a tuned Config, a fact of
the arguments) and checks the next call follows it. Eager mode counts no cache hits, which is
how a test sees which mode ran.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import settings
from tessera.runtime.repeated_calls import CallDecision, RepeatedCalls


def doubled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] * 2
    return out


def repeated(kernel: tessera.Kernel, x: torch.Tensor, times: int = 4) -> None:
    """Call `kernel(x)` until the repeated-call check serves it; each answer checked."""
    for _ in range(times):
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.config_choices.calls.memo.recent, "repeats must be served by a fast check"


def hits(kernel: tessera.Kernel) -> int:
    return kernel.cache_info().hits


def test_repeats_are_served_by_one_check_of_the_arguments(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(3, 5, device=device)
    repeated(kernel, x)
    served = kernel.config_choices.calls.decide((x,))
    assert served is not None and served.device == x.device and served.mode != "eager"


def test_an_environment_mode_change_between_two_calls_takes_effect(device: torch.device,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(7, device=device)
    repeated(kernel, x)
    before = hits(kernel)
    monkeypatch.setenv("TESSERA_MODE", "eager")
    torch.testing.assert_close(kernel(x), x * 2)
    assert hits(kernel) == before  # eager mode ran: no launch
    monkeypatch.delenv("TESSERA_MODE")
    torch.testing.assert_close(kernel(x), x * 2)
    assert hits(kernel) == before + 1


def test_an_override_takes_effect_and_ends_with_its_block(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(4, 4, device=device)
    repeated(kernel, x)
    before = hits(kernel)
    with settings.override(mode="eager"):
        torch.testing.assert_close(kernel(x), x * 2)
        torch.testing.assert_close(kernel(x), x * 2)
    assert hits(kernel) == before
    repeated(kernel, x)
    assert hits(kernel) > before


def test_a_kernel_setting_change_takes_effect(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(9, device=device)
    repeated(kernel, x)
    kernel.settings.mode = "eager"
    before = hits(kernel)
    torch.testing.assert_close(kernel(x), x * 2)
    assert hits(kernel) == before


def test_a_given_config_after_repeats_is_the_one_that_runs(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(33, device=device)
    repeated(kernel, x)
    kernel.configs = [tessera.Config(block_sizes=[16])]
    repeated(kernel, x)
    assert list(kernel.config_choices.calls.decide((x,)).config["block_sizes"]) == [16]


def test_a_new_choice_forgets_the_call_decisions(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(6, device=device)
    repeated(kernel, x)
    kernel.config_choices.set(("some key",), tessera.Config(block_sizes=[8]))
    assert kernel.config_choices.calls.decide((x,)) is None


@pytest.mark.parametrize("changed", ["shape", "dtype", "strides", "offset"])
def test_a_changed_fact_after_repeats_is_decided_afresh(changed: str, device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(8, 6, device=device)
    repeated(kernel, x)
    other = {"shape": torch.randn(5, 6, device=device), "dtype": x.to(torch.float64), "strides": x.t(),
             "offset": torch.randn(64, device=device)[1:49].view(8, 6)}[changed]
    assert kernel.config_choices.calls.decide((other,)) is None
    torch.testing.assert_close(kernel(other), other * 2)


def test_size_one_and_odd_shapes_repeat(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    for shape in ((1,), (1, 1), (3, 17), (1, 31)):
        repeated(kernel, torch.randn(shape, device=device))


def test_a_decision_from_other_settings_is_not_repeated() -> None:
    calls = RepeatedCalls()
    x = torch.randn(3)
    stale = CallDecision("interpret", tessera.Config(), x.device, (-1, None))  # a stamp no setting has
    calls.note((x,), stale)
    calls.note((x,), stale)
    assert calls.memo.recent  # the check was built
    assert calls.decide((x,)) is None and not calls.memo.recent


def test_the_settings_stamp_follows_the_environment_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESSERA_MODE", raising=False)
    first = settings.stamp("mode")
    assert settings.stamp("mode") == first
    monkeypatch.setenv("TESSERA_MODE", "eager")
    assert settings.stamp("mode") != first
    monkeypatch.delenv("TESSERA_MODE")
    assert settings.stamp("mode") == first
    with settings.override(log=frozenset()):
        assert settings.stamp("mode") != first
    assert settings.stamp("mode") != first  # leaving moves it too: a decision made inside is not repeated


def test_keyword_and_constexpr_calls_still_decide_each_time(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(5, device=device)
    for _ in range(4):
        torch.testing.assert_close(kernel(x=x), x * 2)
    assert not kernel.config_choices.calls.memo.recent
