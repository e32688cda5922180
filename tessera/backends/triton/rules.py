"""The Triton backend's table: IR op name -> lowering rule. Op modules fill it.

A rule gets the emitter and the node and returns the Triton expression for the node's value
(or None for nodes that emit statements themselves).
"""
from __future__ import annotations

from typing import Any, Callable

TRITON_RULES: dict[str, Callable[..., Any]] = {}


def register_triton(*ops: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(rule: Callable[..., Any]) -> Callable[..., Any]:
        for op in ops:
            TRITON_RULES[op] = rule
        return rule
    return decorate
