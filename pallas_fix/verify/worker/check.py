"""Verifying one example in the worker: trace, reference outputs, every candidate interpreter.

The result is a verdict record: a dict with :data:`pallas_fix.verify.runner.JSON_KEYS` and
``details`` (example text, timings, outcomes per interpreter, traced pallas_calls, notes), which
the runner turns into a Verdict. Both sides are traced once (nothing runs) for their dynamic
slices and for the bytes each grid step holds on chip (``footprint``,
:mod:`pallas_fix.verify.judge.footprint`), the grid steps a lift adds (``speed``,
:mod:`pallas_fix.verify.judge.lift_cost`) and the blocks a rewrite gives a TPU kernel that Mosaic
rejects (:mod:`pallas_fix.verify.judge.tiling`: status ``"refused"``, nothing runs).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pallas_fix.core.examples import Example
from pallas_fix.verify.judge import oracle
from pallas_fix.verify.judge.compare import LeafResult, compare_leaves, error_bounds
from pallas_fix.verify.worker.calls import Call, Runner, output_leaves
from pallas_fix.verify.worker.failures import NON_SCALAR_START, raised_by_user, summarize_exc, user_frame
from pallas_fix.verify.judge.footprint import footprint_record
from pallas_fix.verify.judge.footprint_findings import footprint_findings
from pallas_fix.verify.judge.lift_cost import lift_costs
from pallas_fix.verify.judge.partial_blocks import partial_blocks, uncompared_message
from pallas_fix.verify.judge.tiling import created_violations
from pallas_fix.verify.worker.interpret_mode import reset_interpreters
from pallas_fix.verify.worker.interpreters import FAILS_TOO, GPU, HLO, TPU, compared_in, plan_interpreters
from pallas_fix.verify.worker.kernel_survey import pallas_call_infos, trace
from pallas_fix.verify.worker.races import RACES, races_found_flag, summarize_race
from pallas_fix.verify.worker.user_modules import resolve_entry


class _Abort(Exception):
    """Verification of this example stops with status "error" and this message."""


class _Refused(_Abort):
    """The rewrite would not compile on the device (a block Mosaic rejects): status "refused"."""


class _Uncompared(_Abort):
    """A partial block under a lift the interpreters can judge only where blocks divide
    (verify.judge.partial_blocks): status "unverified", nothing runs."""


@dataclass(frozen=True)
class _Failure:
    interpreter: str
    status: str  # "error" | "mismatch"
    message: str
    race: bool = False  # a race explains more than a mismatch: it is reported first


@dataclass(frozen=True)
class _InterpreterRun:
    outcome: str  # "ok", "race", "mismatch: ...", "error: ..."
    failure: Optional[_Failure]
    compared: list[LeafResult]


def verdict_record(entry: str, seeds: list, *, message: str = "", details: dict) -> dict:
    """A verdict with status "error" and nothing measured yet."""
    return {
        "entry": entry, "status": "error", "max_abs_err": None, "max_rel_err": None,
        "seeds": seeds, "interpreters": [], "dynamic_slices_before": None,
        "dynamic_slices_after": None, "seconds": 0.0, "message": message, "speed": [], "footprint": None,
        "findings": [], "details": details,
    }


def _dynamic_counts(fn: Callable, structs: list, jaxpr=None) -> tuple[Optional[tuple[int, int]], Optional[str]]:
    """(dynamic slices, dynamic scalar indices) per the oracle, or a note saying why they were
    not counted; traces ``fn`` unless its ``jaxpr`` is given. A squeezed block dim lifts scalars."""
    try:
        if jaxpr is None:
            jaxpr = trace(fn, structs)
        report = oracle.report_from_jaxpr(jaxpr)
        return (len(report.dynamic_slices()), len(report.scalars())), None
    except Exception as e:
        return None, f"dynamic slices not counted ({summarize_exc(e)})"


def _survey(v: dict, call: Call, f_orig: Callable, f_rew: Callable) -> list[dict]:
    """Trace both sides (nothing runs): the rewrite's pallas_calls, both sides' dynamic slices and
    on-chip bytes per grid step."""
    notes: list[str] = v["details"]["notes"]
    structs = call.shape_structs()
    try:
        jaxpr_rew = trace(call.bind(f_rew), structs)
        infos = pallas_call_infos(jaxpr_rew)
    except Exception as e:
        jaxpr_rew, infos, trace_error = None, None, e
    traced: list = []
    original_error = _trace_error(call.bind(f_orig), structs, traced)
    jaxpr_orig = traced[0] if traced else None
    before, note = _dynamic_counts(call.bind(f_orig), structs, jaxpr_orig)
    v["dynamic_slices_before"] = before[0] if before else None
    if note:
        notes.append(note)
    if infos is None:
        if original_error is not None:  # the example does not fit the code, the rewrite aside
            raise _Abort(f"{_the_example(call)} does not trace the original either; check the example: "
                         f"{summarize_exc(original_error)}{user_frame(original_error)}")
        # A check the user's code raises where the original traced: the rewrite's own guard
        # (rewrite.guards.shape_guards) rejecting a call outside its contract; ragged variants drop it.
        v["details"]["rejected_by_check"] = isinstance(trace_error, (ValueError, AssertionError)) and raised_by_user(trace_error)
        raise _Abort(f"tracing the rewrite failed: {summarize_exc(trace_error)}{user_frame(trace_error)}")
    after, note = _dynamic_counts(call.bind(f_rew), structs, jaxpr_rew)
    v["dynamic_slices_after"] = after[0] if after else None
    if before and after:
        v["details"]["dynamic_scalars"] = [before[1], after[1]]
    if note and note not in notes:
        notes.append(note)
    v["details"]["pallas_calls"] = infos
    _footprint(v, jaxpr_orig, infos)
    return infos


def _footprint(v: dict, jaxpr_orig, infos: list[dict]) -> None:
    """``footprint`` (the largest per-step bytes among each side's pallas_calls) and the PF301
    findings: a kernel over its backend's default on-chip limit on this example."""
    try:
        before = pallas_call_infos(jaxpr_orig) if jaxpr_orig is not None else None
    except Exception as e:
        v["details"]["notes"].append(f"on-chip footprint of the original not counted ({summarize_exc(e)})")
        return
    v["details"]["pallas_calls_original"] = before
    v["footprint"] = footprint_record(before, infos)
    v["findings"] = footprint_findings(before, infos, v["details"]["example"])
    v["speed"] = lift_costs(before, infos)


def _trace_error(fn: Callable, structs: list, keep: Optional[list] = None) -> Optional[Exception]:
    """The exception tracing ``fn`` raises, or None (and the jaxpr appended to ``keep``)."""
    try:
        jaxpr = trace(fn, structs)
    except Exception as e:
        return e
    if keep is not None:
        keep.append(jaxpr)
    return None


def _the_example(call: Call) -> str:
    """The example as the user gave it, and where it came from."""
    where = f" ({call.ex.origin})" if call.ex.origin else ""
    return f"the example `{call.ex.canonical()}`{where}"


class _SeedFailed(Exception):
    def __init__(self, seed: int, error: Exception):
        super().__init__(seed, error)
        self.seed = seed
        self.error = error


@dataclass(frozen=True)
class ReferenceRun:
    """The original, already run under the HLO interpreter on this example (while trying
    candidates, :mod:`~pallas_fix.verify.worker.candidate_trial`): its call, its jitted function and its
    outputs per seed, which verification reuses instead of running it again."""

    call: Call
    runner: Runner
    outputs: dict  # seed -> output leaves


def _hlo_outputs(fn: Callable, call: Call, seeds: list[int], known: Optional[ReferenceRun] = None) -> list:
    """Per-seed outputs of ``fn`` under the HLO interpreter (raises _SeedFailed); ``known``: the
    runs of ``fn`` that already happened."""
    runner = known.runner if known is not None else Runner(fn, call, True)
    outputs = []
    for seed in seeds:
        if known is not None and seed in known.outputs:
            outputs.append(known.outputs[seed])
            continue
        try:
            outputs.append(output_leaves(runner(call.inputs(seed))))
        except Exception as e:
            raise _SeedFailed(seed, e) from e
    return outputs


def _reference(call: Call, f_orig: Callable, f_rew: Callable, seeds: list[int],
               known: Optional[ReferenceRun] = None) -> tuple[list, Optional[str]]:
    """Per-seed outputs of the original under the HLO interpreter, and None; or, when the original
    cannot run at all (PF107), the rewrite's outputs and why the original cannot run."""
    try:
        return _hlo_outputs(f_orig, call, seeds, known), None
    except _SeedFailed as failed:
        original_broken = summarize_exc(failed.error)
        if not NON_SCALAR_START.search(original_broken):
            raise _Abort(f"{_the_example(call)} does not run the original under interpret (seed {failed.seed}); "
                         f"check the example: {original_broken}{user_frame(failed.error)}") from None
    # A start that is not an integer scalar (PF107) fails in every interpreter: there is
    # no reference. The rewrite can still be run everywhere and checked for agreement.
    try:
        return _hlo_outputs(f_rew, call, seeds), original_broken
    except _SeedFailed as failed:
        raise _Abort(f"the original cannot run ({original_broken}) and the rewrite failed too "
                     f"(seed {failed.seed}): {summarize_exc(failed.error)}{user_frame(failed.error)}") from None


def _race_failure(name: str, seed: int, bad: list[LeafResult]) -> _Failure:
    race = summarize_race(RACES.messages[0]) if RACES.messages else "races_found is set"
    extra = f"; outputs also differ: {bad[0].reason}" if bad else ""
    return _Failure(name, "error", f"{name} detected a data race on seed {seed}: {race}"
                    f" (likely a grid axis marked \"parallel\" that carries a dependency, e.g. a reduction:"
                    f" mark it \"arbitrary\"){extra}", race=True)


def _run_interpreter(name: str, interp: Any, f_rew: Callable, call: Call, runs: list) -> _InterpreterRun:
    """Run the rewrite under one interpreter on each (seed, reference outputs); stop at the
    first failure."""
    runner = Runner(f_rew, call, interp)
    compared: list[LeafResult] = []
    for seed, ref in runs:
        RACES.messages.clear()
        if name != HLO:
            reset_interpreters()
        try:
            got = output_leaves(runner(call.inputs(seed)))
        except Exception as e:
            reset_interpreters()
            msg = summarize_exc(e)
            failure = _Failure(name, "error", f"{name} raised on seed {seed}: {msg}{user_frame(e)}")
            return _InterpreterRun("error: " + msg, failure, compared)
        raced = bool(RACES.messages) or (name.startswith(TPU) and races_found_flag())
        results = compare_leaves(ref, got)
        compared += results
        bad = [r for r in results if not r.ok]
        if raced:
            return _InterpreterRun("race" + (" + mismatch" if bad else ""), _race_failure(name, seed, bad), compared)
        if bad:
            failure = _Failure(name, "mismatch", f"{name} mismatch on seed {seed}: {bad[0].reason}")
            return _InterpreterRun("mismatch: " + (bad[0].reason or ""), failure, compared)
    return _InterpreterRun("ok", None, compared)


def _judge_by_original(name: str, interp: Any, f_orig: Callable, call: Call, seed: int, ref: list,
                       run: _InterpreterRun, notes: list[str]) -> _InterpreterRun:
    """A rewrite that raises under a backend interpreter fails only if the original ran there, or
    failed differently: the original raising the same way (an out-of-bounds read TPU interpret
    mode rejects where the HLO interpreter clamps) leaves this interpreter nothing to compare.
    So does an original whose outputs GPU interpret mode gets wrong (they differ from the
    reference `ref`, as when it reads `pl.program_id` as 0): nobody runs such a kernel there. TPU
    interpret mode stands in for the chip: there, an original that runs counts as passing."""
    reset_interpreters()
    try:
        got = output_leaves(Runner(f_orig, call, interp)(call.inputs(seed)))
    except Exception as e:
        reset_interpreters()
        original = summarize_exc(e)
        rewrite = run.outcome.removeprefix("error: ")
        if _failure_kind(original) == _failure_kind(rewrite):
            notes.append(f"{name} could not compare: the original fails there the same way ({_failure_kind(original)})")
            return _InterpreterRun(f"{FAILS_TOO}: {original}", None, run.compared)
        failure = _Failure(name, "error", f"{run.failure.message}; the original fails there differently: {original}")
        return _InterpreterRun(run.outcome, failure, run.compared)
    reset_interpreters()
    bad = [r for r in compare_leaves(ref, got) if not r.ok] if name == GPU else []
    if bad:
        notes.append(f"{name} could not compare: the original runs there but gives other outputs than under interpret ({bad[0].reason})")
        return _InterpreterRun(f"{FAILS_TOO}: its outputs differ", None, run.compared)
    return run


def _failure_kind(message: str) -> str:
    """`JaxRuntimeError: IndexError: Out-of-bounds read` of a message: its error types and words,
    without the buffer ids, shapes and positions that differ between two programs."""
    head = ": ".join(message.split(": ")[:3])
    return re.split(r"[\d(\[]", head, maxsplit=1)[0].strip(" :")


def _failure_message(failures: list[_Failure]) -> tuple[str, str]:
    """(status, message): the first failure (a race first), then what the others caught."""
    first = next((f for f in failures if f.race), failures[0])
    first_reason = first.message.split(": ", 1)[1] if ": " in first.message else first.message
    also = []
    for f in failures:
        if f is first:
            continue
        reason = f.message.split(": ", 1)[1] if ": " in f.message else f.message
        if reason == first_reason:
            also.append(f"{f.interpreter}: same")
        else:
            also.append(f.message if len(f.message) <= 300 else f.message[:300] + "...")
    msg = first.message
    if also:
        msg += " [also failed: " + "; ".join(also) + "]"
    return first.status, msg


def _success_message(seeds_run: dict[str, list[int]], original_broken: Optional[str]) -> tuple[str, str]:
    """`seeds_run`: the interpreters whose outputs were compared (not one where the original fails
    the same way), with their seeds."""
    groups: dict[str, list[str]] = {}
    for name, ss in seeds_run.items():
        groups.setdefault(str(ss), []).append(name)
    which = ", ".join(f"seeds {k} ({', '.join(names)})" for k, names in groups.items())
    if original_broken is None:
        return "verified", f"outputs match on {which}"
    # Say which interpreters ran the rewrite: "agrees across interpreters" of one is no check.
    names = list(seeds_run)
    if len(names) > 1:
        ran = f"the rewrite runs in {', '.join(names[:-1])} and {names[-1]}, and their outputs agree on {which}"
    else:
        ran = f"the rewrite runs in {names[0]} (seeds {seeds_run[names[0]]}); no other interpreter ran it to compare with"
    return "unverified", (
        f"the original cannot run in any interpreter ({original_broken}), so there is nothing to compare against; {ran}"
    )


def _check(v: dict, call: Call, f_orig: Callable, f_rew: Callable, *, seeds: list[int],
           tpu_interpret: Optional[bool], gpu_interpret: bool, max_cores: int,
           backend_seeds: Optional[int], known: Optional[ReferenceRun], divided_only: bool = False) -> tuple[str, str]:
    """Fill ``v`` with what was measured; return (status, message without the notes)."""
    details = v["details"]
    infos = _survey(v, call, f_orig, f_rew)
    partial = partial_blocks(infos) if divided_only else []
    if partial:
        details["uncompared"] = partial
        raise _Uncompared(uncompared_message(_the_example(call), partial))
    tiling = created_violations(details.get("pallas_calls_original"), infos)
    if tiling:
        raise _Refused("; ".join(tiling) + " (interpret mode runs such blocks; compiled on a TPU they fail to lower)")
    plan, skip_notes = plan_interpreters(infos, tpu_interpret=tpu_interpret, gpu_interpret=gpu_interpret,
                                         max_cores=max_cores)
    details["notes"] += skip_notes
    ts = time.perf_counter()
    refs, original_broken = _reference(call, f_orig, f_rew, seeds, known)
    details["timings"]["reference"] = round(time.perf_counter() - ts, 3)
    seeds_run: dict[str, list[int]] = details.setdefault("seeds_per_interpreter", {})
    failures: list[_Failure] = []
    compared: list[LeafResult] = []
    for name, interp in [(HLO, True)] + plan:
        v["interpreters"].append(name)
        ts = time.perf_counter()
        n = len(seeds) if (name == HLO or backend_seeds is None) else max(1, backend_seeds)
        seeds_run[name] = list(seeds[:n])
        run = _run_interpreter(name, interp, f_rew, call, list(zip(seeds, refs))[:n])
        if run.failure is not None and name != HLO and run.failure.status == "error" and not run.failure.race:
            run = _judge_by_original(name, interp, f_orig, call, seeds[0], refs[0], run, details["notes"])
        if run.failure is not None:
            failures.append(run.failure)
        compared += run.compared
        details["timings"][name] = round(time.perf_counter() - ts, 3)
        details["outcomes"][name] = run.outcome
    v["max_abs_err"], v["max_rel_err"] = error_bounds(compared)
    if failures:
        return _failure_message(failures)
    if not compared:  # `main()` returning None: both ran, nothing showed they compute the same
        return "unverified", (f"{_the_example(call)} returns no array, so there was no output to compare; "
                              "give an example call of a function that returns the kernel's result")
    agreeing = compared_in(list(seeds_run), details["outcomes"])
    return _success_message({n: seeds_run[n] for n in agreeing}, original_broken)


def verify_example(orig_mod, rew_mod, ex: Example, *, seeds: list[int], tpu_interpret: Optional[bool],
                   gpu_interpret: bool, max_cores: int, backend_seeds: Optional[int] = 1,
                   known: Optional[ReferenceRun] = None, divided_only: bool = False) -> dict:
    """Verify one example. The HLO candidate runs every seed; the backend interpreters (TPU / GPU
    interpret mode: races, out-of-bounds blocks, dimension semantics, uninitialised memory, which
    do not depend on the input values) run the first ``backend_seeds`` seeds (None = all).
    ``known``: the original's runs on this example so far (its reference outputs are not
    computed again). ``divided_only``: an example where a block of the rewrite is partial is not
    compared (runner.verify_sources)."""
    t0 = time.perf_counter()
    v = verdict_record(ex.entry, list(seeds),
                       details={"example": ex.text, "timings": {}, "outcomes": {}, "notes": []})
    try:
        f_orig = resolve_entry(orig_mod, ex.entry)
        f_rew = resolve_entry(rew_mod, ex.entry)
    except LookupError as e:
        status, message = "error", str(e)
    else:
        try:
            call = known.call if known is not None else Call(ex, reference=f_orig)
            status, message = _check(v, call, f_orig, f_rew, seeds=seeds, tpu_interpret=tpu_interpret,
                                     gpu_interpret=gpu_interpret, max_cores=max_cores,
                                     backend_seeds=backend_seeds, known=known, divided_only=divided_only)
            notes = v["details"]["notes"]
            message += ("; " + "; ".join(notes)) if notes else ""
        except _Abort as e:
            status = "refused" if isinstance(e, _Refused) else "unverified" if isinstance(e, _Uncompared) else "error"
            message = str(e)
    v["status"] = status
    v["message"] = message
    v["seconds"] = round(time.perf_counter() - t0, 3)
    return v
