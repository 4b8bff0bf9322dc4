"""What the language server knows about one version of one document, and the edits it offers.

Everything here runs on the server's analysis thread and is independent of pygls: a `Snapshot`
is built from a text, a path and a `Config`; diagnostics, quick-fix edits, the fix-all edit,
suppression edits and hover text are derived from it. Nothing imports or runs the user's code.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from lsprotocol import types

from pallas_fix.core.config import Config
from pallas_fix.engine import CheckResult, SourceError, analyze_source, applicable, apply_plan, fix_source
from pallas_fix.core.model import Finding, FixSafety
from pallas_fix.output.common import finding_notes, rule_url
from pallas_fix.rules.registry import RULES, describe
from pallas_fix.frontends.lsp.incremental import reanalysis as incremental
from pallas_fix.frontends.lsp.incremental.reanalysis import UnitMap
from pallas_fix.frontends.lsp.text import Edit, content, minimal_edits, split_lines, suppression_edit, to_units, units

log = logging.getLogger(__name__)

SOURCE = "pallas-fix"
SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
}

Key = tuple[int, int]  # a finding's (1-based line, 0-based column): what fix_source's `only` takes


@dataclass
class FixInfo:
    """The fix offered for one finding. `edits` is None until computed."""

    codemod: str
    safety: FixSafety
    guards: tuple[str, ...] = ()  # the checks a guarded fix adds to the wrapper (rewrite.guards.shape_guards)
    note: str = ""  # what the source says of the fix's speed on TPU (core.speed), or ""
    edits: Optional[list[Edit]] = None
    failed: Optional[str] = None  # why computing the edits failed; the fix is then not offered

    @property
    def safe(self) -> bool:
        return self.safety is FixSafety.SAFE


@dataclass
class Snapshot:
    uri: str
    path: str
    version: Optional[int]
    text: str
    config: Config
    encoding: str = "utf-16"
    lines: list[str] = field(default_factory=list)
    analysis: Optional[CheckResult] = None  # the full analysis, when this version had one
    units: Optional[UnitMap] = None  # the kernels as units of analysis, for the next version's
    findings: list[Finding] = field(default_factory=list)
    syntax_error: Optional[SourceError] = None
    internal_error: Optional[str] = None
    fixes: dict[Key, FixInfo] = field(default_factory=dict)  # fixable findings whose fix is offered
    plan_texts: dict[int, object] = field(default_factory=dict)  # id(plan) -> new text | exception
    fix_all: Optional[list[Edit]] = None
    fix_all_done: bool = False

    @property
    def allow_unsafe(self) -> bool:
        return self.config.unsafe_fixes

    @property
    def analysed(self) -> bool:
        return self.analysis is not None or self.units is not None

    @property
    def pending_fixes(self) -> bool:
        return any(f.edits is None and f.failed is None for f in self.fixes.values())


def key_of(f: Finding) -> Key:
    return (f.span.line, f.span.column)


def analyse(
    uri: str, path: str, version: Optional[int], text: str, config: Config, encoding: str = "utf-16", previous: Optional[Snapshot] = None
) -> Snapshot:
    """The snapshot of `text`; with `previous` (the last version's), only the kernels the edit
    touched are analysed again (see `incremental`), with the same findings a full analysis gives."""
    snap = Snapshot(uri, path, version, text, config, encoding, split_lines(text))
    try:
        _run_analysis(snap, previous.units if previous is not None else None)
    except SourceError as exc:
        snap.syntax_error = exc
    except RecursionError:
        snap.internal_error = "the file nests too deeply to analyse"
    except Exception as exc:  # an analysis bug must cost the user diagnostics, never the server
        log.exception("analysis failed for %s", path)
        snap.internal_error = f"{type(exc).__name__}: {exc}"
    return snap


def _incremental(snap: Snapshot, previous: UnitMap):
    """`incremental.update`; (None, None), for a full analysis, when it fails on a bug."""
    try:
        return incremental.update(previous, snap.text, snap.path, snap.config, snap.allow_unsafe)
    except SourceError:
        raise
    except Exception:  # the full analysis then gives the diagnostics, or reports its own failure
        log.exception("incremental analysis failed for %s; analysing the whole file", snap.path)
        return None, None


def _run_analysis(snap: Snapshot, previous: Optional[UnitMap]) -> None:
    analysis, snap.units = _incremental(snap, previous) if previous else (None, None)
    if analysis is None and snap.units is None:
        analysis = analyze_source(snap.text, snap.path, snap.config)
        snap.units = incremental.map_of(analysis, snap.allow_unsafe)
    snap.analysis = analysis
    if snap.units is not None:
        snap.findings = snap.units.findings()
        offers = snap.units.offers()
    else:
        assert analysis is not None
        snap.findings = list(analysis.findings)
        offers = incremental.offers_of(analysis, snap.findings, snap.allow_unsafe)
    for f in snap.findings:  # in the findings' order: the order their edits are computed in
        offer = offers.get(key_of(f))
        if offer is not None:
            snap.fixes[key_of(f)] = FixInfo(*offer)


# -- diagnostics -----------------------------------------------------------------------------------
def _position(snap: Snapshot, line: int, column: int) -> types.Position:
    """1-based line, 0-based code-point column -> protocol position."""
    index = max(0, line - 1)
    if index >= len(snap.lines):
        if not snap.lines:
            return types.Position(0, 0)
        index = len(snap.lines) - 1
        column = len(content(snap.lines[index]))
    return types.Position(index, to_units(snap.lines[index], column, snap.encoding))


def finding_range(snap: Snapshot, f: Finding) -> types.Range:
    return types.Range(_position(snap, f.span.line, f.span.column), _position(snap, f.span.end_line, f.span.end_column))


def _message(f: Finding) -> str:
    return "\n".join([f.message] + finding_notes(f))


def diagnostic(snap: Snapshot, f: Finding) -> types.Diagnostic:
    fix = snap.fixes.get(key_of(f))
    data: dict = {"line": f.span.line, "column": f.span.column, "version": snap.version, "fix": None}
    if fix is not None and fix.failed is None:
        data["fix"] = {
            "codemod": fix.codemod,
            "safety": fix.safety.value,
            "title": quick_fix_title(f, fix),
            "edits": None if fix.edits is None else [e.to_json() for e in fix.edits],
        }
    elif f.fixable and f.fix_safety is FixSafety.UNSAFE:
        data["unsafeFix"] = "an unsafe fix exists: enable unsafeFixes (or unsafe-fixes in [tool.pallas-fix]) to be offered it"
    if f.refusal and not f.fixable:
        data["refusal"] = f.refusal
    return types.Diagnostic(
        range=finding_range(snap, f),
        message=_message(f),
        severity=SEVERITY.get(f.severity, types.DiagnosticSeverity.Hint),
        code=f.code,
        code_description=types.CodeDescription(href=rule_url(f.code)),
        source=SOURCE,
        data=data,
    )


def diagnostics(snap: Snapshot) -> list[types.Diagnostic]:
    if snap.syntax_error is not None:
        err = snap.syntax_error
        start = _position(snap, err.line, err.column)
        line = snap.lines[start.line] if start.line < len(snap.lines) else ""
        end_char = units(content(line), snap.encoding)
        end = types.Position(start.line, max(end_char, start.character))
        return [
            types.Diagnostic(
                range=types.Range(start, end),
                message=f"pallas-fix cannot analyse this file: {err.reason}",
                severity=types.DiagnosticSeverity.Error,
                source=SOURCE,
                data={"syntaxError": True, "version": snap.version},
            )
        ]
    return [diagnostic(snap, f) for f in snap.findings]


# -- fixes -----------------------------------------------------------------------------------------
def quick_fix_title(f: Finding, fix: FixInfo) -> str:
    """A guarded fix (never safe, so never preferred) names the checks it adds to the wrapper; a lift
    of a call already pipelined says what the source tells of its speed."""
    note = f" ({fix.note})" if fix.note else ""
    if fix.guards:
        checks = ", ".join(f"`if {g}: raise`" for g in fix.guards)
        return f"Fix {f.code}: {fix.codemod} (unsafe; adds {checks})" + note
    return f"Fix {f.code}: {fix.codemod}" + ("" if fix.safe else " (unsafe)") + note


def _plan_for(analysis: CheckResult, key: Key, allow_unsafe: bool):
    """The plan `fix_source(..., only={key})` applies: the first enabled plan covering the finding."""
    return next(iter(applicable(analysis.plans, allow_unsafe, only={key})), None)


def _rewrite(snap: Snapshot, key: Key) -> Optional[str]:
    """The text after the one fix `fix_source(text, path, config, only={key})` applies.

    That is fix_source's first round, on the snapshot's own analysis: the first applicable plan
    covering the finding, through the engine's `apply_plan` (fix_source re-analyses afterwards
    only to list what remains). Plans shared by several findings are
    rewritten once. None, with `failed` set on the fix, when the codemod fails.
    """
    fix = snap.fixes[key]
    analysis = snap.units.result_at(key[0]) if snap.units is not None else snap.analysis
    if analysis is None or analysis.ctx is None:
        fix.failed = "no analysis holds this finding"
        return None
    plan = _plan_for(analysis, key, snap.allow_unsafe)
    if plan is None:
        fix.failed = "no plan covers this finding"
        return None
    result = snap.plan_texts.get(id(plan))
    if result is None:
        try:
            result = apply_plan(analysis.ctx.module, plan)
        except Exception as exc:  # a codemod bug: offer nothing rather than a broken file
            log.warning("fix %s for %s:%s failed: %s", fix.codemod, snap.path, key, exc)
            result = exc
        snap.plan_texts[id(plan)] = result
    if isinstance(result, Exception):
        fix.failed = f"{type(result).__name__}: {result}"
        return None
    return result


def fill_fix_edits(snap: Snapshot, stale: Callable[[], bool], budget_s: float = 0.5) -> bool:
    """Compute the edits of the offered fixes for the diagnostics' `data`, for at most `budget_s`
    (the caller publishes between rounds). False when stopped early: stale or out of time."""
    if not snap.analysed:
        return True
    started = time.perf_counter()
    for key, fix in snap.fixes.items():
        if fix.edits is not None or fix.failed is not None:
            continue
        if stale() or time.perf_counter() - started > budget_s:
            return False
        new_text = _rewrite(snap, key)
        if new_text is not None:
            fix.edits = minimal_edits(snap.text, new_text, snap.encoding)
    return True


def quick_fix_edits(snap: Snapshot, key: Key) -> Optional[list[Edit]]:
    """The edits of one finding's fix (computed now when the diagnostics did not carry them)."""
    fix = snap.fixes.get(key)
    if fix is None or fix.failed is not None:
        return None
    if fix.edits is None:
        new_text = _rewrite(snap, key)
        if new_text is None:
            return None
        fix.edits = minimal_edits(snap.text, new_text, snap.encoding)
    return fix.edits or None


def fix_all_edits(snap: Snapshot) -> Optional[list[Edit]]:
    """Every safe fix, as `pallas-fix --apply` would apply it (without verification)."""
    if snap.fix_all_done:
        return snap.fix_all
    snap.fix_all_done = True
    if not snap.analysed or not any(f.safe for f in snap.fixes.values()):
        return None
    result = fix_source(snap.text, snap.path, snap.config, unsafe=False)
    if result.error is not None:
        log.warning("fix-all failed for %s: %s", snap.path, result.error)
        return None
    if result.changed:
        snap.fix_all = minimal_edits(snap.text, result.source, snap.encoding)
    return snap.fix_all


def ignore_edit(snap: Snapshot, f: Finding) -> Optional[Edit]:
    return suppression_edit(snap.text, f.span.line, f.span.end_line, f.code, snap.encoding)


# -- hover -----------------------------------------------------------------------------------------
def findings_at(snap: Snapshot, start: types.Position, end: Optional[types.Position] = None) -> list[Finding]:
    """Findings whose range meets [start, end] (a point when end is None), in protocol units."""
    end = end or start
    lo, hi = (start.line, start.character), (end.line, end.character)
    out = []
    for f in snap.findings:
        r = finding_range(snap, f)
        if (r.end.line, r.end.character) >= lo and (r.start.line, r.start.character) <= hi:
            out.append(f)
    return out


def hover_text(f: Finding, fix: Optional[FixInfo], markdown: bool) -> str:
    rule = RULES.get(f.code)
    doc = describe(f.code) if rule else f.code
    status = (
        f"fix: {fix.codemod} ({fix.safety.value})" + (f"; {fix.note}" if fix.note else "")
        if fix is not None
        else (f"no fix: {f.refusal}" if f.refusal else ("fix available with unsafe fixes enabled" if f.fixable else "no fix"))
    )
    if not markdown:
        return f"{f.code}: {f.message}\nstart comes from {f.provenance}\n{status}\n\n{doc}"
    link = rule_url(f.code)
    return (
        f"**{f.code}** {f.message}\n\n"
        + (f"start comes from {f.provenance}\n\n" if f.provenance else "")
        + f"{status}\n\n```text\n{doc}```\n\n[{f.code} documentation]({link})"
    )
