"""Facts from the examples, client side: one worker traces the original on the file's examples
(:mod:`pallas_fix.verify.worker.traced_facts`) and the answer becomes a
:class:`~pallas_fix.core.traced_facts.TracedFacts`. Never imports jax."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Optional, Sequence

from pallas_fix.core.examples import example_to_json
from pallas_fix.core.traced_facts import Seen, TracedFacts
from pallas_fix.verify.examples.candidates import ExampleCandidates, NoCandidateRan, ToVerify, candidates_to_json, settled_from_cache
from pallas_fix.verify.runner import _read_records as read_records, _run_worker as run_worker


def learn_facts(source: str, examples: Sequence[ToVerify], *, path: str = "<kernel>", timeout_s: float = 120,
                python: Optional[str] = None) -> TracedFacts:
    """What tracing `source` on each example shows; empty when nothing traced in time."""
    to_run = [e for e in settled_from_cache(examples) if not isinstance(e, NoCandidateRan)]
    if not to_run:
        return TracedFacts()
    tmpdir = tempfile.mkdtemp(prefix="pallas-fix-facts-")
    job_path, out_path = os.path.join(tmpdir, "job.json"), os.path.join(tmpdir, "results.jsonl")
    job = {"original": {"source": source, "path": path}, "rewritten": {"source": source, "path": path},
           "examples": [candidates_to_json(e) if isinstance(e, ExampleCandidates) else example_to_json(e) for e in to_run],
           "seeds": [0], "facts_only": True, "tmpdir": os.path.join(tmpdir, "src")}
    try:
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        cmd = [python or sys.executable, "-m", "pallas_fix.verify.worker.main", "--job", job_path, "--out", out_path]
        run_worker(cmd, os.path.join(tmpdir, "stderr.txt"), timeout_s)
        return facts_from_records(read_records(out_path))
    finally:
        if not os.environ.get("PALLAS_FIX_KEEP_TMP"):
            shutil.rmtree(tmpdir, ignore_errors=True)


def facts_from_records(records: list[dict]) -> TracedFacts:
    """The worker's ``"facts"`` records as facts: each traced pallas_call one :class:`Seen`."""
    seen: list[Seen] = []
    untraced: list[str] = []
    for r in records:
        if r.get("type") != "facts":
            continue
        if "calls" not in r or not r["calls"]:
            untraced.append(r.get("example") or "")
            continue
        for c in r["calls"]:
            def arrays(key: str) -> tuple:
                return tuple((tuple(int(d) for d in shape), str(dtype)) for shape, dtype in c.get(key) or [])
            seen.append(Seen(r.get("example") or "", c.get("kernel") or "", int(c.get("num_scalar_prefetch") or 0),
                             arrays("operands"), arrays("results")))
    return TracedFacts(tuple(seen), tuple(untraced))
