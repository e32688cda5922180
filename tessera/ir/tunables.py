"""What a trace learned about each tunable block size, for the autotuner and the backends' heuristics."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TunableDim:
    """One entry of `Config.block_sizes`, with what the trace learned about it.

    `extent` is this call's size of the dimension the block tiles (the largest one seen when a
    slot tiles several loops); `min_block` is the smallest legal block (16 for a dimension that
    feeds `tl.dot`); `role` is 'launch' (tiles program ids), 'loop' (an inner device loop) or
    'reduction' (a reduced dimension) or 'split' (a tile of an inner loop whose iterations the
    backend may spread over several programs: `split_programs`, ir/loop_split.py).
    """

    index: int
    extent: int
    min_block: int
    role: str
