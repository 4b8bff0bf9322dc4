"""What each finding's fix does to the file, as a report tells it: the edits of its own fix (for
SARIF's `fixes`), and which findings `--apply` fixes only in a later round, after another fix.

`fix_source` applies one plan per round and re-analyses, so a finding the first analysis refused
can be fixed in a later round (a ref windowed along two program-id dims, the inner of two nested
loops), and one it offered a fix for can lose it. `settle` follows every first-round finding
through the rounds, so that the findings a report shows, its counts and what `--apply` writes
say the same thing.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pallas_fix.core.model import Finding, FixEdits, FixSafety, Span, TextEdit
from pallas_fix.engine import CheckResult, FixResult, apply_plan
from pallas_fix.frontends.lines import split_lines
from pallas_fix.frontends.lsp.text import minimal_edits
from pallas_fix.rules.registry import RULES


# -- edits of a finding's own fix -------------------------------------------------------------------
def with_fix_edits(check: CheckResult, allow_unsafe: bool) -> list[Finding]:
    """`check`'s findings, each fix it would apply on its own carrying its edits of the analysed
    text: safe fixes, and unsafe ones when allowed. A fix that must wait for another has none."""
    texts: dict[int, Optional[str]] = {}
    out = []
    for f in check.findings:
        plan = f.plan
        if plan is None or not f.fixable or f.fix_after or check.ctx is None:
            out.append(f)
            continue
        if f.fix_safety is not FixSafety.SAFE and not allow_unsafe:
            out.append(f)
            continue
        if id(plan) not in texts:
            try:
                texts[id(plan)] = apply_plan(check.ctx.module, plan)  # type: ignore[arg-type]
            except Exception:  # a failing rewrite offers no edits; applying it reports the failure
                texts[id(plan)] = None
        new = texts[id(plan)]
        if new is None or new == check.source:
            out.append(f)
            continue
        out.append(dataclasses.replace(f, fix_edits=FixEdits(plan.description, text_edits(check.source, new))))  # type: ignore[attr-defined]
    return out


def text_edits(old: str, new: str) -> tuple[TextEdit, ...]:
    """Whole-line edits turning `old` into `new` (the language server's), in code points."""
    lines = split_lines(old)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        return starts[min(pos[0], len(lines))] + (pos[1] if pos[0] < len(lines) else 0)

    out = []
    for e in minimal_edits(old, new, "utf-32"):
        begin, end = offset(e.start), offset(e.end)
        span = Span(e.start[0] + 1, e.start[1], e.end[0] + 1, e.end[1])
        out.append(TextEdit(span, begin, end - begin, e.new_text))
    return tuple(out)


# -- following findings through fix_source's rounds ---------------------------------------------------
Key = tuple[str, Optional[str], str]


def finding_key(f: Finding) -> Key:
    """What stays the same of a finding from one round to the next: its code, kernel and message
    without the promise of a fix (lines move, and a refused finding does not promise one)."""
    rule = RULES.get(f.code)
    return (f.code, f.kernel, rule.unpromised(f.message) if rule is not None else f.message)


def settle(findings: list[Finding], fixed: FixResult) -> list[Finding]:
    """`findings` (fix_source's first round) as the rounds went: one the proposal fixes in a later
    round, after another fix, is fixable, saying which fix comes first; one it leaves is as the
    last round left it (an unsafe fix not applied, a fix another rewrite took away)."""
    history = list(fixed.history)
    if history and history[-1][0] is fixed.remaining:  # the last plan changed nothing
        history.pop()
    if not history:
        return findings
    fates = _fates(findings, history, fixed.remaining)
    return [_settled(f, fate, history) for f, fate in zip(findings, fates)]


# A finding's fate: ("fixed", round, the round it became fixable) | ("left", its last form) | ("lost",)
Fate = tuple


def _fates(findings: list[Finding], history: list, remaining: list[Finding]) -> list[Fate]:
    current: dict[int, Finding] = dict(enumerate(findings))  # the findings still followed, in their latest form
    fixable_since: dict[int, int] = {}
    fates: dict[int, Fate] = {}
    for r, (_, plan) in enumerate(history):
        after = history[r + 1][0] if r + 1 < len(history) else remaining
        pool: dict[Key, list[Finding]] = {}
        for g in after:
            pool.setdefault(finding_key(g), []).append(g)
        for i, f in list(current.items()):
            if f.plan is not None and not f.fix_after:
                fixable_since.setdefault(i, r)
            if f.plan is plan and not f.fix_after:
                fates[i] = ("fixed", r, fixable_since[i])
                del current[i]
                continue
            same = pool.get(finding_key(f))
            if same:
                current[i] = same.pop(0)
            else:  # changed by another rewrite into something pallas-fix cannot tell is the same
                fates[i] = ("lost",)
                del current[i]
    for i, f in current.items():
        fates[i] = ("left", f)
    return [fates[i] for i in range(len(findings))]


def _settled(f: Finding, fate: Fate, history: list) -> Finding:
    if fate[0] == "fixed":
        _, r, since = fate
        plan = history[r][1]
        if f.fixable and not f.fix_after:
            return f
        return dataclasses.replace(f, fixable=True, fix_safety=plan.safety, fix_id=plan.codemod, refusal=None,
                                   fix_after=history[since - 1][1].description if since > 0 else None, plan=None,
                                   message=_promised(f, history[r][0], plan))
    if fate[0] == "left":
        last: Finding = fate[1]
        if last is f:
            return f
        return dataclasses.replace(f, fixable=last.fixable, fix_safety=last.fix_safety, fix_id=last.fix_id,
                                   refusal=last.refusal, fix_after=last.fix_after, message=last.message,
                                   plan=f.plan if last.fixable == f.fixable else None,
                                   fix_edits=f.fix_edits if last.fixable == f.fixable else None)
    return f


def _promised(f: Finding, round_findings: list[Finding], plan) -> str:
    """The message of the form `f` had when `plan` fixed it (which promises the fix)."""
    key = finding_key(f)
    return next((g.message for g in round_findings if g.plan is plan and finding_key(g) == key), f.message)
