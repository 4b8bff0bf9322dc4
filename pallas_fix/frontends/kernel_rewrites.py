"""Verify and accept a file's rewrite one kernel at a time.

The policy (README, "What --apply writes"):

- a kernel's rewrite that verification proves equal on an example that reaches the kernel is
  accepted whatever its safety class: verification is how an unsafe fix becomes safe;
- a kernel no example reaches (or a file with no example) gets only its safe fixes (unsafe ones
  too with --unsafe-fixes), marked "not verified"; --require-verified refuses those. Where the
  file had examples but the original ran on none of them (verification was attempted and could
  not run), the kernel is marked ``unchecked`` too: the CLI says so and exits 1;
- a kernel whose rewrite fails verification keeps its original text, and the other kernels of the
  file still get theirs;
- a kernel the original cannot run at all (a one-element slice as a start: no interpreter accepts
  it) gets its safe start fix unverified, and the rest of its rewrite is then verified against
  the start-fixed text, which runs;
- a verified lift that only trades speed for memory on TPU (at every example that measured it,
  the original fits on chip and is already pipelined over a grid, and the lift multiplies its
  steps: pallas_fix.verify.judge.lift_cost) is refused, saying so, unless `lift_for_memory`
  (`--lift-for-memory`) asks for it; written, its message says so. A lift no example measured
  keeps this policy and, where the source shows the call already pipelined, says that its speed
  is unknown (core.speed). Where verification ran both kernels compiled on a TPU (JAX's default
  machine, verify.device), the measurement decides instead of the model: a rewrite at least
  0.95x the original's speed is written, saying how fast, and a slower lift of a call already
  pipelined is held back the same way, with the times (one that gives the call its pipelining
  is written, with the times).

Kernels are rewritten in the order of their first plan, each on top of the kernels accepted
before it, so every verification compares two texts that differ in one kernel only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from pallas_fix.core.config import Config
from pallas_fix.core.model import Finding
from pallas_fix.core.speed import OPTION
from pallas_fix.engine import START_FIXES, FixResult, analyze_source, fix_source, planned_kernels
from pallas_fix.rewrite.prefetch.index_text import ranged_example_note
from pallas_fix.verify.judge.lift_cost import held_lift, strip_note, trade_note
from pallas_fix.verify.runner import Verdict

# Measured on the chip, a rewrite below this fraction of the original's speed is held back like
# a lift the step-count model expects slower (issue 27's bar: none below 0.95x).
SLOWER = 0.95
# (original text, rewritten text, the kernel the rewrite changes) -> one verdict per example run;
# called with `divided_only=True` as well when the rewrite holds a lift the interpreters can
# compare only where its blocks divide (core.plans.FixPlan.divided_only).
Verifier = Callable[..., list[Verdict]]


@dataclass(frozen=True)
class KernelRewrite:
    kernel: Optional[str]
    status: str  # verified | not verified | failed | refused
    applied: tuple[str, ...] = ()  # plan descriptions, when the rewrite was accepted
    verdicts: tuple[Verdict, ...] = ()
    reason: str = ""
    # written unverified although the file had examples: the original ran on none of them
    unchecked: bool = False

    @property
    def accepted(self) -> bool:
        return self.status in ("verified", "not verified")


@dataclass
class FileRewrite:
    source: str  # the text to write: the original plus every accepted kernel rewrite
    kernels: list[KernelRewrite] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)  # the findings of `source`
    error: Optional[str] = None

    def accepted(self) -> list[KernelRewrite]:
        return [k for k in self.kernels if k.accepted]


def unit_names(kernel: Optional[str]) -> set[str]:
    """The kernel names a unit of rewriting stands for: one, or a call's variants picked by a name
    bound in each arm (`"_quantized_kernel, _full_kernel"`: engine.plan_kernel)."""
    return set(kernel.split(", ")) if kernel is not None else set()


def reached(verdict: Verdict, kernel: Optional[str]) -> bool:
    """Did the example run `kernel`? (the rewrite's traced pallas_calls name their kernels)"""
    calls = verdict.details.get("pallas_calls") or []
    return any(c.get("kernel") in unit_names(kernel) for c in calls)


def rewrite_by_kernel(
    source: str,
    path: str,
    config: Config,
    verifier: Optional[Verifier],
    *,
    allow_unsafe: bool,
    require_verified: bool = False,
    only_kernels: Optional[set[str]] = None,
    unverified_why: str = "no example call",
) -> FileRewrite:
    """Accept each kernel's rewrite on its own (see the module docstring). `verifier` is None
    when there is nothing to verify with, for the reason `unverified_why`."""
    try:
        order = planned_kernels(analyze_source(source, path, config, reach=True))
    except Exception as exc:  # the caller analysed this text already; a failure here is a bug
        return FileRewrite(source, error=f"internal error ({type(exc).__name__}: {exc})")
    if only_kernels is not None:
        order = [k for k in order if k in only_kernels]
    out = FileRewrite(source)
    for kernel in order:
        outcome, text = _one_kernel(out.source, path, config, kernel, verifier, allow_unsafe, require_verified, unverified_why)
        if outcome is not None:
            out.kernels.append(outcome)
            out.source = text
        if outcome is not None and outcome.status == "not verified" and outcome.reason == _NO_REFERENCE:
            # The original runs in no interpreter (a start none accepts); the safe start fix just
            # accepted makes it run. What is left (a lift) is verified against that text.
            again, text = _one_kernel(out.source, path, config, kernel, verifier, allow_unsafe, require_verified, unverified_why)
            if again is not None and again.status == "verified":
                out.kernels.append(again)
                out.source = text
    out.remaining = analyze_source(out.source, path, config, reach=True).findings
    return out


_NO_REFERENCE = "its examples had no original output to compare with"


def _one_kernel(current, path, config, kernel, verifier, allow_unsafe, require_verified, no_verifier_why):
    """(outcome, the text after it); outcome None when the kernel has nothing left to change."""
    if verifier is not None:
        candidate = fix_source(current, path, config, unsafe=True, kernels={kernel})
        if candidate.error:
            return KernelRewrite(kernel, "failed", reason=candidate.error), current
        if not candidate.changed:
            return None, current
        verdicts = tuple(verifier(current, candidate.source, kernel, **_divided_only(candidate)))
        failed = [v for v in verdicts if v.status not in ("verified", "unverified", "refused")]
        if failed and all(v.details.get("rejected_by_check") for v in failed):
            return KernelRewrite(kernel, "refused", verdicts=verdicts, reason=_outside_guard(failed[0], candidate)), current
        if failed:
            return KernelRewrite(kernel, "failed", verdicts=verdicts, reason=_failure(failed[0], candidate)), current
        refused = [v for v in verdicts if v.status == "refused"]
        if refused:  # the rewrite would not compile on the chip (verify.judge.tiling)
            reason = _failure(refused[0], candidate) + _original_unaligned(current, path, config, kernel)
            return KernelRewrite(kernel, "refused", verdicts=verdicts, reason=reason), current
        if any(v.ok and reached(v, kernel) for v in verdicts):
            return _verified(kernel, current, candidate, verdicts, config.lift_for_memory)
        ran = any(reached(v, kernel) for v in verdicts)
        unrun = [v.entry or "the file" for v in verdicts if v.status == "unverified"]
        unverified_why = _NO_REFERENCE if ran else _none_ran(unrun) if unrun else "no example reaches this kernel"
        unchecked = not ran and bool(unrun)
    else:
        verdicts, unverified_why, unchecked = (), no_verifier_why, False
    fallback = _unverified_fixes(current, path, config, kernel, allow_unsafe, start_only=unverified_why == _NO_REFERENCE)
    if fallback.error:
        return KernelRewrite(kernel, "failed", reason=fallback.error), current
    if not fallback.changed:
        unsafe_left = "its fixes are unsafe: they need verification or --unsafe-fixes"
        return KernelRewrite(kernel, "refused", verdicts=verdicts, reason=f"{unverified_why}, and {unsafe_left}"), current
    if require_verified:
        return KernelRewrite(kernel, "refused", verdicts=verdicts, reason=f"not verified ({unverified_why}) and --require-verified is set"), current
    return KernelRewrite(kernel, "not verified", _static_notes(fallback), verdicts, reason=unverified_why,
                         unchecked=unchecked), fallback.source


def _divided_only(candidate: FixResult) -> dict:
    """The verifier's keyword for a rewrite with a lift the interpreters can check only where its
    blocks divide their arrays (core.plans.FixPlan.divided_only); none otherwise, so that a
    verifier that takes three arguments still serves every other rewrite."""
    return {"divided_only": True} if candidate.divided_only else {}


def _none_ran(entries: list[str]) -> str:
    """Why a kernel no example reached is unverified when some examples did not run the original
    at all ("unverified" verdicts: none of an entry's candidates ran, the original did not import):
    this kernel may be the one they would have reached."""
    names = ", ".join(dict.fromkeys(entries))
    return f"no example reaches this kernel: the original ran on none of the examples of {names} (see above)"


def _unverified_fixes(current, path, config, kernel, allow_unsafe, *, start_only: bool) -> FixResult:
    """The fixes written without verification. When the original ran nowhere, only its start fixes
    (what makes it run): the rest is then verified against the start-fixed text, and is not
    written unless it runs in every interpreter that text runs in."""
    if start_only:
        started = fix_source(current, path, config, unsafe=allow_unsafe, kernels={kernel}, codemods=set(START_FIXES))
        if started.error or started.changed:
            return started
    return fix_source(current, path, config, unsafe=allow_unsafe, kernels={kernel})


def _verified(kernel, current: str, candidate: FixResult, verdicts: tuple, lift_for_memory: bool):
    """The verified rewrite, or its refusal when it only trades speed for memory (module docstring);
    as `_one_kernel` returns them."""
    measured = [(r, v.example) for v in verdicts if v.ok and reached(v, kernel) for r in v.speed if r.get("kernel") in unit_names(kernel)]
    windows = next((p.windows for p in candidate.pipelined if p is not None and p.windows), "")
    held, note = memory_trade(measured, windows)
    timed = chip_times([v for v in verdicts if v.ok and reached(v, kernel)])
    if timed is not None:  # a measurement on the chip outranks the step-count model
        ratio, words = timed
        if ratio >= SLOWER or held is None:  # as fast, or a call the lift gives its pipelining
            applied = tuple(f"{d}; {words}" for d in candidate.applied)
            return KernelRewrite(kernel, "verified", applied, verdicts), candidate.source
        note = f"trades speed for memory: the original fits on chip and is already pipelined; {words}"
    if held is None:  # no example measured the steps: the source's note (core.speed), if any
        # An example that ran the kernel measured its steps: none multiplied (a strip-mined lift
        # whose windows per step cover the loop there) is no trade of speed for memory.
        applied = tuple(candidate.applied) if measured or steps_counted(verdicts, kernel) else _static_notes(candidate)
        strips = [(r, e) for r, e in measured if r.get("strip_pays")]
        if strips and applied:  # the steps multiplied, by a strip-mined lift measured to pay (judge.lift_cost)
            record, example = max(strips, key=lambda m: m[0]["steps_after"] / m[0]["steps_before"])
            applied = (*applied[:-1], f"{applied[-1]}; {strip_note(record, example)}")
        return KernelRewrite(kernel, "verified", applied, verdicts), candidate.source
    if not lift_for_memory:
        what = "; ".join(candidate.applied) or "the rewrite"
        return KernelRewrite(kernel, "refused", verdicts=verdicts, reason=f"{what}: {note}; {OPTION}"), current
    lifts = [n for n, p in enumerate(candidate.pipelined) if p is not None] or [len(candidate.applied) - 1]
    applied = [f"{d}; {note}" if n in lifts else d for n, d in enumerate(candidate.applied)]
    return KernelRewrite(kernel, "verified", tuple(applied), verdicts), candidate.source


def steps_counted(verdicts, kernel) -> bool:
    """Did an example count the kernel's grid steps on both sides (as lift_cost pairs them)?
    Then no lift_cost record means the rewrite did not multiply them."""
    def counted(calls) -> bool:
        return any(c.get("kernel") in unit_names(kernel) and isinstance(c.get("steps"), int) for c in calls or ())

    return any(v.ok and counted(v.details.get("pallas_calls")) and counted(v.details.get("pallas_calls_original"))
               for v in verdicts)


def chip_times(verdicts: list[Verdict]) -> Optional[tuple[float, str]]:
    """(the lowest speed ratio original / rewrite, its words) over the examples timed compiled on
    a TPU (verify.device) where both ran; None when none was."""
    runs = [(v.details["device"], v.example) for v in verdicts if (v.details.get("device") or {}).get("ms", {}).keys() >= {"original", "rewrite"}]
    if not runs:
        return None
    run, example = min(runs, key=lambda r: r[0]["ms"]["original"] / r[0]["ms"]["rewrite"])
    before, after = run["ms"]["original"], run["ms"]["rewrite"]
    return before / after, (f"measured on the {run['chip']} at {example}: {before:.3g} ms -> {after:.3g} ms per call "
                            f"({before / after:.2f}x the original's speed)")


def memory_trade(measured: list[tuple[dict, str]], windows: str = "") -> tuple[Optional[dict], str]:
    """(the record, its note) when a kernel's lift only trades speed for memory at every example
    that measured it, else (None, ""). `measured`: (a ``lift_cost.lift_costs`` record of the
    kernel, the example that made it). Plain --apply holds such a lift back unless
    `lift_for_memory`; benchmarks/bench_tpu.py reports its rows by the same rule."""
    held = held_lift([r for r, _ in measured])
    if held is None:
        return None, ""
    return held, trade_note(held, next(e for r, e in measured if r is held), windows)


def _original_unaligned(source: str, path: str, config: Config, kernel) -> str:
    """`; the original will not compile on TPU either: ...` when the kernel has windows Mosaic
    cannot prove aligned (PF302), else ""."""
    found = [f for f in analyze_source(source, path, config, reach=True).findings if f.code == "PF302" and f.kernel == kernel]
    if not found:
        return ""
    return f"; the original will not compile on TPU either (PF302, line {found[0].span.line}: {found[0].message})"


def _static_notes(fixed: FixResult) -> tuple[str, ...]:
    """The applied descriptions, each lift of an already pipelined call saying what the source
    alone tells of its speed (no example measured it)."""
    return tuple(f"{d}; {p.note()}" if p is not None else d for d, p in zip(fixed.applied, fixed.pipelined))


def _outside_guard(verdict: Verdict, candidate: FixResult) -> str:
    """Why a lift whose own check (rewrite.guards.shape_guards) rejects the user's example is refused: the
    lift is exact only for calls that pass the check, and writing it would make the wrapper reject
    a call the original accepts (issue 26: refuse rather than narrow). Not a broken rewrite."""
    what = "; ".join(candidate.applied) or "the rewrite"
    return (f"{what}: not applied: the check it adds rejects {verdict.example or verdict.entry} "
            f"({verdict.message.removeprefix('tracing the rewrite failed: ')}), a call the original accepts; "
            "the lift is exact only for calls that pass the check, so it would narrow what the kernel takes")


def _failure(verdict: Verdict, candidate: FixResult) -> str:
    what = "; ".join(candidate.applied) or "the rewrite"
    said = f"{what}: {verdict.status} on {verdict.example or verdict.entry}: {verdict.message}".rstrip(": ")
    if verdict.status == "mismatch":
        said += ranged_example_note(list(candidate.applied), verdict.example or "")
    return said
