"""`--format github`: GitHub Actions workflow commands (`::warning file=...::message`)."""

from __future__ import annotations

from typing import Iterable

from pallas_fix.core.model import Finding


def _gh_escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_escape_property(text: str) -> str:
    # Properties (file=..., title=...) are also split on "," and ":".
    return _gh_escape(text).replace(":", "%3A").replace(",", "%2C")


def render_github(findings: Iterable[Finding]) -> str:
    out = []
    for f in findings:
        level = "error" if f.severity == "error" else "warning"
        msg = _gh_escape(f"{f.code} {f.message}")
        out.append(
            f"::{level} file={_gh_escape_property(f.path)},line={f.span.line},col={f.span.column + 1},"
            f"endLine={f.span.end_line},title={f.code}::{msg}"
        )
    return "\n".join(out)
