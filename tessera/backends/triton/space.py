"""The Triton backend's tuning space: which Config keys it honours and which values each may take.

From a call's `KernelFacts` (one `TunableDim` per block size: its extent, smallest legal block,
role; the launches' dims; the whole-row reductions) it builds one `Axis` per tunable choice. The
numbers are Triton's and the H100's: warps per program, pipelining stages, the widest block worth
compiling, how many elements a program can hold in registers.

>>> space = config_space(KernelFacts(tunables=(TunableDim(0, 4096, 1, "launch"),)))
>>> space.axis("block_sizes[0]").choices[:3]
(1, 2, 4)

Keys the backend does not honour yet stay out of the space: widen `ENABLED_KEYS` (the one place)
when the backend learns a key.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any, Iterable

from tessera.backends.triton import heuristics
from tessera.backends.config_space import Axis, ConfigSpace, KernelFacts, next_power_of_two, powers_of_two
from tessera.config import INDEXING_STRATEGIES, _is_power_of_two
from tessera.ir.tunables import TunableDim

ENABLED_KEYS: frozenset[str] = frozenset({"block_sizes", "num_warps", "num_stages", "loop_orders", "l2_grouping",
                                          "pid_type", "indexing", "reduction_loops", "split_programs", "split_k"})
"""Config keys the backend honours; the others are generated only once listed here."""

ENABLED_PID_TYPES: tuple[str, ...] = ("flat", "xyz", "persistent_blocked", "persistent_interleaved")
"""Program-id mappings the backend implements."""

NUM_WARPS_CHOICES = (1, 2, 4, 8, 16)
NUM_STAGES_CHOICES = (1, 2, 3, 4, 5)
L2_GROUPING_CHOICES = (1, 2, 4, 8, 16, 32, 64)
MAX_BLOCK = 1 << 14          # a larger block per dim never pays off and costs compile time
MAX_BLOCK_ELEMENTS = 1 << 16  # per launch: elements a program holds in registers at once
MIN_REDUCTION_CHUNK = 32
# programs in all for a launch whose inner loop's tiles programs share (0: one program per grid point)
SPLIT_PROGRAMS_CHOICES = (0, 256, 512, 1024, 2048, 4096, 8192)
# programs per output tile of a launch whose K loop may be split (ir/split_reduction.py); not only
# powers of two: 3 or 6 programs per tile may fill waves of SMs that 2, 4 or 8 overshoot
SPLIT_K_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
SPLIT_MAX_BLOCK = 256  # a shared loop's tiles are output tiles: as wide as a launch's, whatever the extent guess


def config_space(facts: KernelFacts, enabled: Iterable[str] = ENABLED_KEYS) -> ConfigSpace:
    """The axes the facts imply, for the keys in `enabled`."""
    enabled = frozenset(enabled)
    axes: list[Axis] = []
    if "block_sizes" in enabled:
        axes += [_block_axis(dim) for dim in sorted(facts.tunables, key=lambda d: d.index)]
    if "reduction_loops" in enabled:
        axes += [_reduction_axis(i, extent) for i, extent in enumerate(facts.reduction_extents)]
    if "num_warps" in enabled:
        axes.append(Axis("num_warps", None, NUM_WARPS_CHOICES, 4, "warps per program", accepts=_warps_allowed))
    if "num_stages" in enabled:
        axes.append(Axis("num_stages", None, NUM_STAGES_CHOICES, 2, "pipelining stages", accepts=_stages_allowed))
    multi_dim = [i for i, dims in enumerate(facts.launch_dims) if dims >= 2]
    if "loop_orders" in enabled:
        for i in multi_dim:
            orders = tuple(list(p) for p in itertools.permutations(range(facts.launch_dims[i])))
            axes.append(Axis("loop_orders", i, orders, list(range(facts.launch_dims[i])),
                             f"tile loop {i} with {facts.launch_dims[i]} dims", ordered=False))
    shares_2d_loop = sum(dim.role == "split" for dim in facts.tunables) >= 2
    if "l2_grouping" in enabled and (multi_dim or shares_2d_loop):
        axes.append(Axis("l2_grouping", None, L2_GROUPING_CHOICES, 1, "program-id grouping",
                         accepts=_power_of_two))
    if "pid_type" in enabled:
        axes.append(Axis("pid_type", None, ENABLED_PID_TYPES, "flat", "program-id mapping", ordered=False))
    if "split_programs" in enabled and any(dim.role == "split" for dim in facts.tunables):
        axes.append(Axis("split_programs", None, SPLIT_PROGRAMS_CHOICES, 0, "programs sharing an inner loop's tiles",
                         accepts=_split_allowed))
    if "split_k" in enabled and facts.split_reduction and facts.uses_dot:
        axes.append(Axis("split_k", None, SPLIT_K_CHOICES, 1, "programs per output tile, each summing a slice of K",
                         accepts=_split_k_allowed))
    if "indexing" in enabled:
        axes.append(Axis("indexing", None, INDEXING_STRATEGIES, "pointer", "memory access strategy",
                         ordered=False, accepts=_indexing_allowed))
    # every backend searches the user's own tunables (hl.register_tunable)
    axes += [Axis(name, None, fragment.choices(), fragment.default(), f"hl.register_tunable({name!r})",
                  ordered=fragment.ordered(), accepts=fragment.allows) for name, fragment in facts.user_tunables]
    return ConfigSpace(axes, facts, max_tile_elements=MAX_BLOCK_ELEMENTS,
                       fits_device=functools.partial(heuristics.config_fits_device, facts))


def _block_axis(dim: TunableDim) -> Axis:
    low = next_power_of_two(max(dim.min_block, 1))
    high = max(low, min(next_power_of_two(max(dim.extent, 1)), MAX_BLOCK))
    if dim.role == "split":
        high = max(high, SPLIT_MAX_BLOCK)
    why = (f"a {dim.role} dim of extent {dim.extent}"
           + (f" whose smallest legal block is {dim.min_block}" if dim.min_block > 1 else ""))
    # a user's block may be any power of two from the smallest legal one up to the cap: extents vary between calls
    return Axis("block_sizes", dim.index, powers_of_two(low, high), low, why,
                accepts=functools.partial(_block_allowed, low))


def _reduction_axis(position: int, extent: int) -> Axis:
    """Chunks from small to large, then None (one block: the largest "chunk" of all), so that
    the default None's neighbour is the largest chunk, not the smallest (a 32-wide chunk of a
    4096 row runs about 10x slower than one block: a wasted candidate)."""
    chunks = powers_of_two(MIN_REDUCTION_CHUNK, min(next_power_of_two(extent) // 2, MAX_BLOCK))
    return Axis("reduction_loops", position, chunks + (None,), None,
                f"a whole-row reduction of length {extent}", accepts=_chunk_allowed)


def _block_allowed(low: int, value: Any) -> bool:
    return isinstance(value, int) and _is_power_of_two(value) and low <= value <= MAX_BLOCK


def _split_allowed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _split_k_allowed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _warps_allowed(value: Any) -> bool:
    return value in (1, 2, 4, 8, 16, 32)


def _stages_allowed(value: Any) -> bool:
    return isinstance(value, int) and 1 <= value <= 8


def _chunk_allowed(value: Any) -> bool:
    return value is None or (isinstance(value, int) and _is_power_of_two(value))


def _power_of_two(value: Any) -> bool:
    return isinstance(value, int) and _is_power_of_two(value)


def _indexing_allowed(value: Any) -> bool:
    """One strategy for every access, or a list with one per access."""
    return all(v in INDEXING_STRATEGIES for v in ([value] if isinstance(value, str) else value))


def read_op_mix(facts: KernelFacts, sources: Iterable[str]) -> KernelFacts:
    """`facts` with `uses_dot` / `uses_reduction` read off the generated Triton sources.

    A dim whose smallest legal block is 16 feeds `tl.dot` too (its operands need 16 rows).
    """
    text = "\n".join(sources)
    uses_dot = "tl.dot(" in text or any(t.min_block >= 16 for t in facts.tunables)
    uses_reduction = any(f"tl.{name}(" in text for name in ("sum", "max", "min", "reduce", "argmax"))
    return dataclasses.replace(facts, uses_dot=uses_dot, uses_reduction=uses_reduction)


__all__ = ["ENABLED_KEYS", "ENABLED_PID_TYPES", "MAX_BLOCK", "MAX_BLOCK_ELEMENTS", "SPLIT_K_CHOICES", "config_space",
           "read_op_mix"]
