"""`--format json`: the findings (and, with --apply, the verification verdicts) as one document."""

from __future__ import annotations

import json
from typing import Iterable, Optional

from pallas_fix import __version__
from pallas_fix.core.model import Finding


def render_json(findings: Iterable[Finding], verdicts: Optional[list[dict]] = None) -> str:
    payload: dict = {"version": __version__, "findings": [f.to_json() for f in findings]}
    if verdicts is not None:
        payload["verification"] = verdicts
    return json.dumps(payload, indent=2)
