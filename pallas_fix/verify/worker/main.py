"""Verification worker: ``python -m pallas_fix.verify.worker.main --job JOB.json --out RESULTS.jsonl``.

Runs in its own process (started by :mod:`pallas_fix.verify.runner`, which enforces the time
limit). It imports the original and the rewritten source as two in-memory modules, forces
interpret mode on every ``pallas_call``, runs each example through the reference (original,
HLO interpreter) and the candidates (rewrite, under each chosen interpreter), compares outputs
and writes one JSON object per line to ``--out`` (``-`` = the real stdout):

    {"type": "start", "pid": ...}
    {"type": "verdict", "index": i, ...Verdict fields..., "details": {...}}   one per example
    {"type": "done"}                              (or {"type": "fatal", "message": ...})

Everything else the process prints (user ``print``s, jax warnings) goes to stderr: file
descriptor 1 is pointed at stderr before any user code runs.

Job file: ``{"original": {"source", "path"}, "rewritten": {"source", "path"}, "examples":
[example_to_json...], "seeds": [0, 1, 2], "gpu_interpret": false, "tpu_interpret": null,
"max_cores": 16, "tmpdir": "..."}``. An example may instead be one entry's synthesised
candidates, ``{"entry", "candidates": [example_to_json...]}``: the worker first keeps the one
the original runs on (:mod:`~pallas_fix.verify.worker.candidate_trial`), then verifies with it; its
verdict's ``details`` say which (``"candidate": {"index", "outcomes"}``, ``"origin"``).

The pieces: :mod:`~pallas_fix.verify.worker.interpret_mode` (patching pallas_call),
:mod:`~pallas_fix.verify.worker.user_modules`, :mod:`~pallas_fix.verify.worker.calls` (seeded inputs),
:mod:`~pallas_fix.verify.worker.check` (one example through every interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import types
from typing import Any, Callable, Optional

from pallas_fix.core.examples import ArgSpec, Example, example_from_json, leaves
from pallas_fix.verify.worker.calls import Call, output_leaves
from pallas_fix.verify.worker.candidate_trial import try_candidates
from pallas_fix.verify.examples.candidates import none_ran_message
from pallas_fix.verify.worker.check import ReferenceRun, verdict_record, verify_example
from pallas_fix.verify.worker.failures import summarize_exc
from pallas_fix.verify.device.chip import keep_on_cpu, run_on_chip, tpu_chip
from pallas_fix.verify.worker.interpret_mode import forced_interpreter, install_patches
from pallas_fix.verify.worker.interpreters import MAX_CORES
from pallas_fix.verify.worker.races import install_race_log
from pallas_fix.verify.worker.ragged import may_be_ragged, verify_boundary, verify_variants
from pallas_fix.verify.worker.traced_facts import facts_job
from pallas_fix.verify.worker.user_modules import load_module, resolve_entry

# Names the tests' in-process harnesses reach through this module (tests/test_verify.py's patch
# probe, tests/test_codemods_simple.py's GPU harness).
from pallas_fix.verify.worker.calls import Runner  # noqa: F401
from pallas_fix.verify.worker.interpret_mode import reset_interpreters as _reset_interpreters  # noqa: F401
from pallas_fix.verify.judge.jaxprs import as_jaxprs as _sub_jaxprs  # noqa: F401


def _uses_64_bit(examples: list) -> bool:
    return any(
        isinstance(a, ArgSpec) and a.dtype in ("f64", "i64", "u64")
        for item in examples
        for ex in (item if isinstance(item, list) else [item])
        for a in leaves(list(ex.args) + list(ex.kwargs.values()))
    )


def _job_example(d: dict):
    """An Example, or one entry's candidates (a list of them)."""
    return [example_from_json(c) for c in d["candidates"]] if "candidates" in d else example_from_json(d)


def _import_sources(job: dict) -> tuple[dict[str, types.ModuleType], Optional[str]]:
    """Both modules, or what went wrong importing one of them."""
    mods = {}
    for kind in ("original", "rewritten"):
        spec = job[kind]
        try:
            with forced_interpreter(True):
                mods[kind] = load_module(kind, spec["source"], spec.get("path") or "<kernel>", job["tmpdir"])
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f" (line {f.lineno})" for f in reversed(tb) if f"/{kind}/" in f.filename), "")
            return mods, f"importing the {kind} source failed: {summarize_exc(e)}{where}"
    return mods, None


def _verify(mods: dict, ex: Example, job: dict, known: Optional[ReferenceRun] = None) -> dict:
    """One example's verdict; a verified one is checked again on its ragged variants (shapes the
    code allows that do not divide, :mod:`pallas_fix.verify.worker.ragged`) when the job asks for them."""

    def verify(example: Example, known: Optional[ReferenceRun] = None) -> dict:
        return verify_example(mods["original"], mods["rewritten"], example, seeds=list(job["seeds"]),
                              tpu_interpret=job.get("tpu_interpret"),
                              gpu_interpret=bool(job.get("gpu_interpret")),
                              max_cores=int(job.get("max_cores") or MAX_CORES),
                              backend_seeds=job.get("backend_seeds", 1), known=known,
                              divided_only=bool(job.get("divided_only")))

    try:
        verdict = verify(ex, known)
        observed = job["original"].get("observed")  # its ceilings spelled by hand: verify.examples.ceilings
        ragged = observed or may_be_ragged(job["original"]["source"])
        if verdict["status"] == "verified" and job.get("ragged", True) and ragged:
            original = resolve_entry(mods["original"], ex.entry)
            verdict = verify_variants(original, ex, verdict, int(job["seeds"][0]), verify,
                                      observed=_observed_entry(mods, job, ex.entry) if observed else None)
        if verdict["status"] == "verified" and (ex.origin or "").startswith("synthesised"):
            verdict = verify_boundary(resolve_entry(mods["original"], ex.entry), ex, verdict, int(job["seeds"][0]), verify)
        return verdict
    except Exception as e:  # a bug in the worker itself: still report per example
        return verdict_record(ex.entry, job["seeds"], message=f"verification crashed: {summarize_exc(e)}",
                              details={"traceback": traceback.format_exc()})


def _observed_entry(mods: dict, job: dict, entry: str) -> Optional[Callable]:
    """The entry of the original as the ragged variants observe it: its hand-spelled ceiling
    quotients recorded as `pl.cdiv` calls (verify.examples.ceilings); loaded once, on first use.
    None when that source does not load (the variants then come from the original itself)."""
    if "observed" not in mods:
        try:
            with forced_interpreter(True):
                mods["observed"] = load_module("observed", job["original"]["observed"],
                                               job["original"].get("path") or "<kernel>", job["tmpdir"])
        except Exception:  # the original itself loaded: what fails here is the rewriting
            mods["observed"] = None
    try:
        return resolve_entry(mods["observed"], entry) if mods["observed"] is not None else None
    except LookupError:
        return None


def _verify_candidates(mods: dict, import_error: Optional[str], candidates: list[Example], job: dict) -> dict:
    """Keep the first candidate the original runs on, then verify with it (the original's run
    is the reference's first seed)."""
    entry = candidates[0].entry
    if "original" not in mods:  # nothing can be tried: not cached, a later run tries again
        record = verdict_record(entry, job["seeds"], message=f"not verified: {import_error}", details={"example": ""})
        record["status"] = "unverified"
        return record
    trial = try_candidates(mods["original"], candidates, int(job["seeds"][0]))
    if trial.example is None:
        record = verdict_record(entry, job["seeds"], message=none_ran_message(entry, trial.outcomes), details={"example": ""})
        record["status"] = "unverified"
    elif import_error is not None:
        record = verdict_record(entry, job["seeds"], message=import_error, details={"example": trial.example.text})
    else:
        record = _verify(mods, trial.example, job, trial.reference)
    record["details"]["candidate"] = trial.choice()
    record["details"]["origin"] = trial.example.origin if trial.example is not None else None
    record["details"].setdefault("timings", {})["candidates"] = trial.seconds
    record["seconds"] = round(float(record.get("seconds") or 0.0) + trial.seconds, 3)
    return record


def _verify_one(mods: dict, import_error: Optional[str], item, job: dict) -> dict:
    if isinstance(item, list):
        return _verify_candidates(mods, import_error, item, job)
    if import_error is not None:
        return verdict_record(item.entry, job["seeds"], message=import_error, details={"example": item.text})
    return _verify(mods, item, job)


def _chip_job(mods: dict, examples: list, seed: int, emit: Callable[[dict], None]) -> None:
    """Each example's original and rewrite compiled on the TPU: one "chip" record each."""
    chip = tpu_chip()
    for i, ex in enumerate(examples):
        if chip is None:
            emit({"type": "chip", "index": i, "error": "the worker sees no TPU"})
            continue
        try:
            f_orig, f_rew = resolve_entry(mods["original"], ex.entry), resolve_entry(mods["rewritten"], ex.entry)
            call = Call(ex, reference=f_orig)
            run = run_on_chip(chip, call.bind(f_orig), call.bind(f_rew), call.inputs(seed), None,
                              lambda: forced_interpreter(False), output_leaves)
            emit({"type": "chip", "index": i, "device": run.to_json(), "failure": run.failure, "note": run.note()})
        except Exception as e:  # the check could not run: say so, judge nothing
            emit({"type": "chip", "index": i, "error": summarize_exc(e)})


def run_job(job: dict, emit: Callable[[dict], None]) -> None:
    examples = [_job_example(e) for e in job["examples"]]
    import jax

    if _uses_64_bit(examples):
        jax.config.update("jax_enable_x64", True)
    keep_on_cpu()  # the interpreters; a TPU beside it only runs the chip check (verify.device)
    install_race_log()
    install_patches()
    mods, import_error = _import_sources(job)
    if job.get("chip"):  # the chip check, in a worker that sees the TPU (verify.device)
        if import_error is not None:
            raise RuntimeError(import_error)
        _chip_job(mods, examples, int(job["seeds"][0]), emit)
        return
    if job.get("facts_only"):  # facts from the examples (pallas_fix.verify.worker.traced_facts)
        if import_error is not None:
            raise RuntimeError(import_error)
        facts_job(mods["original"], examples, int(job["seeds"][0]), emit)
        return
    for i, item in enumerate(examples):
        entry = item[0].entry if isinstance(item, list) else item.entry
        emit({"type": "begin", "index": i, "entry": entry})
        verdict = _verify_one(mods, import_error, item, job)
        verdict["type"] = "verdict"
        verdict["index"] = i
        emit(verdict)


def _json_safe(v: Any) -> Any:
    """Non-finite floats become None (strict JSON)."""
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pallas_fix.verify.worker.main")
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", default="-")
    ns = ap.parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        job = json.load(f)

    # Keep the protocol channel clean: whatever user code or jax prints goes to stderr.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = os.fdopen(real_stdout, "w") if ns.out == "-" else open(ns.out, "a", encoding="utf-8")

    def emit(obj: dict) -> None:
        out.write(json.dumps(_json_safe(obj), default=str, allow_nan=False) + "\n")
        out.flush()

    emit({"type": "start", "pid": os.getpid()})
    try:
        run_job(job, emit)
    except BaseException as e:  # noqa: BLE001
        emit({"type": "fatal", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        return 1
    emit({"type": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
