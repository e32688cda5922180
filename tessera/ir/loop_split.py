"""Which inner tile loop of a launch may be spread over several programs (`split_programs`).

A top-level `hl.grid(groups)` whose body runs a tile loop over data-dependent sizes (the grouped
GEMM of seed 000) launches one program per group: each program walks every tile of its group
alone, so a few large groups leave most of the GPU idle. When the iterations of that loop are
independent, a backend may instead give each group several programs that take every S-th tile.
This module decides when that is the same computation:

- the loop is in the launch body itself (not nested), tiles every dim it loops over, and carries
  no value out (nothing after it depends on its order);
- nothing outside it stores (those stores would run once per program instead of once);
- every store in it either is atomic or indexes each of the loop's tiles (distinct iterations
  write distinct elements), and no tensor it stores into is read anywhere in the launch (no
  iteration sees another's writes).

>>> splittable_loop(ir)            # doctest: +SKIP
<loop node v12>
"""
from __future__ import annotations

from typing import Iterator

from tessera.ir.graph import AccessKind, Block, KernelIR, Node, Op, walk


def splittable_loop(ir: KernelIR) -> Node | None:
    """The launch body's one LOOP node whose iterations may run in any order on any program, or None."""
    if ir.row_loop is not None or ir.row_schedule is not None:
        return None
    loops = [node for node in ir.body.nodes if node.op is Op.LOOP]
    if len(loops) != 1:
        return None
    loop = loops[0]
    dims = loop.params["loops"]
    if loop.params["carried"] or loop.params["outputs"] or not dims:
        return None
    if any(dim.axis is None for dim in dims):
        return None
    variables = {dim.variable for dim in dims}
    if any(_free_symbols(bound) & variables for dim in dims for bound in (dim.begin, dim.end)):
        return None  # a triangular nest: one dim's range depends on another's tile
    inside = set(walk(Block((loop,))))
    if any(node.op is Op.STORE for node in walk(ir.body) if node not in inside):
        return None
    names = {dim.axis.name for dim in dims}
    stored: set[str] = set()
    for node in inside:
        if node.op is not Op.STORE:
            continue
        stored.add(node.params["tensor"].name)
        if node.params.get("atomic"):
            continue
        indexed = {access.axis.name for access in node.params["accesses"] if access.kind is AccessKind.AXIS}
        indexed |= {_shifted_axis(access.value, inside, variables) for access in node.params["accesses"]
                    if access.kind is AccessKind.VALUE}
        if not names <= indexed:
            return None
    if any(node.params["tensor"].name in stored for node in walk(ir.body) if node.op is Op.LOAD):
        return None
    return loop


def split_axis_names(ir: KernelIR) -> frozenset[str]:
    """The names of the axes tiled by the launch's splittable loop (empty when there is none)."""
    loop = splittable_loop(ir)
    if loop is None:
        return frozenset()
    return frozenset(dim.axis.name for dim in loop.params["loops"])


def memory_nodes(loop: Node) -> Iterator[Node]:
    """The loads and stores inside `loop`, nested loops included."""
    return (node for node in walk(Block((loop,))) if node.op in (Op.LOAD, Op.STORE))


def _shifted_axis(value: Node | None, inside: set[Node], variables: set) -> str | None:
    """The axis whose indices `value` is, shifted by one value the same for every lane and every
    iteration of the loop (`start + tile.index`, Helion's grouped_gemm rows, `start` loaded
    before the loop: distinct tiles, distinct rows), else None. A shift computed inside the loop
    may follow its tiles (`tile.index - tile.begin`: every tile the same rows), so it is not one."""
    while value is not None and value.op is Op.CAST and value.dtype is not None and not value.dtype.is_floating_point:
        value = value.inputs[0]
    if value is None:
        return None
    if value.op is Op.TILE_INDEX:
        return value.params["axis"].name
    if value.op is Op.ELEMENTWISE and value.params.get("fn") in ("add", "sub") and len(value.inputs) == 2:
        index, shift = value.inputs
        if value.params["fn"] == "add" and not _loop_invariant(shift, inside, variables):
            index, shift = shift, index
        if _loop_invariant(shift, inside, variables) and isinstance(index, Node):
            return _shifted_axis(index, inside, variables)
    return None


def _loop_invariant(value: object, inside: set[Node], variables: set) -> bool:
    """A value the same in every lane and every iteration of the loop: a constant, a host
    expression without the loop's variables, or a node of no dims computed before the loop."""
    if isinstance(value, Node):
        return len(value.shape) == 0 and value not in inside
    return not (_free_symbols(value) & variables)


def _free_symbols(value: object) -> set:
    return set(getattr(value, "free_symbols", ()))


__all__ = ["memory_nodes", "split_axis_names", "splittable_loop"]
