"""Analyse, plan, apply: the one engine the CLI, notebooks, the language server and the LibCST
commands share.

`analyze_source` turns a text into findings, each carrying the plan that fixes it (or why none
does); `apply_plan` is the only place a plan turns into new text; `fix_source` applies plans one
per round, re-analysing after each, until the module is stable.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from pallas_fix import codemods as recipes
from pallas_fix.analysis.context import ModuleContext
from pallas_fix.analysis.result import Analysis, SourceError, analyze
from pallas_fix.analysis.windows import window_of
from pallas_fix.core.config import Config
from pallas_fix.core.directives import suppressed
from pallas_fix.core.model import Finding, FixSafety, IndexUse, KernelSite
from pallas_fix.core.plans import Anchor, FixAfter, FixPlan, Outcome, Refusal, use_key
from pallas_fix.rules.gpu_hazards import HAZARDS, trigger
from pallas_fix.rules.kernel import kernel_findings
from pallas_fix.rules.pf108_traced_integer_array_index import contiguous_window_hint
from pallas_fix.rewrite.dead_params import drop_dead_params
from pallas_fix.rewrite.loop_dependence import accumulates_in_place
from pallas_fix.rewrite.line_width import fit_width
from pallas_fix.rules.pf102_reduction_loop_slice import message as reduction_message
from pallas_fix.rules.registry import RULES, classify

__all__ = ["CheckResult", "FixResult", "SourceError", "analyze_source", "apply_plan", "fix_source", "plan_kernel", "planned_kernels"]

MAX_ROUNDS = 32

# Why an index has no fix when no planner spoke for it.
_NO_PLANNER = {
    "PF105": "the start depends on data loaded inside the kernel; no BlockSpec can express it",
    "PF106": "no BlockSpec can express this window ({reason})",
    "PF108": "integer-array indices have no BlockSpec form",
    "PF109": "pallas-fix cannot tell where this traced start comes from",
}


def _no_planner_reason(code: str, use: IndexUse, window_reason: Optional[str]) -> str:
    reason = _NO_PLANNER.get(code, "no automatic fix applies here").format(reason=window_reason)
    return reason + contiguous_window_hint(use) if code == "PF108" else reason


@dataclass(frozen=True)
class CheckResult:
    """An analysis and what the rules and planners made of it: findings (each with its plan, when
    it has one) and the plans in the order `fix_source` applies them."""

    analysis: Analysis
    findings: list[Finding] = field(default_factory=list)
    plans: list[FixPlan] = field(default_factory=list)  # fixable, enabled, not suppressed

    @property
    def path(self) -> str:
        return self.analysis.path

    @property
    def source(self) -> str:
        return self.analysis.source

    @property
    def config(self) -> Config:
        return self.analysis.config

    @property
    def ctx(self) -> Optional[ModuleContext]:
        return self.analysis.ctx

    @property
    def sites(self) -> tuple[KernelSite, ...]:
        return self.analysis.sites

    @property
    def uses(self) -> list[IndexUse]:
        return self.analysis.uses


def analyze_source(source: str, path: str = "<string>", config: Optional[Config] = None, *, reach: bool = False) -> CheckResult:
    """The findings of `source`. With `reach`, for a report: a large module is parsed only where
    its kernels reach (`analysis.reachable`), and analysed whole again when that finds a fix, so
    a result with plans always holds the whole tree the plans rewrite."""
    analysis = analyze(source, path, config, reach=reach)
    if analysis.ctx is None:
        return CheckResult(analysis)
    result = check(analysis)
    if not analysis.ctx.reduced or not any(f.plan is not None for f in result.findings):
        return result
    return check(analyze(source, path, config))


def check(analysis: Analysis) -> CheckResult:
    config = analysis.config
    lines = analysis.source.splitlines()
    ruled = [(use, window, *classify(use, window)) for use in analysis.uses for window in (window_of(use),)]
    present = {rule.code for _, _, rule, _ in ruled if config.enabled(rule.code)}
    if config.enabled("PF102") and any(rule.code == "PF101" for _, _, rule, _ in ruled):
        present |= {"PF101", "PF102"}  # a PF101 loop may turn out a reduction: both lifts decide (_as_reduction)
    outcomes = _outcomes(analysis, present)
    findings: list[Finding] = []
    for use, window, rule, message in ruled:
        rule, message = _as_reduction(analysis, use, rule, message, outcomes)
        finding = Finding(
            code=rule.code,
            message=message,
            path=analysis.path,
            span=use.span,
            provenance=use.provenance.description,
            origin=use.provenance.origin.value,
            fixable=False,
            refusal=_no_planner_reason(rule.code, use, window.reason),
            severity=rule.severity,
            kernel=use.kernel_site.kernel_name if use.kernel_site else None,
            anchor=use_key(use),
        )
        findings.append(finding)
    findings.extend(kernel_findings(analysis))
    kept = [_attach(f, outcomes) for f in findings if config.enabled(f.code) and not suppressed(lines, f.span, f.code)]
    plans: dict[int, FixPlan] = {}
    for f in kept:
        if f.plan is not None:
            plans.setdefault(id(f.plan), f.plan)  # type: ignore[arg-type]
    kept.sort(key=lambda f: (f.span.line, f.span.column, f.code))
    return CheckResult(analysis, kept, sorted(plans.values(), key=_plan_rank))


REDUCTION = recipes.lift_reduction.NAME  # the codemod that takes reduction loops


def _as_reduction(analysis: Analysis, use: IndexUse, rule, message: str, outcomes: dict[Anchor, list[Outcome]]):
    """A carry-less loop whose fix is lift-reduction's, or which no one can fix but which
    lift-reduction speaks for and which updates a ref in place (`o_ref[...] += ...`), is a
    reduction: its iterations are not independent, so it is PF102, not PF101."""
    if rule.code != "PF101":
        return rule, message
    offered = outcomes.get(use_key(use), [])
    plan = next((o for o in offered if isinstance(o, FixPlan)), None)
    if plan is not None:
        reduction = plan.codemod == REDUCTION
    else:
        loop = use.provenance.loop
        reduction = any(o.codemod == REDUCTION for o in offered) and loop is not None and accumulates_in_place(analysis, loop)
    return (RULES["PF102"], reduction_message(use)) if reduction else (rule, message)


# Start fixes (a one-element slice or a float used as a start, a traced constant) come before
# lifts: a lift planned around a start that no interpreter accepts gives a kernel none runs.
_START_FIXES = ("scalar-start", "traced-constant")


def _plan_rank(plan: FixPlan) -> int:
    return 0 if plan.codemod in _START_FIXES or plan.before_lifts else 1


def _outcomes(analysis: Analysis, present: set[str]) -> dict[Anchor, list[Outcome]]:
    outcomes: dict[Anchor, list[Outcome]] = {}
    for planner in recipes.PLANNERS:
        codes = planner.codes
        # Planners cost a rewrite's worth of work; skip those with nothing to fix here.
        if codes and all(c.startswith("PF1") for c in codes) and not (codes & present):
            continue
        for key, outcome in planner(analysis).items():
            outcomes.setdefault(key, []).append(outcome)
    outcomes = _resolve_waits(outcomes)
    why = trigger(analysis)
    if why is not None:
        outcomes = _screen_for_gpu_interpret(analysis, outcomes, why)
    return outcomes


def _resolve_waits(outcomes: dict[Anchor, list[Outcome]]) -> dict[Anchor, list[Outcome]]:
    """A refusal that waits for the fix of other anchors (the outer loop, another dim's window)
    becomes a FixAfter of that fix where one is planned; it stays a refusal where none is."""
    def resolved(outcome: Outcome) -> Outcome:
        if not isinstance(outcome, Refusal) or not outcome.waits_for:
            return outcome
        first = next((o for a in outcome.waits_for for o in outcomes.get(a, []) if isinstance(o, FixPlan)), None)
        return FixAfter(outcome.codemod, first) if first is not None else outcome

    return {key: [resolved(o) for o in items] for key, items in outcomes.items()}


def _attach(finding: Finding, outcomes: dict[Anchor, list[Outcome]]) -> Finding:
    """The finding with the first plan offered for its anchor, or every planner's refusal."""
    offered = outcomes.get(finding.anchor, []) if finding.anchor is not None else []
    plan = next((o for o in offered if isinstance(o, FixPlan)), None)
    if plan is not None:
        return dataclasses.replace(finding, fixable=True, fix_safety=plan.safety, fix_id=plan.codemod, refusal=None, plan=plan)
    after = next((o for o in offered if isinstance(o, FixAfter)), None)
    if after is not None:  # fixable once another plan is applied: applying its fix applies that one first
        first = after.first
        return dataclasses.replace(finding, fixable=True, fix_safety=first.safety, fix_id=after.codemod, refusal=None,
                                   plan=first, fix_after=first.description)
    # No fix: the message must not promise one ("the loop can become a grid axis").
    rule = RULES.get(finding.code)
    if rule is not None:
        finding = dataclasses.replace(finding, message=rule.unpromised(finding.message))
    refusals = [o.reason for o in offered if isinstance(o, Refusal)]
    if refusals:
        return dataclasses.replace(finding, refusal="; ".join(refusals))
    return finding


# -- --target gpu-interpret -------------------------------------------------------------------------
def hazard_counts(source: str, path: str, config: Config) -> dict[str, int]:
    """PF2xx findings per code in `source`, without planning fixes (for screening plans)."""
    return _counts(kernel_findings(analyze(source, path, config)))


def _counts(findings: list[Finding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
    return counts


def _screen_for_gpu_interpret(analysis: Analysis, outcomes: dict[Anchor, list[Outcome]], why: str) -> dict[Anchor, list[Outcome]]:
    """Where kernels run in GPU interpret mode (`why`: --target gpu-interpret, or the module uses
    it), refuse plans whose result has more PF2xx hazards: a rewrite must not stop running in an
    interpreter the original ran in."""
    if not any(isinstance(o, (FixPlan, FixAfter)) for items in outcomes.values() for o in items):
        return outcomes
    before = _counts(kernel_findings(analysis))  # what hazard_counts of the same text gives
    verdicts: dict[int, Outcome] = {}
    screened: dict[Anchor, list[Outcome]] = {}
    for key, items in outcomes.items():
        kept = []
        for outcome in items:
            plan = outcome.first if isinstance(outcome, FixAfter) else outcome
            if isinstance(plan, FixPlan):
                if id(plan) not in verdicts:
                    verdicts[id(plan)] = _screen(analysis, plan, before, why)
                screened_plan = verdicts[id(plan)]
                # A fix that waits for a refused one is refused with it.
                outcome = outcome if isinstance(outcome, FixAfter) and screened_plan is plan else screened_plan
            kept.append(outcome)
        screened[key] = kept
    return screened


def _screen(analysis: Analysis, plan: FixPlan, before: dict[str, int], why: str) -> Outcome:
    try:
        after_source = plan.rewrite(analysis.ctx.module).code  # type: ignore[union-attr]
        after = hazard_counts(after_source, analysis.path, analysis.config)
    except Exception:  # the engine reports a failing rewrite when it applies it
        return plan
    added = sorted(code for code, n in after.items() if n > before.get(code, 0))
    if not added:
        return plan
    what = "; ".join(f"{HAZARDS[c].what} ({c})" for c in added)
    anyway = "" if why == "--target gpu-interpret" else "; for kernels you compile, --target compiled lifts it anyway"
    return Refusal(plan.codemod, f"{plan.codemod} would add {what}, which GPU interpret mode cannot run ({why}){anyway}")


# -- fixing -----------------------------------------------------------------------------------------
def apply_plan(module: cst.Module, plan: FixPlan) -> str:
    """The text of `module` after `plan`. Raises when the rewrite fails or its text does not parse
    as Python, so that no front end ever offers or writes a broken file."""
    new_module = plan.rewrite(module)
    if plan.site is not None and plan.site.kernel is not None:
        new_module = drop_dead_params(module, new_module, plan.site.kernel.name.value)
    new_source = fit_width(module.code, new_module.code)
    ast.parse(new_source)
    return new_source


@dataclass
class FixResult:
    path: str
    original: str
    source: str
    applied: list[str] = field(default_factory=list)  # descriptions
    remaining: list[Finding] = field(default_factory=list)
    rounds: int = 0
    error: Optional[str] = None
    # Each applied round's findings and the plan it applied, in order (frontends.finding_fixes
    # follows a finding through them); the findings after the last are `remaining`.
    history: list[tuple[list[Finding], FixPlan]] = field(default_factory=list, repr=False)

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
    analysis: Optional[CheckResult] = None,
    kernels: Optional[set[str]] = None,
) -> FixResult:
    """Apply every enabled fix, one plan per round, re-analysing after each round.

    `only` limits the first round to findings at these (line, column) positions (the editor's
    quick fix for one finding); `kernels` limits every round to the plans of these kernels (see
    `plan_kernel`). `analysis`, when the caller already analysed `source` with the same config,
    stands in for the first round's analysis.
    """
    config = config or Config()
    allow_unsafe = config.unsafe_fixes if unsafe is None else unsafe
    result = FixResult(path=path, original=source, source=source)
    current = source
    first = analysis if analysis is not None and analysis.source == source and analysis.config == config else None
    for round_no in range(MAX_ROUNDS):
        try:
            checked = first if round_no == 0 and first is not None else analyze_source(current, path, config)
        except SourceError as exc:  # only a rewrite LibCST cannot parse back gets here
            return _failed(result, exc)
        plans = applicable(checked.plans, allow_unsafe, codemods, only if round_no == 0 else None)
        if kernels is not None:
            plans = [p for p in plans if plan_kernel(p) in kernels]
        if only is not None and round_no > 0:
            plans = []
        if not plans:
            result.remaining = checked.findings
            break
        # One plan per round: plans address nodes of the analysed tree by identity, and a rewrite
        # rebuilds the nodes around what it changes, so the next plan must see a fresh analysis.
        plan = plans[0]
        try:
            new_source = apply_plan(checked.ctx.module, plan)  # type: ignore[union-attr]
        except Exception as exc:  # a codemod bug must never produce a broken file
            return _failed(result, exc)
        result.rounds = round_no + 1
        result.applied.append(plan.description)
        result.history.append((checked.findings, plan))
        if new_source == current:
            result.remaining = checked.findings
            break
        current = new_source
    else:
        result.remaining = analyze_source(current, path, config, reach=True).findings
    result.source = current
    return result


def applicable(
    plans: list[FixPlan], allow_unsafe: bool, codemods: Optional[set[str]] = None, only: Optional[set[tuple[int, int]]] = None
) -> list[FixPlan]:
    """The plans a fix may apply: safe ones (unsafe too when allowed), of the named codemods, and
    covering a finding at one of the `only` positions."""
    plans = [p for p in plans if allow_unsafe or p.safety is FixSafety.SAFE]
    if codemods is not None:
        plans = [p for p in plans if p.codemod in codemods]
    if only is not None:
        plans = [p for p in plans if any((u.span.line, u.span.column) in only for u in p.uses)]
    return plans


def plan_kernel(plan: FixPlan) -> Optional[str]:
    """The name of the kernel a plan rewrites (its pallas_call's kernel), None when unknown."""
    site = plan.site or next((u.kernel_site for u in plan.uses if u.kernel_site is not None), None)
    return site.kernel_name if site is not None else None


def planned_kernels(result: CheckResult, allow_unsafe: bool = True) -> list[Optional[str]]:
    """The kernels with at least one applicable plan, in the order of their first plan."""
    names: list[Optional[str]] = []
    for plan in applicable(result.plans, allow_unsafe):
        if plan_kernel(plan) not in names:
            names.append(plan_kernel(plan))
    return names


def _failed(result: FixResult, exc: Exception) -> FixResult:
    result.error = f"rewrite failed ({type(exc).__name__}: {exc}); file left unchanged"
    result.source = result.original
    return result
