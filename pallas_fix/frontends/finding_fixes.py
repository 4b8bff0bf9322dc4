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
