"""Probe candidate examples: which ones does the original run on? (client side, no jax here)

One worker process (``python -m pallas_fix.verify.worker`` with a ``"kind": "probe"`` job, see
:mod:`pallas_fix.verify.probe_worker`) runs the original on the candidates of every entry in
order, and stops at an entry's first candidate that runs. :func:`probe_candidates` keeps, per
entry, that candidate; when none runs but one fails only on a start that is not an integer
scalar (PF107: the original fails that way on any input, in every interpreter), it keeps the
first such one, so the rewrite that fixes the start can still be checked.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.core.examples import Example, example_to_json
from pallas_fix.verify.runner import _read_records, _run_worker, _tail

__all__ = ["ProbeResult", "probe_candidates"]


@dataclass
class ProbeResult:
    kept: list[Example]  # per entry, the candidate the original runs on, in candidate order
    outcomes: list[dict] = field(default_factory=list)  # per tried candidate: text, outcome, message
    complete: bool = True  # False when the original did not import or the worker died or ran out of time


def _kept(candidates: list[Example], records: list[dict]) -> list[Example]:
    by_index = {int(r["index"]): r["outcome"] for r in records if r.get("type") == "probe"}
    chosen: dict[str, int] = {}
    for outcome in ("ok", "pf107"):
        for i, ex in enumerate(candidates):
            if ex.entry not in chosen and by_index.get(i) == outcome:
                chosen[ex.entry] = i
    return [candidates[i] for i in sorted(chosen.values())]


def _outcomes(candidates: list[Example], records: list[dict]) -> list[dict]:
    return [{"example": candidates[int(r["index"])].text, "outcome": r["outcome"], "message": r.get("message", ""),
             "seconds": r.get("seconds")} for r in records if r.get("type") == "probe"]


def probe_candidates(source: str, path: str, candidates: list[Example], *, timeout_s: float = 120,
                     python: Optional[str] = None) -> ProbeResult:
    """Run the original (``source``) on ``candidates`` in one worker; see the module docstring."""
    if not candidates:
        return ProbeResult([])
    tmpdir = tempfile.mkdtemp(prefix="pallas-fix-probe-")
    job_path, out_path, err_path = (os.path.join(tmpdir, n) for n in ("job.json", "results.jsonl", "stderr.txt"))
    job = {"kind": "probe", "original": {"source": source, "path": path},
           "examples": [example_to_json(e) for e in candidates], "tmpdir": os.path.join(tmpdir, "src")}
    try:
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        cmd = [python or sys.executable, "-m", "pallas_fix.verify.worker", "--job", job_path, "--out", out_path]
        timed_out, rc = _run_worker(cmd, err_path, timeout_s)
        records = _read_records(out_path)
        failed = [r for r in records if r.get("type") in ("probe_import_failed", "fatal")]
        result = ProbeResult(_kept(candidates, records), _outcomes(candidates, records))
        # an import that fails may work once the environment changes: only a clean run is final
        result.complete = not failed and not timed_out and rc == 0 and any(r.get("type") == "done" for r in records)
        if failed:
            result.outcomes.append({"example": "", "outcome": "error", "message": failed[0].get("message", "")})
        elif not result.complete:
            why = "ran out of time" if timed_out else f"died (exit code {rc}): {_tail(err_path, 300)}"
            result.outcomes.append({"example": "", "outcome": "error", "message": f"the probe worker {why}"})
        return result
    finally:
        if not os.environ.get("PALLAS_FIX_KEEP_TMP"):
            shutil.rmtree(tmpdir, ignore_errors=True)
