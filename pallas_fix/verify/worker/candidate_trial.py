"""Trying synthesised candidates in the verification worker: which one does the original run on?

A job example ``{"entry", "candidates": [example_to_json...]}``
(:mod:`~pallas_fix.verify.examples.candidates`) is settled here before it is verified: the
original runs under the HLO interpreter (``interpret=True``) on each candidate's first-seed
inputs, in order, until one runs. That run is the reference's first seed: its call, jitted
function and outputs go on to verification (:class:`~pallas_fix.verify.worker.check.ReferenceRun`),
so the original is not run twice. When none runs but one fails only on a start that is not an
integer scalar (PF107: the original fails that way on any input, in every interpreter), the first
such one is kept, so the rewrite that fixes the start can still be checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.core.examples import Example
from pallas_fix.verify.worker.calls import Call, Runner, output_leaves
from pallas_fix.verify.worker.check import ReferenceRun
from pallas_fix.verify.worker.failures import NON_SCALAR_START, summarize_exc, user_frame
from pallas_fix.verify.worker.user_modules import resolve_entry


@dataclass
class Trial:
    example: Optional[Example]  # the kept candidate; None when none of them runs
    index: Optional[int]
    reference: Optional[ReferenceRun]  # the original's run on it (None for a PF107 one)
    outcomes: list[dict] = field(default_factory=list)  # per tried candidate: example, outcome, message, seconds
    seconds: float = 0.0

    def choice(self) -> dict:
        """What the client caches (:func:`~pallas_fix.verify.examples.candidates.store_choices`)."""
        return {"index": self.index, "outcomes": self.outcomes}


def _run_original(mod, ex: Example, seed: int) -> tuple[str, str, Optional[ReferenceRun]]:
    """(outcome "ok" | "pf107" | "error", message, the run when it worked)."""
    try:
        fn = resolve_entry(mod, ex.entry)
        call = Call(ex, reference=fn)  # integers the original uses as indices stay in range
        runner = Runner(fn, call, True)
        outputs = output_leaves(runner(call.inputs(seed)))
    except Exception as e:  # the candidate does not fit the code: that is what trying it finds out
        message = summarize_exc(e)
        outcome = "pf107" if NON_SCALAR_START.search(message) else "error"
        return outcome, f"{message}{user_frame(e)}", None
    return "ok", "", ReferenceRun(call, runner, {seed: outputs})


def try_candidates(mod, candidates: list[Example], seed: int) -> Trial:
    """The first candidate the original (``mod``) runs on; see the module docstring."""
    t0 = time.perf_counter()
    outcomes: list[dict] = []
    first_pf107: Optional[int] = None
    for i, ex in enumerate(candidates):
        ts = time.perf_counter()
        outcome, message, run = _run_original(mod, ex, seed)
        outcomes.append({"example": ex.text, "outcome": outcome, "message": message,
                         "seconds": round(time.perf_counter() - ts, 3)})
        if run is not None:
            return Trial(ex, i, run, outcomes, round(time.perf_counter() - t0, 3))
        if outcome == "pf107" and first_pf107 is None:
            first_pf107 = i
    kept = candidates[first_pf107] if first_pf107 is not None else None
    return Trial(kept, first_pf107, None, outcomes, round(time.perf_counter() - t0, 3))
