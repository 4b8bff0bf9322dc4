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
from pallas_fix.analysis.discovery.kernel_entry import entry_problem
from pallas_fix.analysis.result import Analysis, SourceError, analyze, mentions_pallas
from pallas_fix.analysis.loops.windows import window_of
from pallas_fix.core.config import Config
from pallas_fix.core.directives import suppressed
from pallas_fix.core.model import Finding, FixSafety, IndexUse, KernelSite
from pallas_fix.core.plans import Anchor, FixAfter, FixPlan, Outcome, Refusal, use_key
from pallas_fix.core.speed import Pipelined
from pallas_fix.rewrite.reduction.takes import iterations_depend
from pallas_fix.rules.gpu_interpret.policy import screen as screen_for_gpu_interpret
from pallas_fix.rules.gpu_interpret.kernel_rules import kernel_findings
from pallas_fix.rules.on_chip.pf302_tpu_unaligned_window import window_findings
from pallas_fix.rewrite.callsite.forwarded import screen as screen_forwarded
from pallas_fix.rewrite.extents.ellipsis_dims import settle_ellipsis_dims
from pallas_fix.rewrite.kernel.dead_params import drop_dead_params
from pallas_fix.rewrite.loops.dependence import accumulates_in_place
from pallas_fix.rewrite.text.line_width import fit_width, rejoin
from pallas_fix.rules.dynamic_index.pf102_reduction_loop_slice import message as reduction_message
from pallas_fix.rules.registry import ORDER, RULES, classify

__all__ = ["START_FIXES", "CheckResult", "FixResult", "SourceError", "analyze_source", "apply_plan", "fix_source", "mentions_pallas", "plan_kernel", "planned_kernels"]

MAX_ROUNDS = 32

# Why an index has no fix when no planner spoke for it.
_NO_PLANNER = {
    "PF105": "the start depends on data loaded inside the kernel; no BlockSpec can express it",
    "PF106": "no BlockSpec can express this window ({reason})",
    "PF108": "integer-array indices have no BlockSpec form",
    "PF109": ("pallas-fix cannot follow this traced start ({source}) back to a grid or loop index: it lifts starts "
              "built from `pl.program_id`, a `lax.fori_loop` / `pl.loop` index or an entry of a table the kernel "
              "loads; write the start from one of those (a `lax.while_loop` whose carry counts the steps is a "
              "`lax.fori_loop` over them)"),
}


def _no_planner_reason(analysis: Analysis, code: str, use: IndexUse, window_reason: Optional[str]) -> str:
    site = use.kernel_site
    if site is not None and site.entry is not None:  # `plgpu.kernel`: no BlockSpecs to move a window into
        return entry_problem(analysis, site) or ""
    return _NO_PLANNER.get(code, "no automatic fix applies here").format(reason=window_reason, source=use.provenance.description)


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
    its kernels reach (`analysis.discovery.reachable`), and analysed whole again when that finds a fix, so
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
    settle_ellipsis_dims(analysis)
    ruled = [(use, window, *classify(use, window)) for use in analysis.uses for window in (window_of(use),)]
    present = {rule.code for _, _, rule, _ in ruled if config.enabled(rule.code)}
    if config.enabled("PF102") and any(rule.code == "PF101" for _, _, rule, _ in ruled):
        present |= {"PF101", "PF102"}  # a PF101 loop may turn out a reduction: both lifts decide (_as_reduction)
    outcomes = _outcomes(analysis, present)
    findings: list[Finding] = []
    depends: dict[int, bool] = {}  # id(loop) -> whether its iterations depend on each other
    for use, window, rule, message in ruled:
        rule, message = _as_reduction(analysis, use, rule, message, outcomes, depends)
        rule, message = _as_offset_window(use, window, rule, message, outcomes)
        finding = Finding(
            code=rule.code,
            message=message,
            path=analysis.path,
            span=use.span,
            provenance=use.provenance.description,
            origin=use.provenance.origin.value,
            fixable=False,
            refusal=_no_planner_reason(analysis, rule.code, use, window.reason),
            severity=rule.severity,
            kernel=use.kernel_site.kernel_name if use.kernel_site else None,
            anchor=use_key(use),
        )
        findings.append(finding)
    findings.extend(kernel_findings(analysis))
    findings.extend(window_findings(analysis))
    kept = [_attach(f, outcomes) for f in findings if config.enabled(f.code) and not suppressed(lines, f.span, f.code)]
    plans: dict[int, FixPlan] = {}
    for f in kept:
        if f.plan is not None:
            plans.setdefault(id(f.plan), f.plan)  # type: ignore[arg-type]
    kept.sort(key=lambda f: (f.span.line, f.span.column, f.code))
    return CheckResult(analysis, kept, sorted(plans.values(), key=_plan_rank))


REDUCTION = recipes.lift_reduction.NAME  # the codemod that takes reduction loops
PROGRAM_ID_BLOCKS = recipes.program_id_blocks.NAME


def _as_offset_window(use: IndexUse, window, rule, message: str, outcomes: dict[Anchor, list[Outcome]]):
    """A window that is no block of its own size (PF106, `pl.ds(i * bm + 8 + c * 16, 16)`) but
    that program-id-blocks moves, at its offset, into its program's block is not a window no
    BlockSpec can express: the next rule that claims it (PF103, or PF101 for a loop's) speaks for it."""
    if rule.code != "PF106":
        return rule, message
    plan = next((o for o in outcomes.get(use_key(use), []) if isinstance(o, FixPlan)), None)
    if plan is None or plan.codemod != PROGRAM_ID_BLOCKS:
        return rule, message
    for code in ORDER[ORDER.index("PF106") + 1:]:
        claimed = RULES[code].check(use, window)
        if claimed is not None:
            return RULES[code], claimed
    return rule, message


def _as_reduction(analysis: Analysis, use: IndexUse, rule, message: str, outcomes: dict[Anchor, list[Outcome]],
                  depends: dict[int, bool]):
    """A carry-less loop whose fix is lift-reduction's, or which no one can fix but which
    lift-reduction speaks for and which updates a ref in place (`o_ref[...] += ...`), is a
    reduction: its iterations are not independent, so it is PF102, not PF101."""
    if rule.code != "PF101":
        return rule, message
    offered = outcomes.get(use_key(use), [])
    plan = next((o for o in offered if isinstance(o, FixPlan)), None)
    loop = use.provenance.loop
    if plan is not None:
        # lift-reduction also takes independent loops whose trip count reads the program id (causal
        # rows, a tail block's fewer chunks): those stay PF101. Asked once per loop (`depends`).
        if plan.codemod == REDUCTION and loop is not None and id(loop) not in depends:
            depends[id(loop)] = iterations_depend(analysis, loop, [u for u in analysis.uses if u.provenance.loop is loop])
        reduction = plan.codemod == REDUCTION and depends.get(id(loop), False)
    else:
        reduction = any(o.codemod == REDUCTION for o in offered) and loop is not None and accumulates_in_place(analysis, loop)
    return (RULES["PF102"], reduction_message(use)) if reduction else (rule, message)


# Start fixes (a one-element slice or a float used as a start, a traced constant, a range read as
# the window it is) come before lifts: a lift planned around a start that no interpreter accepts
# gives a kernel none runs, and a range becomes a window a lift can see.
START_FIXES = ("scalar-start", "traced-constant", "contiguous-window")


def _plan_rank(plan: FixPlan) -> int:
    return 0 if plan.codemod in START_FIXES or plan.before_lifts else 1


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
    # A kernel passed into a helper with its own grid and specs: its plan must leave what the
    # helper's calls share as it is (rewrite.callsite.forwarded).
    outcomes = screen_forwarded(analysis, outcomes, apply_plan)
    # A plan that would stop a kernel running in GPU interpret mode, where it runs, becomes a refusal.
    return screen_for_gpu_interpret(analysis, outcomes)


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


# -- fixing -----------------------------------------------------------------------------------------
def apply_plan(module: cst.Module, plan: FixPlan) -> str:
    """The text of `module` after `plan`. Raises when the rewrite fails or its text does not parse
    as Python, so that no front end ever offers or writes a broken file."""
    new_module = plan.rewrite(module)
    if plan.site is not None and plan.site.kernel is not None:
        new_module = drop_dead_params(module, new_module, plan.site.kernel.name.value, plan.site.passed_by is not None)
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
    # Per applied plan: what it does to a call already pipelined on other axes (core.speed), or
    # None; what `--apply` says of a lift's speed when no example measures it.
    pipelined: list[Optional[Pipelined]] = field(default_factory=list)
    rounds: int = 0
    error: Optional[str] = None
    # Each applied round's findings and the plan it applied, in order (frontends.finding_fixes
    # follows a finding through them); the findings after the last are `remaining`.
    history: list[tuple[list[Finding], FixPlan]] = field(default_factory=list, repr=False)

    @property
    def changed(self) -> bool:
        return self.source != self.original

    @property
    def divided_only(self) -> bool:
        """Some applied plan is a lift the interpreters judge only where its blocks divide
        (core.plans.FixPlan.divided_only): verification compares no example with a partial block."""
        return any(plan.divided_only for _, plan in self.history)


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
        result.pipelined.append(plan.pipelined)
        result.history.append((checked.findings, plan))
        if new_source == current:
            result.remaining = checked.findings
            break
        current = new_source
    else:
        result.remaining = analyze_source(current, path, config, reach=True).findings
    # A line an early round broke to fit the width and a later round shortened goes back on one line.
    result.source = rejoin(source, current) if result.rounds else current
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
    if site is not None and len({d.name.value for d in site.variants}) > 1:
        # Variants picked by a name (`kernel_fn = _full_kernel`), whose lifts may be joined
        # (rewrite.callsite.variant_arms): one unit, verified on the examples that reach any of
        # them, named as the examples trace them (frontends.kernel_rewrites.unit_names).
        return ", ".join(dict.fromkeys(d.name.value for d in site.variants))
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
