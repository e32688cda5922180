"""Which `Config.block_sizes` entry each `hl.tile` / `hl.register_block_size` call uses.

Entries are numbered in the order the kernel's *source* meets the calls, so that eager runs
(which may skip a loop whose extent is 0) and traces (which visit every loop once) agree.
A call whose number of dimensions is not visible in the source (`hl.tile(x.size())`) learns it
the first time it runs.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Any, Callable

from tessera.frontend.source import KernelSource
from tessera.language.tile import register_block_size, tile

Site = tuple[str, int, int]  # (file, line, col) of a call


@dataclasses.dataclass
class _SiteInfo:
    order: int
    count: int | None  # tunable dims; None until seen at run time


class BlockSlotTable:
    """Maps call sites to their first index in `Config.block_sizes`."""

    def __init__(self, sites: list[tuple[Site, int | None]]) -> None:
        self._sites: dict[Site, _SiteInfo] = {
            site: _SiteInfo(order, count) for order, (site, count) in enumerate(sites)}
        self._dynamic_order = len(sites)

    def first_slot(self, site: Site | None, count: int) -> int:
        """Index of the first block size for `count` dims tuned at `site`."""
        if site is None or site not in self._sites:
            # A call the source scan did not see (e.g. in a helper function): it goes after
            # every call the scan saw, in the order it first runs.
            key = site or ("<unknown>", self._dynamic_order, 0)
            self._sites[key] = _SiteInfo(self._dynamic_order, count)
            self._dynamic_order += 1
            site = key
        info = self._sites[site]
        if info.count is None:
            info.count = count
        return sum(other.count if other.count is not None else 1
                   for other in self._sites.values() if other.order < info.order)

    def copy(self) -> BlockSlotTable:
        """An independent table with the same sites; counts learned at run time stay per copy."""
        table = BlockSlotTable([])
        table._sites = {site: _SiteInfo(info.order, info.count) for site, info in self._sites.items()}
        table._dynamic_order = self._dynamic_order
        return table

    def known_count(self) -> int:
        """Number of block sizes the source declares (dims not visible in the source count 1)."""
        return sum(info.count if info.count is not None else 1 for info in self._sites.values())


def scan_block_slots(source: KernelSource, resolve: Callable[[ast.expr], Any]) -> BlockSlotTable:
    """Find tunable tile calls in source order. `resolve` maps a callee expression to its object."""
    sites: list[tuple[Site, int | None]] = []

    def is_registered(node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and resolve(node.func) is register_block_size

    # names holding a registered block size: a tile using one tunes nothing of its own
    registered = {target.id for node in ast.walk(source.tree) if isinstance(node, ast.Assign)
                  and is_registered(node.value) for target in node.targets if isinstance(target, ast.Name)}

    class _Visitor(ast.NodeVisitor):
        def visit_Call(self, node: ast.Call) -> None:
            # arguments run before the call itself
            self.generic_visit(node)
            target = resolve(node.func)
            if target is tile:
                sites.append((source.site_of(node), _tunable_dims(node, registered, is_registered)))
            elif target is register_block_size:
                sites.append((source.site_of(node), 1))

    _Visitor().visit(source.tree)
    return BlockSlotTable(sites)


def _tunable_dims(call: ast.Call, registered: set[str], is_registered: Callable[[ast.expr], bool]) -> int | None:
    """How many dims of an `hl.tile` call take a Config entry; None when only the run shows it."""
    block = next((kw.value for kw in call.keywords if kw.arg == "block_size"), None)
    if block is None and len(call.args) >= 3:
        block = call.args[2]
    ends = call.args[1] if len(call.args) >= 2 else (call.args[0] if call.args else None)
    if block is not None and not (isinstance(block, ast.Constant) and block.value is None):
        if isinstance(block, (ast.List, ast.Tuple)):
            per_dim = [_block_is_tuned(e, registered, is_registered) for e in block.elts]
            return None if None in per_dim else sum(per_dim)  # type: ignore[arg-type]
        tuned = _block_is_tuned(block, registered, is_registered)
        if tuned is None:
            return None
        # a fixed block size fixes every dim; `block_size=None` spelled out is handled above
        return 0
    if isinstance(ends, (ast.List, ast.Tuple)):
        return len(ends.elts)
    if ends is None:
        return 0
    # a Name or call: a plain int gives one dim; a list-valued one is learned at run time
    return None


def _block_is_tuned(block: ast.expr, registered: set[str], is_registered: Callable[[ast.expr], bool]) -> int | None:
    """1 for a `None` block size, 0 for a fixed one, None when it depends on a run-time value
    (a variable may hold None: `hl.tile(n, block_size=block)` with `block=None` is tuned)."""
    if isinstance(block, ast.Constant):
        return 1 if block.value is None else 0
    if isinstance(block, ast.Name):
        return 0 if block.id in registered else None
    if is_registered(block) or isinstance(block, (ast.BinOp, ast.UnaryOp)):
        return 0
    return None
