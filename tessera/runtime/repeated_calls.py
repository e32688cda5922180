"""Repeated calls: a kernel call whose arguments repeat an earlier call's exact facts repeats
its mode, Config and device without deciding them again.

Deciding them is a chain of small steps on every call: the constexpr and signature checks, the
arguments' device, the mode (kernel settings, TESSERA_MODE), then the Config's own exact-facts
memo (tuning.py). Each is a function of the arguments' exact facts (exact_facts.py: types,
dtypes, shapes, strides, alignment, devices, scalar values) and of state that is watched:

- the kernel's settings and Config choices: `Kernel.reset` and `ConfigChoices.set` / `clear`
  empty this memo with the Config memo;
- the call-time settings (`settings.CALL_SETTINGS`: TESSERA_MODE, TESSERA_CHECK_INDICES,
  TESSERA_AUTOTUNE_EFFORT) and `settings.override`: each decision holds `settings.call_stamp()`,
  compared on every repeat; a changed stamp forgets every decision (they were all made under the
  old one). The stamp is handed on to the launches, whose runner was chosen under it (compiled.py).

So for a call seen twice, a fast check of its arguments (fast_checks.py, one C++ call for all the
tensors) answers the whole chain. Only plain calls take part: positional arguments that are
plain tensors and scalars (`plain_call_device`), no `hl.constexpr` parameters, no backward rule,
not eager mode; anything else decides as before.

>>> decision = kernel.config_choices.calls.decide((x, y))      # doctest: +SKIP
>>> decision.mode, decision.config, decision.device
('interpret', Config(...), device(type='cpu'))
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from tessera import settings
from tessera.config import Config
from tessera.runtime.exact_facts import Memo, exact_facts
from tessera.runtime.fast_checks import facts_check


class CallDecision:
    """What a plain call of a kernel runs with, and the settings stamp it was decided under.

    `replay`: None until a repeat of it was recorded (host_replay.py), then the replay of calls
    with its facts, or False where they have none."""

    __slots__ = ("mode", "config", "device", "stamp", "replay")

    def __init__(self, mode: str, config: Config, device: torch.device, stamp: tuple[Any, ...]) -> None:
        self.mode = mode
        self.config = config
        self.device = device
        self.stamp = stamp
        self.replay: Callable[[tuple], Any] | None | bool = None

    def repeats(self, other: CallDecision) -> bool:
        """Whether `other` decided the same (the Config by identity: a chosen Config is kept)."""
        return (self.mode == other.mode and self.config is other.config and self.device == other.device
                and self.stamp == other.stamp)


_SITE = "call"  # one site: every plain call of the kernel is checked against the same decisions


class RepeatedCalls:
    """The decisions of a kernel's plain calls by the exact facts of their arguments."""

    def __init__(self) -> None:
        self.memo = Memo(capacity=256)

    def decide(self, args: tuple) -> CallDecision | None:
        """The decision of an earlier call whose arguments had these arguments' exact facts,
        made under the settings in force now; else None (the caller decides, then `note`s)."""
        entries = self.memo.recent.get(_SITE)
        if not entries:
            return None
        check, decision, _ = entries[0]  # the usual repeat: the most recent check (Memo.quick's first step)
        if check(args, None) is False:
            found = self.memo.quick(_SITE, args, None)
            if found is None:
                return None
            decision = found[0]
        if decision.stamp != settings.call_stamp():
            self.memo.clear()  # decided under other settings: all of them were
            return None
        return decision

    def note(self, args: tuple, decision: CallDecision) -> None:
        """Remember a plain call's decision; when it repeats one remembered for the same facts,
        build the fast check that lets `decide` answer the next repeat."""
        memo = self.memo
        if not memo.wanted():
            return
        facts = exact_facts(args, _SITE)
        if facts is None:
            return
        key = (*facts, decision.device)  # the facts leave devices to the fast check: the key holds it
        known = memo.lookup(key)
        if known is None or not known.repeats(decision):
            if known is not None:
                memo.clear()  # a check may still answer with the decision this replaces (rare)
            memo.remember(key, decision)
            return
        if memo.check_wanted(key):
            check = facts_check(args)
            if check is not None:
                memo.add_check(_SITE, check, known, key)

    def clear(self) -> None:
        self.memo.clear()
