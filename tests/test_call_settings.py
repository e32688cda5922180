"""Settings read at call time (`settings.CALL_SETTINGS`: TESSERA_MODE, TESSERA_CHECK_INDICES,
TESSERA_AUTOTUNE_EFFORT) changed between two calls of a kernel take effect on the next call.

Each test first repeats a call until the memos serve it (the repeated-call check, the Config
choice, the launch memo), then flips one setting, through the environment or an override, and
checks the next call follows it, and that flipping back does too.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import pytest
import torch

import tessera
import tessera.language as hl
from examples.add import add
from tessera import exc, settings
from tessera.config import Config
from tessera.runtime import tuning


@tessera.kernel(config=tessera.Config(block_sizes=[4]))
def gather(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(indices.size(0), device=x.device)
    for tile in hl.tile(indices.size(0)):
        out[tile] = x[indices[tile]]
    return out


@contextlib.contextmanager
def flipped(how: str, monkeypatch: pytest.MonkeyPatch, name: str, value: Any) -> Iterator[None]:
    """Setting `name` set to `value` inside the block, through the environment or an override."""
    if how == "override":
        with settings.override(**{name: value}):
            yield
        return
    variable = {"check_indices": "TESSERA_CHECK_INDICES", "autotune_effort": "TESSERA_AUTOTUNE_EFFORT"}[name]
    before = settings.get(name)
    monkeypatch.setenv(variable, "1" if value is True else str(value))
    try:
        yield
    finally:
        if before is None or before is False:
            monkeypatch.delenv(variable)
        else:
            monkeypatch.setenv(variable, "1" if before is True else str(before))


def served(kernel: tessera.Kernel, x: torch.Tensor, indices: torch.Tensor, times: int = 4) -> torch.Tensor:
    """Call `kernel(x, indices)` until the memos serve it; the last answer."""
    for _ in range(times):
        out = kernel(x, indices)
    return out


@pytest.fixture
def fresh_gather(monkeypatch: pytest.MonkeyPatch) -> Iterator[tessera.Kernel]:
    monkeypatch.delenv("TESSERA_CHECK_INDICES", raising=False)
    gather.reset()
    yield gather
    gather.reset()


@pytest.mark.parametrize("how", ["environment", "override"])
def test_index_checks_switched_on_after_repeats_catch_the_next_out_of_range_gather(
        how: str, fresh_gather: tessera.Kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    x, bad = torch.arange(10.0), torch.tensor([1, 3, 12, 2, 5])
    with settings.override(mode="interpret"):
        unchecked = served(fresh_gather, x, bad)  # unchecked: the out-of-range lane reads 0
        assert fresh_gather.config_choices.calls.memo.recent, "the repeats must be served by the memo"
        with flipped(how, monkeypatch, "check_indices", True):
            with pytest.raises(exc.IndexingError, match="TESSERA_CHECK_INDICES"):
                fresh_gather(x, bad)
        torch.testing.assert_close(served(fresh_gather, x, bad), unchecked)  # switched off: unchecked again


@pytest.mark.parametrize("how", ["environment", "override"])
def test_index_checks_switched_off_after_checked_repeats_run_unchecked(
        how: str, fresh_gather: tessera.Kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    x, good, bad = torch.arange(10.0), torch.tensor([1, 3, 9, 2, 5]), torch.tensor([1, 3, 12, 2, 5])
    with settings.override(mode="interpret"):
        with flipped(how, monkeypatch, "check_indices", True):
            torch.testing.assert_close(served(fresh_gather, x, good), x[good])
            with pytest.raises(exc.IndexingError):
                fresh_gather(x, bad)
        assert fresh_gather(x, bad)[2] == 0  # unchecked: no error
        with flipped(how, monkeypatch, "check_indices", True):
            with pytest.raises(exc.IndexingError):  # and checked once more
                fresh_gather(x, bad)


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("size", [1, 5, 9])
def test_in_range_gathers_stay_right_while_index_checks_flip(mode: str, size: int, fresh_gather: tessera.Kernel,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.arange(10.0)
    indices = torch.arange(size) * 7 % 10
    with settings.override(mode=mode):
        for how in ("environment", "override", "environment"):
            torch.testing.assert_close(served(fresh_gather, x, indices), x[indices])
            with flipped(how, monkeypatch, "check_indices", True):
                torch.testing.assert_close(served(fresh_gather, x, indices), x[indices])


def test_eager_mode_follows_the_index_checks_from_one_call_to_the_next(
        fresh_gather: tessera.Kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    # out-of-range lanes read 0 in every mode; TESSERA_CHECK_INDICES=1 makes eager raise at once
    x, bad = torch.arange(10.0), torch.tensor([1, 3, 12, 2, 5])
    read = torch.where(bad < 10, x[bad.clamp(max=9)], 0.0)
    with settings.override(mode="eager"):
        for checked in (False, True, False):
            with flipped("environment", monkeypatch, "check_indices", True) if checked else contextlib.nullcontext():
                if checked:
                    with pytest.raises(exc.IndexingError):
                        fresh_gather(x, bad)
                else:
                    torch.testing.assert_close(fresh_gather(x, bad), read)


class _Tuner:
    """A tuner whose every tuning run answers one Config (distinct from the heuristic's)."""

    TUNED = Config(block_sizes=[2, 64])

    def __init__(self) -> None:
        self.runs: list[str] = []

    def kernel_defined(self, kernel: Any) -> None:
        pass

    def stored_config(self, kernel: Any, bound: Any, at_least: str) -> Config | None:
        return None

    def tune(self, kernel: Any, bound: Any, effort: str) -> Config:
        self.runs.append(effort)
        return self.TUNED


@pytest.fixture
def fake_tuner() -> Iterator[_Tuner]:
    tuner = _Tuner()
    previous = tuning.install_tuner(tuner)
    try:
        yield tuner
    finally:
        tuning.install_tuner(previous)


def compiled_blocks(kernel: tessera.Kernel, x: torch.Tensor) -> list[int]:
    """The block sizes a compiled call of `kernel(x, x)` would run with, asked twice (the second
    answer comes from the memo)."""
    first = tuning.config_for_call(kernel, "compiled", (x, x), {})
    assert tuning.config_for_call(kernel, "compiled", (x, x), {}) is first
    return list(first["block_sizes"])


@pytest.mark.parametrize("how", ["environment", "override"])
def test_an_effort_change_between_calls_chooses_the_config_again(how: str, fake_tuner: _Tuner,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tessera.kernel(add.fn)
    x = torch.randn(8, 96)
    heuristic = list(tuning.heuristic_for(kernel.bind(x, x))["block_sizes"])
    tuned = list(_Tuner.TUNED["block_sizes"])
    assert heuristic != tuned
    monkeypatch.setenv("TESSERA_AUTOTUNE_EFFORT", "none")  # an override would hide the environment's flips
    monkeypatch.delenv("TESSERA_CHECK_INDICES", raising=False)
    assert compiled_blocks(kernel, x) == heuristic
    with flipped(how, monkeypatch, "autotune_effort", "quick"):
        assert compiled_blocks(kernel, x) == tuned
        assert fake_tuner.runs == ["quick"]
        with flipped(how, monkeypatch, "check_indices", True):  # a checked run does not tune
            assert compiled_blocks(kernel, x) == heuristic
        assert compiled_blocks(kernel, x) == tuned
    assert compiled_blocks(kernel, x) == heuristic


def test_an_unrelated_settings_change_keeps_the_chosen_configs(fake_tuner: _Tuner) -> None:
    kernel = tessera.kernel(add.fn)
    x = torch.randn(8, 96)
    with settings.override(autotune_effort="quick"):
        assert compiled_blocks(kernel, x) == list(_Tuner.TUNED["block_sizes"])
        with settings.override(log=frozenset()), settings.override(mode="interpret"):
            compiled_blocks(kernel, x)
    assert fake_tuner.runs == ["quick"]  # tuned once: the stamp moved, the effort did not


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("how", ["environment", "override"])
def test_an_effort_change_between_calls_is_decided_afresh_and_keeps_the_answer(
        mode: str, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    choices: list[str] = []
    real_choose = tuning._choose

    def counted(kernel: Any, chosen_mode: str, bound: Any) -> Config | None:
        choices.append(chosen_mode)
        return real_choose(kernel, chosen_mode, bound)

    monkeypatch.setattr(tuning, "_choose", counted)
    kernel = tessera.kernel(add.fn)
    x = torch.randn(3, 17)
    monkeypatch.setenv("TESSERA_AUTOTUNE_EFFORT", "none")  # an override would hide the environment's flips
    with settings.override(mode=mode):
        for _ in range(4):
            torch.testing.assert_close(kernel(x, x), x + x)
        before = len(choices)
        with flipped(how, monkeypatch, "autotune_effort", "full"):
            for _ in range(4):
                torch.testing.assert_close(kernel(x, x), x + x)
        for _ in range(4):
            torch.testing.assert_close(kernel(x, x), x + x)
    # interpret mode chooses once per effort (eager mode never): interpret never tunes, so the
    # Config is the heuristic's each time
    assert choices == ([] if mode == "eager" else ["interpret"] * 3)
    assert before == (0 if mode == "eager" else 1)


@pytest.mark.parametrize("name", settings.CALL_SETTINGS)
def test_the_call_stamp_follows_each_call_setting(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    variable = {"mode": "TESSERA_MODE", "check_indices": "TESSERA_CHECK_INDICES",
                "autotune_effort": "TESSERA_AUTOTUNE_EFFORT", "host_replay": "TESSERA_HOST_REPLAY"}[name]
    monkeypatch.delenv(variable, raising=False)
    first = settings.call_stamp()
    assert first == settings.stamp(*settings.CALL_SETTINGS) == settings.call_stamp()
    monkeypatch.setenv(variable, "eager" if name == "mode" else "1")
    assert settings.call_stamp() != first
    assert settings.call_stamp() == settings.stamp(*settings.CALL_SETTINGS)
    monkeypatch.delenv(variable)
    assert settings.call_stamp() == first
    with settings.override(**{name: None}):
        assert settings.call_stamp() != first


def test_a_setting_read_under_one_stamp_is_read_again_under_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CHECK_INDICES", "1")
    checked = settings.call_stamp()
    assert settings.get_under(checked, "check_indices") is True
    monkeypatch.delenv("TESSERA_CHECK_INDICES")
    unchecked = settings.call_stamp()
    assert settings.get_under(unchecked, "check_indices") is False
    assert settings.get_under(unchecked, "check_indices") is False
