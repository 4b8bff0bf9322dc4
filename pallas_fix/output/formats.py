"""Render findings and diffs: text, JSON, SARIF 2.1.0, GitHub annotations, unified diffs."""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Iterable, Optional
from urllib.parse import quote

from pallas_fix import __version__
from pallas_fix.core.model import Finding
from pallas_fix.rules.registry import RULES

DOCS_URL = "https://github.com/pallas-fix/pallas-fix/blob/main/docs/rules.md#{code}"


def fix_marker(f: Finding) -> str:
    if not f.fixable:
        return ""
    return "[*] " if f.fix_safety is not None and f.fix_safety.value == "safe" else "[*unsafe] "


def text_line(f: Finding) -> str:
    line = f"{f.path}:{f.span.line}:{f.span.column + 1}: {f.code} {fix_marker(f)}{f.message}"
    if f.provenance:
        line += f"\n    start comes from {f.provenance}"
    if not f.fixable and f.refusal:
        line += f"\n    no fix: {f.refusal}"
    return line


def render_text(findings: Iterable[Finding]) -> str:
    return "\n".join(text_line(f) for f in findings)


def render_json(findings: Iterable[Finding], verdicts: Optional[list[dict]] = None) -> str:
    payload: dict = {"version": __version__, "findings": [f.to_json() for f in findings]}
    if verdicts is not None:
        payload["verification"] = verdicts
    return json.dumps(payload, indent=2)


def _sarif_level(severity: str) -> str:
    return {"error": "error", "warning": "warning"}.get(severity, "note")


def sarif_uri(path: str) -> str:
    """artifactLocation.uri must be a URI: relative paths stay relative (code scanning resolves
    them against the checkout), absolute ones become file: URIs, and both are percent-encoded."""
    if os.path.isabs(path):
        return Path(os.path.abspath(path)).as_uri()
    return quote(path.replace(os.sep, "/"), safe="/")


def render_sarif(findings: list[Finding]) -> str:
    used = sorted({f.code for f in findings} | set(RULES))
    rules = []
    for code in used:
        r = RULES.get(code)
        rules.append(
            {
                "id": code,
                "name": r.name if r else code,
                "shortDescription": {"text": r.summary if r else code},
                "fullDescription": {"text": r.doc if r else code},
                "helpUri": DOCS_URL.format(code=code.lower()),
                "defaultConfiguration": {"level": _sarif_level(r.severity if r else "warning")},
            }
        )
    index = {code: i for i, code in enumerate(used)}
    results = []
    for f in findings:
        results.append(
            {
                "ruleId": f.code,
                "ruleIndex": index[f.code],
                "level": _sarif_level(f.severity),
                "message": {"text": f"{f.message} (start comes from {f.provenance})" if f.provenance else f.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": sarif_uri(f.path)},
                            "region": {
                                "startLine": f.span.line,
                                "startColumn": f.span.column + 1,
                                "endLine": f.span.end_line,
                                "endColumn": f.span.end_column + 1,
                            },
                        }
                    }
                ],
                "properties": {"fixable": f.fixable, "origin": f.origin, "refusal": f.refusal},
            }
        )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "pallas-fix",
                        "version": __version__,
                        "informationUri": "https://github.com/pallas-fix/pallas-fix",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2)


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


def unified_diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )
