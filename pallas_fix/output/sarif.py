"""`--format sarif`: a SARIF 2.1.0 log for code scanning, every rule described, one result per
finding. A finding whose own fix the front end computed (`Finding.fix_edits`) carries it as a
SARIF `fix`: one `artifactChange` on its file whose `replacements` delete a region of the
unmodified text and insert the new lines, so viewers can show or apply the rewrite."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from pallas_fix import __version__
from pallas_fix.core.model import Finding, TextEdit
from pallas_fix.output.common import rule_url
from pallas_fix.rules.registry import RULES


def _sarif_level(severity: str) -> str:
    return {"error": "error", "warning": "warning"}.get(severity, "note")


def sarif_uri(path: str) -> str:
    """artifactLocation.uri must be a URI: relative paths stay relative (code scanning resolves
    them against the checkout), absolute ones become file: URIs, and both are percent-encoded."""
    if os.path.isabs(path):
        return Path(os.path.abspath(path)).as_uri()
    return quote(path.replace(os.sep, "/"), safe="/")


def _rule(code: str) -> dict:
    r = RULES.get(code)
    return {
        "id": code,
        "name": r.name if r else code,
        "shortDescription": {"text": r.summary if r else code},
        "fullDescription": {"text": r.doc if r else code},
        "helpUri": rule_url(code),
        "defaultConfiguration": {"level": _sarif_level(r.severity if r else "warning")},
    }


def _result(f: Finding, rule_index: int) -> dict:
    return {
        "ruleId": f.code,
        "ruleIndex": rule_index,
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
        **({"fixes": [_fix(f)]} if f.fix_edits else {}),
    }


def _fix(f: Finding) -> dict:
    assert f.fix_edits is not None
    safety = f" ({f.fix_safety.value} fix)" if f.fix_safety is not None else ""
    replacements = [_replacement(e) for e in f.fix_edits.edits]
    return {
        "description": {"text": f"{f.fix_id}{safety}: {f.fix_edits.description}"},
        "artifactChanges": [{"artifactLocation": {"uri": sarif_uri(f.path)}, "replacements": replacements}],
    }


def _replacement(edit: TextEdit) -> dict:
    """The region in the unmodified text, by line and column (1-based, end exclusive) and by
    character offset, which stays exact where the region ends past the last line break."""
    span = edit.span
    region = {
        "startLine": span.line,
        "startColumn": span.column + 1,
        "endLine": span.end_line,
        "endColumn": span.end_column + 1,
        "charOffset": edit.offset,
        "charLength": edit.length,
    }
    return {"deletedRegion": region, "insertedContent": {"text": edit.text}}


def render_sarif(findings: list[Finding]) -> str:
    used = sorted({f.code for f in findings} | set(RULES))
    index = {code: i for i, code in enumerate(used)}
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
                        "rules": [_rule(code) for code in used],
                    }
                },
                "results": [_result(f, index[f.code]) for f in findings],
            }
        ],
    }
    return json.dumps(doc, indent=2)
