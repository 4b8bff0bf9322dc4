"""A module's kernels as units of analysis, for the language server's incremental analysis.

A unit is a group of pallas_call sites analysed together: the blocks (`blocks.Block`) holding its
sites, their kernels and wrapper functions (its *own* blocks), and, transitively, the blocks that
bind the module-level names those blocks read: helpers, constants, imports (its *closure*). Sites
whose closures share a block other than plain imports are one unit: a planner that looks at one
site may look at the others (a kernel shared by two calls, a shared helper). The unit's findings
and the fixes offered for them are what a full analysis gives for its lines.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.core.model import Finding, FixSafety, KernelSite
from pallas_fix.engine import CheckResult, applicable
from pallas_fix.frontends.lsp.incremental.blocks import Block, block_at

Key = tuple[int, int]  # a finding's (1-based line, 0-based column)
# The codemod a fix offered for a finding runs, its safety, the checks it writes (a guarded fix), and
# what the source says of its speed on TPU ("" or core.speed.Pipelined.note(): a lift of a call
# already pipelined).
Offer = tuple[str, FixSafety, tuple[str, ...], str]


@dataclass
class Unit:
    own: frozenset[int]
    closure: frozenset[int]
    names: frozenset[str]  # every identifier of the closure blocks
    sensitive: frozenset[str]  # names the closure binds outside import blocks: code using them may change the result
    findings: list[Finding] = field(default_factory=list)
    offers: dict[Key, Offer] = field(default_factory=dict)
    result: Optional[CheckResult] = None  # an analysis of the unit on this version's tree, once made


def offers_of(result: CheckResult, findings: list[Finding], allow_unsafe: bool) -> dict[Key, Offer]:
    """The fixes the server offers: a finding's, when `fix_source(..., only={key})` would apply a
    plan for it."""
    out: dict[Key, Offer] = {}
    for f in findings:
        if not (f.fixable and f.fix_safety is not None and f.fix_id):
            continue
        key = (f.span.line, f.span.column)
        plans = applicable(result.plans, allow_unsafe, only={key}) if f.fix_safety is FixSafety.SAFE or allow_unsafe else []
        if plans:
            out[key] = (f.fix_id, f.fix_safety, tuple(getattr(plans[0], "guards", ())),
                        plans[0].pipelined.note() if plans[0].pipelined is not None else "")
    return out


def site_blocks(ctx: ModuleContext, site: KernelSite, blocks: list[Block]) -> Optional[frozenset[int]]:
    """The blocks holding the site's call, kernel, wrapper and invocation; None when one is outside
    every block (then the map is unclear)."""
    nodes = [n for n in (site.call, site.kernel, site.enclosing, site.decorated, site.invocation) if n is not None]
    index = _top_index(ctx, blocks)
    if index is None:
        return None
    out = set()
    for node in nodes:
        b = index.get(id(_top_statement(ctx, node)))
        if b is None:
            return None
        out.add(b)
    return frozenset(out)


def block_of(ctx: ModuleContext, node: cst.CSTNode, blocks: list[Block]) -> Optional[int]:
    """The block holding `node`; None when the map is unclear."""
    index = _top_index(ctx, blocks)
    return index.get(id(_top_statement(ctx, node))) if index is not None else None


def _top_index(ctx: ModuleContext, blocks: list[Block]) -> Optional[dict[int, int]]:
    """id(top-level statement) -> its block. LibCST's top-level statements are the blocks one for
    one (statements sharing a line are one LibCST line and one block); None when the counts
    disagree. Found by counting, not by positions, which would generate code."""
    found = _TOP_INDEX.get(ctx)
    if found is None or found[0] is not blocks:
        body = ctx.module.body
        table = {id(stmt): i for i, stmt in enumerate(body)} if len(body) == sum(1 for b in blocks if b.statements) else None
        found = _TOP_INDEX[ctx] = (blocks, table)
    return found[1]


_TOP_INDEX: "weakref.WeakKeyDictionary[ModuleContext, tuple[list[Block], Optional[dict[int, int]]]]" = weakref.WeakKeyDictionary()


def _top_statement(ctx: ModuleContext, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    top = node
    for anc in ctx.ancestors(node):
        if anc is ctx.module:
            return top
        top = anc
    return None


def binders(blocks: list[Block]) -> dict[str, list[int]]:
    """name -> the blocks binding it at module level."""
    out: dict[str, list[int]] = {}
    for i, b in enumerate(blocks):
        for name in b.bound:
            out.setdefault(name, []).append(i)
    return out


def closure(own: frozenset[int], blocks: list[Block], bound_by: dict[str, list[int]]) -> frozenset[int]:
    seen, todo = set(own), list(own)
    while todo:
        for name in blocks[todo.pop()].mentioned:
            for j in bound_by.get(name, ()):
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
    return frozenset(seen)


def shared(closure_blocks: frozenset[int], blocks: list[Block]) -> frozenset[int]:
    """The blocks through which two units would interact: all but plain imports."""
    return frozenset(b for b in closure_blocks if not blocks[b].only_imports)


def group_sites(ctx: ModuleContext, sites: list[KernelSite], blocks: list[Block]) -> Optional[list[tuple[list[KernelSite], Unit]]]:
    """The sites grouped into units (sites, unit without findings); None when unclear."""
    bound_by = binders(blocks)
    if "*" in bound_by:  # a star import binds names nobody can list
        return None
    groups: list[tuple[list[KernelSite], frozenset[int], frozenset[int], frozenset[int]]] = []
    for site in sites:
        own = site_blocks(ctx, site, blocks)
        if own is None:
            return None
        members, reach = [site], closure(own, blocks, bound_by)
        common = shared(reach, blocks)
        for other in [g for g in groups if g[3] & common]:
            groups.remove(other)
            members = other[0] + members
            own, reach, common = own | other[1], reach | other[2], common | other[3]
        groups.append((members, own, reach, common))
    return [(members, _unit(own, reach, blocks)) for members, own, reach, _ in groups]


def _unit(own: frozenset[int], reach: frozenset[int], blocks: list[Block]) -> Unit:
    names = frozenset(n for b in reach for n in blocks[b].mentioned)
    sensitive = frozenset(n for b in reach if not blocks[b].only_imports for n in blocks[b].bound)
    return Unit(own, reach, names, sensitive)


def assign_findings(units: list[Unit], findings: list[Finding], blocks: list[Block]) -> bool:
    """File each finding under the unit whose closure holds it (units share only import blocks);
    False when one has none."""
    owner: dict[int, Unit] = {b: u for u in units for b in shared(u.closure, blocks)}
    for f in findings:
        b = block_at(blocks, f.span.line)
        unit = owner.get(b) if b is not None else None
        if unit is None or block_at(blocks, f.span.end_line) != b:
            return False
        unit.findings.append(f)
    return True
