"""Tessera example gallery: one kernel per module, each checked against PyTorch.

Run one with `python -m examples.softmax`, or all of them with `python -m examples.gallery`.
"""

from __future__ import annotations

# Module names, in the order the gallery shows them.
EXAMPLE_MODULES: tuple[str, ...] = (
    "add",
    "softmax",
    "rms_norm",
    "layer_norm",
    "welford",
    "cross_entropy",
    "embedding",
    "jagged_mean",
    "jagged_softmax",
    "segment_sum",
    "matmul",
    "split_k_matmul",
    "bmm",
    "grouped_gemm",
    "moe",
    "attention",
)
