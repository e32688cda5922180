"""How program ids map to the tiles of a launch: the Config's loop order, L2 grouping and
pid_type, turned into the kernel's first lines and the host's grid.

    flat        one program id, decomposed into one index per dim (first dim of the order fastest)
    xyz         tl.program_id(0), (1), (2): one grid axis per dim (at most 3 dims)
    persistent_interleaved / persistent_blocked
                as many programs as the GPU has SMs; each loops over tiles (interleaved: every
                P-th tile; blocked: a contiguous run of tiles)

L2 grouping (`l2_grouping=G > 1`) reorders the first two dims of the order so that G rows of
tiles are visited together: consecutive programs then share operand tiles in L2 (matmul).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy

from tessera import exc
from tessera.backends.triton.printer import cdiv_text, print_expr
from tessera.ir.graph import GridDim

PID_TYPES = ("flat", "xyz", "persistent_interleaved", "persistent_blocked")


@dataclasses.dataclass(frozen=True)
class ProgramMapping:
    """The Config's choices for one launch."""

    order: tuple[int, ...]   # dims, fastest-varying first
    l2_grouping: int = 1
    pid_type: str = "flat"

    @property
    def persistent(self) -> bool:
        return self.pid_type.startswith("persistent")


def mapping_for(config: Any, launch_index: int, ndim: int, location: Any = None) -> ProgramMapping:
    """Read loop_orders[launch_index], l2_grouping and pid_type from the Config, validated."""
    orders = config.get("loop_orders")
    order: tuple[int, ...] = tuple(range(ndim))
    if orders is not None and launch_index < len(orders) and orders[launch_index] is not None:
        order = tuple(int(d) for d in orders[launch_index])
        if sorted(order) != list(range(ndim)):
            raise exc.ConfigError(f"loop_orders[{launch_index}]={list(order)} is not a permutation of this "
                                  f"loop's {ndim} dims", location=location,
                                  hint=f"e.g. loop_orders=[{list(reversed(range(ndim)))}]")
    pid_type = config.get("pid_type", "flat")
    if pid_type not in PID_TYPES:
        raise exc.ConfigError(f"unknown pid_type {pid_type!r}", location=location, hint=f"use one of {', '.join(PID_TYPES)}")
    if pid_type == "xyz" and ndim > 3:
        pid_type = "flat"  # the hardware grid has three axes
    groupings = config.get("l2_groupings") or []  # Helion's form: one entry per top-level tile loop
    per_loop = groupings[launch_index] if launch_index < len(groupings) else None
    grouping = int(config.get("l2_grouping") or per_loop or 1)
    return ProgramMapping(order, grouping if ndim >= 2 else 1, pid_type)


def program_count_exprs(grid_dims: tuple[GridDim, ...]) -> list[sympy.Expr]:
    """Programs per dim: ceil((end - begin) / step), never negative."""
    return [sympy.Max(sympy.ceiling((dim.end - dim.begin) / dim.step), 0) for dim in grid_dims]


def host_grid(mapping: ProgramMapping, counts: list[sympy.Expr], programs_cap: int) -> list[sympy.Expr]:
    """The launch grid (up to three sizes) for these per-dim program counts."""
    if not counts:
        return [sympy.Integer(1)]
    if mapping.pid_type == "xyz":
        return [counts[d] for d in mapping.order]
    total = sympy.Mul(*counts)
    if mapping.persistent:
        return [sympy.Min(total, programs_cap)]
    return [total]


def split_grid(grid: list[sympy.Expr], split_programs: int, mapping: ProgramMapping,
               programs_cap: int) -> list[sympy.Expr]:
    """The grid of a launch with a split loop: flat, each program split into
    max(1, split_programs // programs); persistent, one program per SM whatever the grid."""
    if mapping.persistent:
        return [sympy.Integer(programs_cap)]
    programs = grid[0]
    return [programs * sympy.Max(1, sympy.floor(sympy.Integer(split_programs) / sympy.Max(programs, 1)))]


def emit_program_ids(lines: list[str], mapping: ProgramMapping, grid_dims: tuple[GridDim, ...],
                     int64: bool = False, split: bool = False) -> int:
    """Append the lines defining pid_<d> and offset_<d>; returns the indent the body needs.
    `split` (flat): consecutive programs share one pid, told apart by `split_id` in
    `[0, split_count)` (see `split_grid`); (persistent_interleaved): every program visits every
    pid, and the split loop deals its tiles out by a running count `split_seen` (split_loops.py)."""
    counts = [cdiv_text(print_expr(dim.end - dim.begin), str(dim.step)) for dim in grid_dims]
    indent = 1

    def line(text: str) -> None:
        lines.append("    " * indent + text)

    if split and mapping.persistent:
        # every program visits every grid point and takes every P-th tile of all their loops' tiles
        line("split_count = tl.num_programs(0)")
        line("split_seen = (tl.program_id(0) * 0).to(tl.int64)  # tiles of the grid points visited so far (int64: loaded sizes are)")
    elif split:
        total = " * ".join(f"tl.maximum({count}, 0)" for count in counts) or "1"
        line(f"split_count = tl.num_programs(0) // tl.maximum({total}, 1)")
        line("split_id = tl.program_id(0) % split_count")
    if not grid_dims:
        return indent
    if mapping.pid_type == "xyz":
        for axis, dim in enumerate(mapping.order):
            line(f"pid_{dim} = tl.program_id({axis})")
    else:
        if mapping.persistent:
            total = " * ".join(f"count_{d}" for d in range(len(counts)))
            for d, count in enumerate(counts):
                line(f"count_{d} = {count}")
            line(f"total_tiles = {total}")
            if split:
                line("for virtual_pid in tl.range(0, total_tiles):")
            elif mapping.pid_type == "persistent_interleaved":
                line("for virtual_pid in tl.range(tl.program_id(0), total_tiles, tl.num_programs(0)):")
            else:
                line(f"tiles_per_program = {cdiv_text('total_tiles', 'tl.num_programs(0)')}")
                line("first_tile = tl.program_id(0) * tiles_per_program")
                line("for virtual_pid in tl.range(first_tile, tl.minimum(first_tile + tiles_per_program, total_tiles)):")
            indent += 1
            line("pid = virtual_pid")
        else:
            line("pid = tl.program_id(0) // split_count" if split else "pid = tl.program_id(0)")
        order = list(mapping.order)
        if mapping.l2_grouping > 1 and len(order) >= 2:
            first, second = order[0], order[1]
            group = mapping.l2_grouping
            line(f"rows = {counts[first]}")
            line(f"cols = {counts[second]}")
            line(f"in_group = {group} * cols")
            line("plane_pid = pid % (rows * cols)  # position within the first two dims' tiles")
            line(f"group_first = plane_pid // in_group * {group}")
            line(f"group_rows = tl.minimum(rows - group_first, {group})")
            line(f"pid_{first} = group_first + (plane_pid % in_group) % group_rows")
            line(f"pid_{second} = (plane_pid % in_group) // group_rows")
            line("pid = pid // (rows * cols)")
            order = order[2:]
        for position, dim in enumerate(order):
            if position + 1 < len(order):
                line(f"pid_{dim} = pid % {counts[dim]}")
                line(f"pid = pid // {counts[dim]}")
            else:
                line(f"pid_{dim} = pid")
    for dim, grid_dim in enumerate(grid_dims):
        pid = f"pid_{dim}.to(tl.int64)" if int64 else f"pid_{dim}"
        line(f"offset_{dim} = {print_expr(grid_dim.begin)} + {pid} * {grid_dim.step}")
    return indent
