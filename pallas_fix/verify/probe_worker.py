"""The worker's probe job: which candidate examples the original runs on (worker side).

Job file: ``{"kind": "probe", "original": {"source", "path"}, "examples": [example_to_json...],
"tmpdir": "..."}``. The original runs under the HLO interpreter (``interpret=True``) on each
candidate's seed-0 inputs; candidates of one entry are tried in order until one runs. Records:

    {"type": "probe", "index": i, "outcome": "ok" | "pf107" | "error", "message": ..., "seconds": ...}
    {"type": "probe_import_failed", "message": ...}        the original does not import

``pf107``: the original fails only because a start is not an integer scalar, which it does in
every interpreter and on every input (the rewrite that fixes it can still be checked).
Imports jax; started by :mod:`pallas_fix.verify.example_probe` through the worker.
"""

from __future__ import annotations

import time
from typing import Callable

from pallas_fix.core.examples import ArgSpec, Example, example_from_json, leaves
from pallas_fix.verify.example_calls import Call, Runner
from pallas_fix.verify.failures import NON_SCALAR_START, summarize_exc, user_frame
from pallas_fix.verify.interpret_mode import forced_interpreter, install_patches
from pallas_fix.verify.user_modules import load_module, resolve_entry


def _needs_x64(examples: list[Example]) -> bool:
    return any(isinstance(a, ArgSpec) and a.dtype in ("f64", "i64", "u64")
               for ex in examples for a in leaves(list(ex.args) + list(ex.kwargs.values())))


def _try(mod, ex: Example) -> tuple[str, str]:
    """(outcome, message) of running the original's entry on the example's seed-0 inputs."""
    try:
        fn = resolve_entry(mod, ex.entry)
        call = Call(ex, reference=fn)  # integers the original uses as indices stay in range
        Runner(fn, call, True)(call.inputs(0))
    except Exception as e:  # the candidate does not fit the code: that is what a probe finds out
        message = summarize_exc(e)
        outcome = "pf107" if NON_SCALAR_START.search(message) else "error"
        return outcome, f"{message}{user_frame(e)}"
    return "ok", ""


def run_probe(job: dict, emit: Callable[[dict], None]) -> None:
    examples = [example_from_json(e) for e in job["examples"]]
    import jax

    if _needs_x64(examples):
        jax.config.update("jax_enable_x64", True)
    install_patches()
    spec = job["original"]
    try:
        with forced_interpreter(True):
            mod = load_module("original", spec["source"], spec.get("path") or "<kernel>", job["tmpdir"])
    except Exception as e:
        emit({"type": "probe_import_failed", "message": f"importing the original failed: {summarize_exc(e)}"})
        return
    settled: set[str] = set()
    for i, ex in enumerate(examples):
        if ex.entry in settled:
            continue
        t0 = time.perf_counter()
        outcome, message = _try(mod, ex)
        emit({"type": "probe", "index": i, "outcome": outcome, "message": message,
              "seconds": round(time.perf_counter() - t0, 3)})
        if outcome == "ok":
            settled.add(ex.entry)
