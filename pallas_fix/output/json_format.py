"""`--format json`: the findings, the files that could not be analysed (with a syntax error's
line and column) and, with --apply, the verification verdicts, as one document."""

from __future__ import annotations

import json
from typing import Iterable, Optional

from pallas_fix import __version__
from pallas_fix.core.model import Finding


def render_json(findings: Iterable[Finding], verdicts: Optional[list[dict]] = None, errors: Optional[list[dict]] = None) -> str:
    """`errors`: one `{"path", "message", "line", "column"}` per file that failed (line and
    column null unless the error has a place)."""
    payload: dict = {"version": __version__, "findings": [f.to_json() for f in findings], "errors": list(errors or [])}
    if verdicts is not None:
        payload["verification"] = verdicts
    return json.dumps(payload, indent=2)
