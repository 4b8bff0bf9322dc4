"""Plain-text findings, one `path:line:col: CODE message` line each (notes indented below)."""

from __future__ import annotations

from typing import Iterable

from pallas_fix.core.model import Finding
from pallas_fix.output.common import finding_notes


def fix_marker(f: Finding) -> str:
    if not f.fixable:
        return ""
    return "[*] " if f.fix_safety is not None and f.fix_safety.value == "safe" else "[*unsafe] "


def text_line(f: Finding) -> str:
    line = f"{f.path}:{f.span.line}:{f.span.column + 1}: {f.code} {fix_marker(f)}{f.message}"
    return "".join([line] + [f"\n    {note}" for note in finding_notes(f)])


def render_text(findings: Iterable[Finding]) -> str:
    return "\n".join(text_line(f) for f in findings)
