"""Re-analyse only the kernels an edit touched: the language server's incremental analysis.

After a full analysis the server keeps a `UnitMap`: the module's blocks (`blocks.py`) and its
units (`units.py`) with their findings. For the next version of the text, blocks are compared by
text from both ends; what lies between is what the edit touched. A unit is re-analysed when the
edit touched its closure, binds a name the unit reads, or uses a name the unit defines (a new
caller of its kernel changes what the planners may do); the others keep their findings, moved by
their blocks' line delta. The whole module is re-analysed instead when the map cannot be trusted:
GPU interpret mode (its rules look at the whole module), a star import, units the edit merged,
and every case the map does not cover. A kept unit whose messages name a line outside it
("line N" of another block) is analysed again too.
Only the blocks the edit touched are parsed again (`splice.py`); the rest of the tree is the last
version's.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.discovery.discovery import discover
from pallas_fix.analysis.result import analyze_sites, parse_error
from pallas_fix.core.config import Config
from pallas_fix.core.model import Finding, KernelSite, Span
from pallas_fix.engine import CheckResult, check
from pallas_fix.frontends.lsp.incremental.blocks import Block, block_at, split_blocks
from pallas_fix.frontends.lsp.incremental.splice import spliced_parse
from pallas_fix.frontends.lsp.incremental.units import (
    Key, Offer, Unit, assign_findings, block_of, group_sites, offers_of, shared, site_blocks,
)
from pallas_fix.rules.gpu_interpret.policy import needs_whole_module

_LINE_REF = re.compile(r"\b(lines?\s+)(\d+)")
_FILE_PLACE = re.compile(r":\d+:\d+")


@dataclass
class UnitMap:
    text: str
    path: str
    config: Config
    module: cst.Module
    blocks: list[Block]
    units: list[Unit]
    ctx: Optional[ModuleContext] = None
    sites: Optional[list[KernelSite]] = None
    # The last indexed version's context: `module` holds some of its statements (see splice.py),
    # whose part of the index the next context copies.
    base: Optional[ModuleContext] = None

    def findings(self) -> list[Finding]:
        out = [f for u in self.units for f in u.findings]
        out.sort(key=lambda f: (f.span.line, f.span.column, f.code))  # as the engine orders them
        return out

    def offers(self) -> dict[Key, Offer]:
        return {k: v for u in self.units for k, v in u.offers.items()}

    def context(self) -> ModuleContext:
        if self.ctx is None:
            self.ctx = ModuleContext(self.text, self.path, self.module, reuse=self.base)
            self.base = None
        return self.ctx

    def all_sites(self) -> list[KernelSite]:
        if self.sites is None:
            self.sites = discover(self.context(), self.config.backend)
        return self.sites

    def result_at(self, line: int) -> Optional[CheckResult]:
        """An analysis holding the plans of the unit at `line` on this version's tree (made now
        for a unit whose findings were carried over from the last version)."""
        b = block_at(self.blocks, line)
        unit = next((u for u in self.units if b in shared(u.closure, self.blocks)), None)
        if unit is None:
            return None
        if unit.result is None:
            ctx = self.context()
            unit.result = check_sites(self, [s for s in self.all_sites() if _within(site_blocks(ctx, s, self.blocks), unit.own)])
        return unit.result


def _within(own: Optional[frozenset[int]], blocks: frozenset[int]) -> bool:
    return own is not None and own <= blocks


def eligible(text: str, config: Config) -> bool:
    return "pallas_call" in text and not needs_whole_module(text, config)


def check_sites(m: UnitMap, sites: list[KernelSite]) -> CheckResult:
    """The engine's check of the analysis restricted to `sites` (`analysis.result.analyze_sites`)."""
    return check(analyze_sites(m.context(), m.config, sites))


def full(text: str, path: str, config: Config, module: cst.Module, allow_unsafe: bool,
         reuse: Optional[ModuleContext] = None) -> tuple[CheckResult, Optional[UnitMap]]:
    """The full analysis of an already parsed text, and its unit map when one can be made
    (`reuse`: see `ModuleContext`)."""
    ctx = ModuleContext(text, path, module, reuse=reuse)
    m = UnitMap(text, path, config, module, [], [], ctx, list(discover(ctx, config.backend)))
    result = check_sites(m, m.sites or [])
    return result, map_of(result, allow_unsafe)


def map_of(result: CheckResult, allow_unsafe: bool) -> Optional[UnitMap]:
    """The unit map of a full analysis; None when incremental analysis cannot follow the file."""
    ctx = result.ctx
    # A reduced tree (`analysis.discovery.reachable`) is not the file's: units planned on it could not be rewritten.
    if ctx is None or ctx.reduced or not eligible(result.source, result.config):
        return None
    blocks = split_blocks(result.source)
    if blocks is None:
        return None
    grouped = group_sites(ctx, list(result.sites), blocks)
    if grouped is None:
        return None
    units = [u for _, u in grouped]
    if not assign_findings(units, result.findings, blocks):
        return None
    offers = offers_of(result, result.findings, allow_unsafe)
    for u in units:
        u.result = result
        u.offers = {k: offers[k] for f in u.findings for k in [(f.span.line, f.span.column)] if k in offers}
    return UnitMap(result.source, result.path, result.config, ctx.module, blocks, units, ctx, list(result.sites))


def update(prev: UnitMap, text: str, path: str, config: Config, allow_unsafe: bool) -> tuple[Optional[CheckResult], Optional[UnitMap]]:
    """Analyse `text`, the next version of `prev.text`: (None, its unit map) when only the
    edited units were analysed again, (the full analysis, its map or None) otherwise, and
    (None, None) when it was not even parsed (the caller analyses it as a new file). Raises
    SourceError when it does not parse."""
    if path != prev.path or config != prev.config or not eligible(text, config):
        return None, None
    blocks = split_blocks(text)
    if blocks is None:
        return None, None
    old = prev.blocks
    p, s = _common_ends(old, blocks)
    shift = len(blocks) - len(old)
    for i in [*range(p), *range(len(old) - s, len(old))]:
        _carry(old[i], blocks[i if i < p else i + shift])
    touched = [old[i] for i in range(p, len(old) - s)] + [blocks[j] for j in range(p, len(blocks) - s)]
    bound = frozenset().union(*(b.bound for b in touched))
    used = frozenset().union(*(b.mentioned for b in touched))
    module = spliced_parse(prev.module, old, blocks, p, s)
    base = (prev.ctx or prev.base) if module is not None else None
    if module is None:
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            raise parse_error(path, exc, text) from exc
    if "*" in bound or bound & _orphan_names(prev):
        return full(text, path, config, module, allow_unsafe, base)
    changed = set(range(p, len(old) - s))
    kept = []
    for u in prev.units:
        if u.closure & changed or u.names & bound or u.sensitive & _through_bindings(used, blocks):
            continue
        moved = _moved(u, old, blocks, lambda i: i if i < p else i + shift)
        if moved is not None:
            kept.append(moved)
    m = UnitMap(text, path, config, module, blocks, kept, base=base)
    if len(kept) < len(prev.units) or any("pallas_call" in blocks[j].text for j in range(p, len(blocks) - s)):
        if not _analyse_rest(m, allow_unsafe):
            return full(text, path, config, module, allow_unsafe, m.ctx or base)
    return None, m


def _through_bindings(used: frozenset[str], blocks: list[Block]) -> frozenset[str]:
    """`used`, and the names the module-level bindings of those names read, transitively: an
    edit reading `_probe` where `_probe = kernel` uses the kernel too."""
    reach, frontier = set(used), set(used)
    while frontier:
        frontier = {n for b in blocks if b.bound & frontier for n in b.mentioned} - reach
        reach |= frontier
    return frozenset(reach)


def _common_ends(old: list[Block], new: list[Block]) -> tuple[int, int]:
    """How many blocks the two versions share at the start, and then at the end."""
    n = min(len(old), len(new))
    p = 0
    while p < n and old[p].text == new[p].text:
        p += 1
    s = 0
    while s < n - p and old[-1 - s].text == new[-1 - s].text:
        s += 1
    return p, s


def _carry(old: Block, new: Block) -> None:
    """Same text, same names: keep what was already worked out."""
    new._bound, new._mentioned = old._bound, old._mentioned


def _orphan_names(m: UnitMap) -> frozenset[str]:
    """Names read by blocks that mention pallas_call without holding a unit: binding one may
    make a pallas_call appear (an import of `pl`, an alias)."""
    owned = frozenset().union(*(u.own for u in m.units))
    return frozenset().union(*(b.mentioned for i, b in enumerate(m.blocks) if i not in owned and "pallas_call" in b.text))


def _moved(u: Unit, old: list[Block], new: list[Block], to_new) -> Optional[Unit]:
    """The unit in the new version's lines, the lines its messages name moved with it; None when
    a message names a line outside the unit or in a form not followed."""
    where = {b: to_new(b) for b in u.closure}
    delta = {b: new[j].start - old[b].start for b, j in where.items()}

    def moved_line(line: int) -> int:
        b = block_at(old, line)
        if b not in delta:
            raise _Unmovable
        return line + delta[b]  # type: ignore[index]

    try:
        findings = [_moved_finding(f, moved_line) for f in u.findings] if any(delta.values()) else list(u.findings)
    except _Unmovable:
        return None
    offers = {}
    for f, g in zip(u.findings, findings):
        offer = u.offers.get((f.span.line, f.span.column))
        if offer is not None:
            offers[(g.span.line, g.span.column)] = offer
    return Unit(frozenset(where[b] for b in u.own), frozenset(where.values()), u.names, u.sensitive, findings, offers)


class _Unmovable(Exception):
    pass


def _moved_finding(f: Finding, moved_line) -> Finding:
    span = Span(moved_line(f.span.line), f.span.column, moved_line(f.span.end_line), f.span.end_column)
    texts = {name: _moved_text(getattr(f, name), moved_line) for name in ("message", "refusal", "provenance")}
    return dataclasses.replace(f, span=span, anchor=None, plan=None, **texts)


def _moved_text(text: Optional[str], moved_line) -> Optional[str]:
    """`text` with the line numbers it names ("on line 12", outside `code`) moved."""
    if not text:
        return text
    parts = text.split("`")
    if len(parts) % 2 == 0 or any(_FILE_PLACE.search(p) for p in parts):
        raise _Unmovable  # unbalanced quotes, or a path:line:column: not a form followed here
    for i in range(0, len(parts), 2):
        parts[i] = _LINE_REF.sub(lambda m: m.group(1) + str(moved_line(int(m.group(2)))), parts[i])
    return "`".join(parts)


def _analyse_rest(m: UnitMap, allow_unsafe: bool) -> bool:
    """Analyse the sites no kept unit holds, as new units of `m`; False when they reach into a
    kept unit (the map is then unclear)."""
    ctx, blocks = m.context(), m.blocks
    kept_own = frozenset().union(*(u.own for u in m.units))
    kept_shared = frozenset().union(*(shared(u.closure, blocks) for u in m.units))
    rest = []
    # A site whose call sits in a kept unit's block is that unit's: its text is unchanged, and a
    # change of what its names mean would have dropped the unit.
    sites = m.sites if m.sites is not None else discover(
        ctx, m.config.backend, lambda call: block_of(ctx, call, blocks) not in kept_own)
    for site in sites:
        own = site_blocks(ctx, site, blocks)
        if own is None or (own & kept_own and not own <= kept_own):
            return False
        if not own <= kept_own:
            rest.append(site)
    grouped = group_sites(ctx, rest, blocks)
    if grouped is None or any(shared(u.closure, blocks) & kept_shared for _, u in grouped):
        return False
    result = check_sites(m, rest)
    units = [u for _, u in grouped]
    if not assign_findings(units, result.findings, blocks):
        return False
    offers = offers_of(result, result.findings, allow_unsafe)
    for u in units:
        u.result = result
        u.offers = {k: offers[k] for f in u.findings for k in [(f.span.line, f.span.column)] if k in offers}
    m.units = m.units + units
    return True
