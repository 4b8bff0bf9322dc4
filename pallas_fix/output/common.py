"""What every renderer (and the language server) says the same way about a finding: the link to
its rule's documentation and the notes under its message."""

from __future__ import annotations

from pallas_fix.core.model import Finding
from pallas_fix.rules.reference import anchor

# docs/rules.md is generated from the rule modules (pallas_fix/rules/reference.py).
DOCS_URL = "https://github.com/pallas-fix/pallas-fix/blob/main/docs/rules.md#{code}"


def rule_url(code: str) -> str:
    return DOCS_URL.format(code=anchor(code))


def finding_notes(f: Finding) -> list[str]:
    """The lines shown under a finding's message: where its start comes from, why there is no
    fix, or the fix that must come first."""
    notes = []
    if f.provenance:
        notes.append(f"start comes from {f.provenance}")
    if not f.fixable and f.refusal:
        notes.append(f"no fix: {f.refusal}")
    if f.fixable and f.fix_after:
        notes.append(f"fixed after another fix: {f.fix_after}")
    return notes
