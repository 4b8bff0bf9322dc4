"""Facts from the examples, client side: one worker traces the original on the file's examples
(:mod:`pallas_fix.verify.worker.traced_facts`) and the answer becomes a
:class:`~pallas_fix.core.traced_facts.TracedFacts`. Never imports jax."""

from __future__ import annotations

import ast
from typing import Optional, Sequence

from pallas_fix.core.examples import example_to_json
from pallas_fix.core.traced_facts import Seen, TracedFacts
from pallas_fix.verify.examples.candidates import ExampleCandidates, NoCandidateRan, ToVerify, candidates_to_json, settled_from_cache
from pallas_fix.verify.worker_process import run_worker_job


def learn_facts(source: str, examples: Sequence[ToVerify], *, path: str = "<kernel>", timeout_s: float = 120,
                python: Optional[str] = None) -> TracedFacts:
    """What tracing `source` on each example shows; empty when nothing traced in time."""
    to_run = [e for e in settled_from_cache(examples) if not isinstance(e, NoCandidateRan)]
    if not to_run:
        return TracedFacts()
    job = {"original": {"source": source, "path": path}, "rewritten": {"source": source, "path": path},
           "examples": [candidates_to_json(e) if isinstance(e, ExampleCandidates) else example_to_json(e) for e in to_run],
           "seeds": [0], "facts_only": True}
    return facts_from_records(run_worker_job(job, "pallas-fix-facts-", timeout_s, python).records, source)


def def_order(source: Optional[str]) -> dict[tuple[str, int], int]:
    """(name, first line) -> which def of that name it is, in source order, for every def of
    `source`. The first line is Python's `co_firstlineno` (the first decorator's line), as the
    trace gives it; the order survives the rewrite's later rounds, which move lines but not defs."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError):
        return {}
    lines: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            lines.setdefault(node.name, []).append(first)
    return {(name, line): n for name, found in lines.items() for n, line in enumerate(sorted(found))}


def facts_from_records(records: list[dict], source: Optional[str] = None) -> TracedFacts:
    """The worker's ``"facts"`` records as facts: each traced pallas_call one :class:`Seen`; with
    the traced `source`, each kernel's def line becomes which def of its name it ran."""
    order = def_order(source) if source is not None else {}
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
            kernel = c.get("kernel") or ""
            seen.append(Seen(r.get("example") or "", kernel, int(c.get("num_scalar_prefetch") or 0),
                             arrays("operands"), arrays("results"), order.get((kernel, c.get("line")))))
    return TracedFacts(tuple(seen), tuple(untraced))
