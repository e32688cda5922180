"""@triton.jit functions for tests/test_inline_triton.py, imported there once Tessera has loaded
Triton in the test's mode (importing Triton fixes its interpreter mode for the process)."""
from __future__ import annotations

import triton
import triton.language as tl

SCALE = tl.constexpr(3.0)


@triton.jit
def double(v):  # noqa: ANN001, ANN201 (Triton code)
    return v * 2


@triton.jit
def scaled_twice(v):  # noqa: ANN001, ANN201 (Triton code)
    return double(v) * SCALE
