"""What one call of a kernel launches under a given Config, recorded without running it.

`kernel.bind(args)` returns a `BoundKernel`; `bound.plan(config)` runs the kernel's host code
with a recording runner: every top-level tile loop is traced and compiled to Triton source as
usual, but instead of launching, a `LaunchRecord` is kept. The autotuner sends plans to worker
processes, which compile and time them there, so that a crashing candidate never takes the
user's process down.

Host code that reads results of an earlier launch (`out.item()` between two loops) sees
unwritten memory while recording; such kernels are tuned as a whole in-process instead.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tessera.config import Config
from tessera.ir.graph import short_dtype
from tessera.ir.tunables import TunableDim


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """One Triton launch: the generated module, its kernel function and the call arguments."""

    source_path: str
    function_name: str
    arguments: tuple[Any, ...]  # torch.Tensor | int | float, in the kernel's parameter order
    grid: tuple[int, ...]
    num_warps: int
    num_stages: int

    def __repr__(self) -> str:
        arguments = ", ".join(describe_value(argument) for argument in self.arguments)
        return (f"LaunchRecord({self.function_name}, grid={self.grid}, num_warps={self.num_warps}, "
                f"num_stages={self.num_stages}, arguments=({arguments}), source={self.source_path!r})")


@dataclasses.dataclass
class KernelPlan:
    """The launches of one kernel call under `config`, and its return value."""

    config: Config
    launches: list[LaunchRecord]
    result: Any  # what the kernel returned (tensors written by the launches)
    tunables: list[TunableDim]
    reads_results_on_host: bool = False
    launch_dims: tuple[int, ...] = ()  # per top-level tile loop (source order): dims it tiles
    # per top-level tile loop: length of the whole dimension `reduction_loops` may chunk, 0 if none
    reduction_extents: tuple[int, ...] = ()
    whole_rows: tuple[int, ...] = ()  # per launch, the length of its first whole row (0: none)

    whole_elements: int = 1  # the most elements any launch's programs hold along whole dims (x[tile, :])
    # per top-level tile loop: the block_sizes slots it uses, its generated source, its grid
    launch_tunables: tuple[tuple[int, ...], ...] = ()
    launch_sources: tuple[str, ...] = ()
    carried_rows: tuple[int, ...] = ()  # per launch: whole-row elements its inner loops carry
    score_tiles: tuple[int, ...] = ()  # per launch: products from zero per inner-loop iteration (compiler.py)
    split_reductions: tuple[bool, ...] = ()  # per launch: whether its K loop may be split (split_k)
    unit_dims: tuple[tuple[int, ...], ...] = ()  # per launch: its grid dims of step 1 (a batch index per program)
    user_tunables: tuple[tuple[str, Any], ...] = ()  # hl.register_tunable: (name, fragment), first use first
    pipelined_loads: tuple[tuple[Any, ...], ...] = ()  # per launch: per product loop, its LoadedTiles

    def __repr__(self) -> str:
        """One line per launch; tensors as dtype and shape, never their (maybe unwritten) contents."""
        lines = [f"KernelPlan({self.config!r}, {len(self.launches)} launch{'es' if len(self.launches) != 1 else ''}, "
                 f"result={describe_value(self.result)}"]
        lines += [f"  {launch!r}" for launch in self.launches]
        if self.tunables:
            lines.append(f"  tunables={self.tunables}")
        return "\n".join(lines) + ")"

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the launches touch, each once (by identity)."""
        seen: dict[int, torch.Tensor] = {}
        for launch in self.launches:
            for argument in launch.arguments:
                if isinstance(argument, torch.Tensor):
                    seen.setdefault(id(argument), argument)
        return list(seen.values())


def describe_value(value: Any) -> str:
    """A value as a plan shows it: a tensor as `f32[100, 37] cpu`, containers by their items.

    >>> describe_value((torch.zeros(2, 3), 4))
    '(f32[2, 3] cpu, 4)'
    """
    if isinstance(value, torch.Tensor):
        return f"{short_dtype(value.dtype)}[{', '.join(map(str, value.shape))}] {value.device}"
    if isinstance(value, (list, tuple)):
        items = ", ".join(describe_value(item) for item in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {describe_value(item)}" for key, item in value.items()) + "}"
    return repr(value)
