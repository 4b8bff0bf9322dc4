"""Analyse a source text into findings, and apply fixes until the module is stable.

This is the one entry point the CLI, the language server and the LibCST codemods share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from .config import Config
from .context import ModuleContext
from .detection import Detection, detect
from .discovery import discover
from .fixes import FixPlan, Outcome, Refusal, planners, use_key
from .model import Finding, FixSafety, IndexUse, KernelSite, Span
from .rules import classify
from .windows import window_of

_SUPPRESS = re.compile(r"#\s*pallas-fix:\s*ignore(?:\[([A-Za-z0-9_,\s]+)\])?")
MAX_ROUNDS = 32


class SourceError(Exception):
    """The source cannot be analysed (syntax error): the message names the place."""

    def __init__(self, path: str, message: str, line: int = 1, column: int = 0) -> None:
        super().__init__(f"{path}:{line}:{column + 1}: {message}")
        self.path = path
        self.line = line
        self.column = column
        self.reason = message


@dataclass
class Analysis:
    path: str
    source: str
    config: Config
    ctx: Optional[ModuleContext] = None
    sites: list[KernelSite] = field(default_factory=list)
    detection: Optional[Detection] = None
    findings: list[Finding] = field(default_factory=list)
    plans: list[FixPlan] = field(default_factory=list)  # fixable, enabled, not suppressed
    uses_by_finding: dict[int, IndexUse] = field(default_factory=dict)
    suppressed: int = 0

    @property
    def uses(self) -> list[IndexUse]:
        return self.detection.uses if self.detection else []


def mentions_pallas(source: str) -> bool:
    return "pallas_call" in source


def parse_error(path: str, exc: cst.ParserSyntaxError) -> SourceError:
    return SourceError(path, f"syntax error: {exc.message}", exc.raw_line, exc.raw_column)


def analyze_source(source: str, path: str = "<string>", config: Optional[Config] = None) -> Analysis:
    config = config or Config()
    analysis = Analysis(path=path, source=source, config=config)
    if not mentions_pallas(source):
        return analysis
    try:
        ctx = ModuleContext(source, path)
    except cst.ParserSyntaxError as exc:
        raise parse_error(path, exc) from exc
    analysis.ctx = ctx
    analysis.sites = discover(ctx, config.backend)
    analysis.detection = detect(ctx, analysis.sites)
    _build_findings(analysis)
    return analysis


def _suppressed(lines: list[str], span: Span, code: str) -> bool:
    for n in range(span.line, min(span.end_line, span.line + 20) + 1):
        if n - 1 >= len(lines):
            break
        m = _SUPPRESS.search(lines[n - 1])
        if m is None:
            continue
        if m.group(1) is None:
            return True
        codes = {c.strip().upper() for c in m.group(1).split(",")}
        if code in codes or any(code.startswith(c) for c in codes if c):
            return True
    return False


def _build_findings(analysis: Analysis) -> None:
    ctx = analysis.ctx
    assert ctx is not None and analysis.detection is not None
    outcomes: dict[tuple[int, int], list[Outcome]] = {}
    classified = [(use, window_of(use)) for use in analysis.uses]
    ruled = [(use, window, *classify(use, window)) for use, window in classified]
    present = {rule.code for _, _, rule, _ in ruled if analysis.config.enabled(rule.code)}
    for planner in planners():
        codes = getattr(planner, "codes", frozenset())
        # Planners cost a rewrite's worth of work; skip those with nothing to fix here.
        if codes and all(c.startswith("PF1") for c in codes) and not (codes & present):
            continue
        for key, outcome in planner(analysis).items():
            outcomes.setdefault(key, []).append(outcome)
    if analysis.config.target == "gpu-interpret":
        from .kernel_rules import screen_for_gpu_interpret

        outcomes = screen_for_gpu_interpret(analysis, outcomes)
    lines = analysis.source.splitlines()
    plans: dict[int, FixPlan] = {}
    for use, window, rule, message in ruled:
        if not analysis.config.enabled(rule.code):
            continue
        if _suppressed(lines, use.span, rule.code):
            analysis.suppressed += 1
            continue
        plan, refusal = _pick(outcomes.get(use_key(use), []), rule.code)
        if plan is None and refusal is None:
            refusal = _default_refusal(rule.code, window)
        finding = Finding(
            code=rule.code,
            message=message,
            path=analysis.path,
            span=use.span,
            provenance=use.provenance.description,
            origin=use.provenance.origin.value,
            fixable=plan is not None,
            fix_safety=plan.safety if plan else None,
            refusal=refusal,
            severity=rule.severity,
            fix_id=plan.codemod if plan else None,
            kernel=use.kernel_site.kernel_name if use.kernel_site else None,
        )
        analysis.uses_by_finding[id(finding)] = use
        analysis.findings.append(finding)
        if plan is not None:
            plans[id(plan)] = plan
    analysis.plans = list(plans.values())
    for extra in _kernel_findings(analysis, lines):
        analysis.findings.append(extra)
    analysis.findings.sort(key=lambda f: (f.span.line, f.span.column, f.code))


def _kernel_findings(analysis: Analysis, lines: list[str]) -> list[Finding]:
    """Kernel-level rules (PF2xx) live in their own module; they see the whole analysis."""
    from .kernel_rules import kernel_findings

    out = []
    for f in kernel_findings(analysis):
        if analysis.config.enabled(f.code) and not _suppressed(lines, f.span, f.code):
            out.append(f)
    return out


def _pick(outcomes: list[Outcome], code: str) -> tuple[Optional[FixPlan], Optional[str]]:
    plans = [o for o in outcomes if isinstance(o, FixPlan)]
    if plans:
        return plans[0], None
    refusals = [o for o in outcomes if isinstance(o, Refusal)]
    if refusals:
        return None, "; ".join(f"{r.reason}" for r in refusals)
    return None, None


def _default_refusal(code: str, window) -> str:
    return {
        "PF105": "the start depends on data loaded inside the kernel; no BlockSpec can express it",
        "PF106": f"no BlockSpec can express this window ({window.reason})",
        "PF108": "integer-array indices have no BlockSpec form",
        "PF109": "pallas-fix cannot tell where this traced start comes from",
    }.get(code, "no automatic fix applies here")


# -- fixing -----------------------------------------------------------------------------------------
@dataclass
class FixResult:
    path: str
    original: str
    source: str
    applied: list[str] = field(default_factory=list)  # descriptions
    remaining: list[Finding] = field(default_factory=list)
    rounds: int = 0
    error: Optional[str] = None

    @property
    def changed(self) -> bool:
        return self.source != self.original


def fix_source(
    source: str,
    path: str = "<string>",
    config: Optional[Config] = None,
    *,
    unsafe: Optional[bool] = None,
    only: Optional[set[tuple[int, int]]] = None,
    codemods: Optional[set[str]] = None,
    analysis: Optional[Analysis] = None,
) -> FixResult:
    """Apply every enabled fix, one kernel at a time, re-analysing after each round.

    `only` limits the first round to findings at these (line, column) positions (the editor's
    quick fix for one finding). `analysis`, when the caller already analysed `source` with the
    same config, stands in for the first round's analysis.
    """
    config = config or Config()
    allow_unsafe = config.unsafe_fixes if unsafe is None else unsafe
    result = FixResult(path=path, original=source, source=source)
    current = source
    first = analysis if analysis is not None and analysis.source == source and analysis.config == config else None
    for round_no in range(MAX_ROUNDS):
        analysis = first if round_no == 0 and first is not None else analyze_source(current, path, config)
        plans = [p for p in analysis.plans if allow_unsafe or p.safety is FixSafety.SAFE]
        if codemods is not None:
            plans = [p for p in plans if p.codemod in codemods]
        if only is not None:
            if round_no > 0:
                plans = []
            else:
                plans = [p for p in plans if any((u.span.line, u.span.column) in only for u in p.uses)]
        if not plans:
            result.remaining = analysis.findings
            break
        chosen = _non_overlapping(plans)
        module = analysis.ctx.module  # type: ignore[union-attr]
        try:
            for plan in chosen:
                module = plan.rewrite(module)
            new_source = module.code
            cst.parse_module(new_source)
        except Exception as exc:  # a codemod bug must never produce a broken file
            result.error = f"rewrite failed ({type(exc).__name__}: {exc}); file left unchanged"
            result.source = source
            return result
        result.rounds = round_no + 1
        result.applied.extend(p.description for p in chosen)
        if new_source == current:
            result.remaining = analysis.findings
            break
        current = new_source
    else:
        result.remaining = analyze_source(current, path, config).findings
    result.source = current
    return result


def _non_overlapping(plans: list[FixPlan]) -> list[FixPlan]:
    """One plan per round: plans address nodes of the analysed tree by identity, and a rewrite
    rebuilds the nodes around what it changes, so the next plan must see a fresh analysis."""
    return plans[:1]
