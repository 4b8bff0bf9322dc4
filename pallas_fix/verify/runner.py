"""Prove a rewrite: run original and rewritten kernels through the Pallas interpreters.

:func:`verify_sources` starts one worker process per file (``python -m pallas_fix.verify.worker.main``,
see that module for the protocol) that verifies every example of the file, and kills its process
group when ``timeout_s`` runs out. This module never imports jax and never writes to the user's
tree (the worker gets the sources through a temp dir).

What runs, per example:

* reference: the original under ``interpret=True`` (HLO interpreter), once per seed;
* candidates: the rewrite under ``interpret=True`` and, where the backend's own interpreter can run
  the rewritten form,
  - ``tpu-interpret``: ``pltpu.InterpretParams(detect_races=True)`` (auto: any kernel that is not
    Mosaic GPU or Triton; TPU interpret mode rejects ``plgpu.CompilerParams`` / ``plgpu.SMEM``);
  - ``tpu-interpret-Ncores``: the same with ``num_cores_or_threads=N`` and another random order of
    the parallel grid coordinates, when a TPU kernel has a "parallel" grid prefix of P > 1 points;
    N = min(P, max_cores). N = 2 is not enough in general: the interpreter gives each core a
    contiguous chunk of the parallel sub-grid, so a reduction axis wrongly marked "parallel" only
    races when a chunk boundary falls inside it (grid (2, 2, 4) needs 8 cores); one point per core
    (capped) makes every pair of points concurrent;
  - ``gpu-interpret``: ``plgpu.InterpretGPUParams()``, only with ``gpu_interpret=True`` (it only
    runs whole-array blocks; ``pl.program_id`` is silently 0 there).
* seeds: every array argument gets fresh random values per seed, their scale varying with the
  seed (seed % 3: floats N(0, 1), x8, heavy-tailed up to 64; integers within 4, 32, 256; fair
  bools); an integer operand the original uses as an index stays inside what it indexes
  (:mod:`~pallas_fix.verify.worker.index_ranges`); every interpreter sees the same inputs. The HLO
  candidate runs every seed (numerics); the backend interpreters run the first ``backend_seeds``
  (default 1): what they add (races, out-of-bounds blocks, dimension semantics, uninitialised
  memory) does not depend on the input values, and each extra seed costs ~0.1-0.3 s there.
* each interpreter's function is jitted once and reused across seeds (the interpreter choice is
  part of jax's jit key, so a user's own ``@jax.jit`` entry is re-traced per interpreter).
* every output leaf is compared (:mod:`pallas_fix.verify.judge.compare`); a race reported by TPU
  interpret mode is a failure too.
* ragged variants: when the original calls ``pl.cdiv`` (or spells it by hand, `(n + b - 1) // b`:
  :mod:`~pallas_fix.verify.examples.ceilings`) or masks with an iota, a verified example
  is verified again with the sizes that divide made non-multiples (:mod:`~pallas_fix.verify.worker.ragged`),
  and when it pads with ``jnp.pad`` by nothing, with the padded dims made sizes the padding changes;
  the verdict names the shapes that ran, and a variant the original rejects is dropped.

Examples using 64-bit dtypes (f64, i64, u64) switch on ``jax_enable_x64`` for the whole worker
(all examples of that file).

The first failing interpreter (in the order above; a data race first) decides the status: ``"mismatch"`` for output
differences, ``"error"`` for exceptions and data races; the message names the interpreter, the
seed, the output leaf and the errors, and lists what the other interpreters caught. A rewrite
giving a TPU kernel a block Mosaic rejects is ``"refused"`` (:mod:`pallas_fix.verify.judge.tiling`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from pallas_fix.core.example_values import origin_phrase
from pallas_fix.core.examples import example_to_json, parse_example
from pallas_fix.verify.device.chip import tpu_visible
from pallas_fix.verify.examples.ceilings import observed_source
from pallas_fix.verify.examples.candidates import (ExampleCandidates, NoCandidateRan, ToVerify, candidates_to_json,
                                                  no_example_message, none_ran, settled_from_cache, store_choices)
from pallas_fix.verify.judge.footprint import format_bytes
from pallas_fix.verify.judge.footprint_findings import format_finding
from pallas_fix.verify.examples.synthesised import suggested_example
from pallas_fix.verify.worker.interpreters import compared_in
from pallas_fix.verify.judge.lift_cost import trade_note
from pallas_fix.verify.worker_process import run_worker_job

__all__ = ["Verdict", "verify_sources", "format_verdict", "JSON_KEYS"]

JSON_KEYS = (
    "entry",
    "status",
    "max_abs_err",
    "max_rel_err",
    "seeds",
    "interpreters",
    "dynamic_slices_before",
    "dynamic_slices_after",
    "seconds",
    "message",
    "example",  # the call that was run, in the example grammar ("" when none ran)
    "origin",  # where it came from: "--example", "comment", "synthesised from ...", ...
    "speed",  # per kernel whose grid steps a lift multiplied: steps, footprint, fits (pallas_fix.verify.judge.lift_cost)
    "footprint",  # {"before_bytes", "after_bytes"}: on-chip bytes per grid step (None: not counted)
    "findings",  # what verification found on the example: PF301 (pallas_fix.verify.judge.footprint_findings)
)



@dataclass
class Verdict:
    entry: str
    status: str  # verified | mismatch | error | refused | unverified | timeout
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    seeds: list = field(default_factory=list)
    interpreters: list = field(default_factory=list)  # "interpret", "tpu-interpret", ...
    dynamic_slices_before: Optional[int] = None
    dynamic_slices_after: Optional[int] = None
    seconds: float = 0.0
    message: str = ""
    example: str = ""
    # Not part of to_json(): the worker's per-interpreter details (timings, outcomes, traced
    # pallas_calls, notes).
    details: dict = field(default_factory=dict)
    origin: Optional[str] = None
    # The bytes one grid step holds on chip, the largest among the entry's pallas_calls, original
    # and rewrite: {"before_bytes": N, "after_bytes": M} (pallas_fix.verify.judge.footprint).
    footprint: Optional[dict] = None
    # Findings only verification can make, on this example (PF301: a kernel over its backend's
    # default on-chip limit per step; pallas_fix.verify.judge.footprint_findings), as JSON dicts.
    findings: list = field(default_factory=list)
    # Per kernel whose grid steps a lift multiplied (pallas_fix.verify.judge.lift_cost).
    speed: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    @property
    def untouched(self) -> bool:
        """Verified, with the oracle counting as many dynamic slices and dynamic scalar indices
        after the rewrite as before (its kernels are usually not the ones rewritten)."""
        scalars = self.details.get("dynamic_scalars")
        return (
            self.ok and self.dynamic_slices_before is not None
            and self.dynamic_slices_before == self.dynamic_slices_after
            and (not scalars or scalars[0] == scalars[1])
        )

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in JSON_KEYS}

    @classmethod
    def from_worker(cls, d: dict) -> "Verdict":
        details = dict(d.get("details") or {})
        return cls(
            entry=d.get("entry", ""),
            status=d.get("status", "error"),
            max_abs_err=d.get("max_abs_err"),
            max_rel_err=d.get("max_rel_err"),
            seeds=list(d.get("seeds") or []),
            interpreters=list(d.get("interpreters") or []),
            dynamic_slices_before=d.get("dynamic_slices_before"),
            dynamic_slices_after=d.get("dynamic_slices_after"),
            seconds=float(d.get("seconds") or 0.0),
            message=d.get("message", ""),
            example=details.get("example", ""),
            details=details,
            footprint=d.get("footprint"),
            findings=list(d.get("findings") or []),
            speed=list(d.get("speed") or []),
        )


def _fmt_err(x: Optional[float]) -> str:
    return "n/a" if x is None else "0.0" if x == 0 else f"{x:.3g}"


def _slices(n: Optional[int]) -> str:
    return "?" if n is None else str(n)


def format_verdict(v: Verdict) -> str:
    """One line: ``verified matmul: 3 dynamic slices -> 0, max abs err 0.0 (interpret,
    tpu-interpret), on-chip per step: 544 KiB → 176 KiB`` (the footprint when it was counted), then,
    when the verdict knows them, the example and its origin: `` — on matmul(f32[256, 512],
    f32[512, 256]), synthesised from the __main__ block, k.py:40``; then, indented, one line per
    finding (``PF301 warning (original, k.py:23): kernel `k` holds 32 MiB of VMEM ...``) and one per
    lift that only trades speed for memory (``kernel `k`: trades speed for memory on TPU: ...``)."""
    line = _verdict_line(v)
    if v.example and v.origin and v.status != "unverified":
        line += f" — on {v.example}, {origin_phrase(v.origin)}"
    trades = [f"kernel `{r.get('kernel')}`: {trade_note(r)}" for r in v.speed if r.get("trades_speed_for_memory")]
    return "\n  ".join([line, *(format_finding(f) for f in v.findings), *trades])


def _verdict_line(v: Verdict) -> str:
    interps = f" ({', '.join(v.interpreters)})" if v.interpreters else ""
    if v.status == "verified":
        compared = compared_in(v.interpreters, v.details.get("outcomes") or {})  # not one that checked nothing
        interps = f" ({', '.join(compared)})" if compared else ""
        if v.dynamic_slices_before is None and v.dynamic_slices_after is None:
            counts = "dynamic slices not counted"
        else:
            noun = "dynamic slice" if v.dynamic_slices_before == 1 else "dynamic slices"
            counts = f"{_slices(v.dynamic_slices_before)} {noun} -> {_slices(v.dynamic_slices_after)}"
        return f"verified {v.entry}: {counts}, max abs err {_fmt_err(v.max_abs_err)}{interps}{_footprint(v)}"
    name = v.entry or "(no entry)"
    if v.status == "unverified":
        return f"unverified {name}: {v.message}"
    return f"{v.status} {name}: {v.message}{interps}"


def _footprint(v: Verdict) -> str:
    """``, on-chip per step: 8.0 MiB → 288 KiB``, or "" when not counted (a side over its limit
    is a PF301 finding, on a line of its own)."""
    fp = v.footprint or {}
    if fp.get("before_bytes") is None or fp.get("after_bytes") is None:
        return ""
    return f", on-chip per step: {format_bytes(fp['before_bytes'])} → {format_bytes(fp['after_bytes'])}"


def _unverified(path: str, seeds: Sequence[int], source: str) -> Verdict:
    return Verdict(entry="", status="unverified", seeds=list(seeds),
                   message=f"not verified: {no_example_message(path, suggested_example(source, path) or 'ENTRY(f32[...])')}")


def verify_sources(
    original_src: str,
    rewritten_src: str,
    examples: Sequence[ToVerify],
    *,
    path: str = "<kernel>",
    timeout_s: float = 120,
    seeds: Sequence[int] = (0, 1, 2),
    gpu_interpret: bool = False,
    tpu_interpret: Optional[bool] = None,
    max_cores: int = 16,
    backend_seeds: Optional[int] = 1,
    python: Optional[str] = None,
    divided_only: bool = False,
    on_chip: bool = True,
) -> list[Verdict]:
    """Verify ``rewritten_src`` against ``original_src`` on every example; one Verdict each.

    No examples -> a single ``"unverified"`` Verdict (entry ``""``). An entry's synthesised
    candidates (:class:`~pallas_fix.verify.examples.candidates.ExampleCandidates`) are tried in the
    same worker, and what it keeps is cached. ``tpu_interpret``: ``None``
    = automatic (see the module docstring), ``True``/``False`` force it on/off. ``timeout_s`` bounds
    the whole worker (all examples); examples not finished in time get status ``"timeout"``.
    ``max_cores`` caps the multi-core TPU pass. ``backend_seeds``: how many of the seeds the
    backend interpreters (TPU / GPU interpret mode) run (None = all); the HLO candidate always runs
    every seed. ``python``: the interpreter for the worker (default: this one). ``divided_only``:
    the rewrite holds a lift whose partial last block the interpreters cannot check against the
    original's clamped window (rewrite.proofs.ragged_blocks), so an example where some block of
    the rewrite is partial is not compared: "unverified", or a ragged variant dropped, saying why.
    ``on_chip``: False skips the compiled run on a TPU (a second check in the interpreters only).
    """
    seeds = [int(s) for s in seeds]
    if not examples:
        return [_unverified(path, seeds, original_src)]
    settled = settled_from_cache(examples)
    to_run = [e for e in settled if not isinstance(e, NoCandidateRan)]
    ran = iter(_run_job(original_src, rewritten_src, to_run, path=path, timeout_s=timeout_s, seeds=seeds,
                        gpu_interpret=gpu_interpret, tpu_interpret=tpu_interpret, max_cores=max_cores,
                        backend_seeds=backend_seeds, python=python, divided_only=divided_only,
                        on_chip=on_chip) if to_run else [])
    return [Verdict(entry=e.entry, status="unverified", seeds=list(seeds), message=e.message)
            if isinstance(e, NoCandidateRan) else next(ran) for e in settled]


def _run_job(original_src: str, rewritten_src: str, examples: list[ToVerify], *, path: str, timeout_s: float,
             seeds: list[int], gpu_interpret: bool, tpu_interpret: Optional[bool], max_cores: int,
             backend_seeds: Optional[int], python: Optional[str], divided_only: bool = False,
             on_chip: bool = True) -> list[Verdict]:
    """One worker for every example; caches the candidates it kept."""
    job = {
        "original": {"source": original_src, "path": path, "observed": observed_source(original_src)},
        "rewritten": {"source": rewritten_src, "path": path},
        "examples": [candidates_to_json(e) if isinstance(e, ExampleCandidates) else example_to_json(e)
                     for e in examples],
        "seeds": seeds,
        "gpu_interpret": bool(gpu_interpret),
        "tpu_interpret": tpu_interpret,
        "max_cores": int(max_cores),
        "backend_seeds": backend_seeds,
        "divided_only": bool(divided_only),
    }
    run = run_worker_job(job, "pallas-fix-verify-", timeout_s, python)
    verdicts = _assemble(run.records, examples, seeds, timed_out=run.timed_out, rc=run.rc,
                         elapsed=run.elapsed, timeout_s=timeout_s, stderr_tail=run.stderr_tail)
    store_choices(examples, [v.details.get("candidate") for v in verdicts])
    if on_chip and tpu_visible():
        _on_chip(job, verdicts, timeout_s, python)
    return verdicts


def _on_chip(job: dict, verdicts: list[Verdict], timeout_s: float, python: Optional[str]) -> None:
    """On a machine with a TPU: every verified example's original and rewrite compiled there, in
    a worker that sees it (verify.device); a compile error the original has not, or outputs that
    differ, fail the verdict, and otherwise its message says how each ran and how fast."""
    chosen = []
    for v in verdicts:
        try:
            chosen.append((v, parse_example(v.example)) if v.ok and v.example else None)
        except ValueError:  # a recorded call's text: no example to rebuild it from
            chosen.append(None)
    todo = [c for c in chosen if c is not None]
    if not todo:
        return
    chip_job = {**job, "examples": [example_to_json(ex) for _, ex in todo], "chip": True}
    run = run_worker_job(chip_job, "pallas-fix-chip-", timeout_s, python, platforms="")
    records = {int(r["index"]): r for r in run.records if r.get("type") == "chip"}
    for n, (v, _) in enumerate(todo):
        r = records.get(n) or {"error": f"the chip check did not finish ({run.stderr_tail.splitlines()[-1:] or run.rc})"}
        if "error" in r:
            v.message += f"; not run on the TPU: {r['error']}"
            continue
        v.details["device"] = r["device"]
        if r.get("failure"):
            v.status = "error" if r["device"].get("mismatch") is None else "mismatch"
            v.message = r["failure"]
        else:
            v.message += f"; {r['note']}"


def _assemble(records, examples, seeds, *, timed_out, rc, elapsed, timeout_s, stderr_tail) -> list[Verdict]:
    by_index: dict[int, Verdict] = {}
    begun: set[int] = set()
    fatal = None
    for r in records:
        t = r.get("type")
        if t == "verdict":
            by_index[int(r["index"])] = Verdict.from_worker(r)
        elif t == "begin":
            begun.add(int(r["index"]))
        elif t == "fatal":
            fatal = r.get("message", "")
    done_seconds = sum(v.seconds for v in by_index.values())
    out = []
    for i, ex in enumerate(examples):
        if i in by_index:
            v = by_index[i]
            if not v.example and not isinstance(ex, ExampleCandidates):
                v.example = ex.text
            v.origin = v.details.get("origin", ex.origin)  # the kept candidate's, for candidates
            choice = v.details.get("candidate") or {}
            if isinstance(ex, ExampleCandidates) and v.status == "unverified" and "index" in choice and choice["index"] is None:
                v.message = none_ran(ex, list(choice.get("outcomes") or [])).message  # as a cached run says it
            if v.untouched:
                v.message += "; the rewrite left this entry's dynamic slices as they were"
            out.append(v)
            continue
        if timed_out:
            where = "while verifying it" if i in begun else "before it started"
            msg = f"verification exceeded timeout_s={timeout_s:g}s (worker killed {where}; {elapsed:.1f}s elapsed)"
            status = "timeout"
        else:
            status = "error"
            why = fatal or (stderr_tail.splitlines()[-1] if stderr_tail else f"exit code {rc}")
            msg = f"verification worker died (exit code {rc}): {why}"
        out.append(Verdict(entry=ex.entry, status=status, seeds=list(seeds), seconds=round(
            max(0.0, elapsed - done_seconds) if i in begun or not by_index else 0.0, 3), message=msg,
            example=ex.text, details={"stderr_tail": stderr_tail}, origin=ex.origin))
    return out
