"""What a lift costs in speed on TPU, at the example's shapes: the step-count model.

A lift turns a loop into grid steps. Where the original kept whole arrays on chip without a grid,
the grid pipelines its copies, and where the original does not fit on chip the lift is what
makes it compile. But where the original already fits and is already pipelined over other grid
axes (a grid of more than one step whose blocks move with it), the lift only multiplies the grid
steps, each with its fixed cost and, for a reduction, a read-modify-write of the scratch state:
measured on a TPU v5e (../shared/docs/pallas-notes.md, "Speed where the original fits") such
rewrites ran at 0.47-0.91x the original's speed (K-loop matmuls 0.54-0.89x, flash attention
0.47-0.91x), never faster. That is the model: such a lift trades speed for memory.

From the pallas_calls both sides made on the example (``pallas_call_infos``: ``steps``,
``windowed``, ``scratch_bytes``, ``on_chip``), one record per kernel whose grid steps the rewrite
multiplied, paired by kernel name as PF301 pairs them. Only TPU kernels (and those without
compiler params, which Pallas compiles through Mosaic on a TPU) are judged; the model says
nothing about GPUs. Pure Python; no jax.

A strip-mined lift (R2, rewrite.reduction.strip) walks several loop windows per step, with static
starts, where the one-window lift walked one; an online softmax's lift also keeps its statistics
lane-dense (rewrite.reduction.lanes), so each step's arithmetic runs on whole vector registers.
Where such a lift's steps still multiply, it is no trade of speed for memory from STRIP_PAYS
windows per step on: measured on the v5e where the original fit and was pipelined, 8 windows per
step with 2 to 8 times the steps ran 0.96-2.51x the original (6 cases: flash attention, causal
flash attention, a decode kernel over 128-row tiles, each in two runs; benchmarks/tpu_runs/
2026-12-07-1244-*.json, 2026-12-07-1302-long-strips.json, 2026-12-07-1336-all.json), 4 per step 1.35-1.42x (benchmarks/tpu_experiments,
flash_strip_lanes.py). A strip-mined K-loop matmul, whose lift changes no layout, ran 0.75x and
0.85x with twice the steps (2026-12-07-1312-long-strips-matmul.json): it stays a trade. The
windows per step at an example are read against the same rewrite walking one window per step
(``with_windows``).
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.core.speed import MEASURED, MODEL
from pallas_fix.verify.judge.footprint import format_bytes
from pallas_fix.verify.judge.footprint_findings import partner

_TPU = ("tpu", "generic")
STRIP_PAYS = 4  # windows per step from which a lane-dense strip-mined lift ran at least as fast
STRIP_MEASURED = "0.96-2.51x the original's speed on a TPU v5e where it fit and was pipelined"


def _bytes(call: dict) -> tuple[Optional[int], Optional[int]]:
    """(bytes in the limited space, the limit) of a call's on-chip record."""
    o = call.get("on_chip") or {}
    if not o.get("limit_space"):
        return None, None
    return o["by_space"].get(o["limit_space"], 0), o.get("limit_bytes")


def _record(before: dict, after: dict) -> Optional[dict]:
    s0, s1 = before.get("steps"), after.get("steps")
    if not isinstance(s0, int) or not isinstance(s1, int) or s1 <= s0:
        return None
    b0, limit = _bytes(before)
    b1, _ = _bytes(after)
    fits = b0 <= limit if b0 is not None and limit else None
    pipelined = s0 > 1 and bool(before.get("windowed"))
    scratch = (after.get("scratch_bytes") or 0) > (before.get("scratch_bytes") or 0)
    judged = before.get("backend") in _TPU
    return {"kernel": after.get("kernel"), "steps_before": s0, "steps_after": s1, "pipelined_before": pipelined,
            "before_bytes": b0, "after_bytes": b1, "limit_bytes": limit, "fits_before": fits,
            "adds_scratch": scratch, "trades_speed_for_memory": bool(judged and fits and pipelined)}


def lift_costs(before: Optional[list[dict]], after: Optional[list[dict]]) -> list[dict]:
    """One record per kernel whose grid steps the rewrite multiplied (see the module docstring):
    ``kernel``, ``steps_before``, ``steps_after``, ``pipelined_before``, ``before_bytes``,
    ``after_bytes``, ``limit_bytes``, ``fits_before``, ``adds_scratch``, ``trades_speed_for_memory``."""
    before, after = list(before or ()), list(after or ())
    out = []
    for i, call in enumerate(after):
        other = partner(call, i, after, before)
        record = _record(other, call) if other is not None else None
        if record is not None:
            out.append(record)
    return out


def with_windows(records: list[dict], one_window: list[dict], lane_dense: frozenset[str]) -> list[dict]:
    """`records` (a strip-mined rewrite's ``lift_costs`` at one example) with ``windows_per_step``
    for each kernel also in `one_window` (the same rewrite walking one window per step, at the same
    example: its steps over the strip's). A kernel in `lane_dense` (its lift keeps softmax
    statistics lane-dense) walking at least STRIP_PAYS windows is no trade (module docstring)."""
    ones = {r.get("kernel"): r.get("steps_after") for r in one_window}
    out = []
    for r in records:
        one, steps = ones.get(r.get("kernel")), r.get("steps_after")
        if isinstance(one, int) and isinstance(steps, int) and steps > 0:
            windows = one // steps
            pays = windows >= STRIP_PAYS and r.get("kernel") in lane_dense
            r = {**r, "windows_per_step": windows, "strip_pays": pays,
                 "trades_speed_for_memory": r["trades_speed_for_memory"] and not pays}
        out.append(r)
    return out


def held_lift(records: list[dict]) -> Optional[dict]:
    """The record that says a kernel's lift only trades speed for memory, when every example that
    judged it says so; None when one of them shows the lift is needed (the original does not fit
    there) or is expected at least as fast (the original had no pipelining)."""
    if not records or not all(r.get("trades_speed_for_memory") for r in records):
        return None
    return max(records, key=lambda r: r.get("before_bytes") or 0)


def trade_note(record: dict, example: str = "", windows: str = "") -> str:
    """The words a fix message gives a lift that trades speed for memory: the footprint before ->
    after, the steps before -> after (`windows`: how many of the loop's windows each step walks,
    for a strip-mined lift, whose steps the example still multiplied), and the model that
    expects it slower."""
    at = f" at {example}" if example else ""
    s0, s1 = record["steps_before"], record["steps_after"]
    per_step = " each reading and writing its scratch state," if record.get("adds_scratch") else ""
    limit = f" (limit {format_bytes(record['limit_bytes'])})" if record.get("limit_bytes") else ""
    footprint = ""
    if record.get("before_bytes") is not None and record.get("after_bytes") is not None:
        footprint = f"; on-chip per step {format_bytes(record['before_bytes'])} -> {format_bytes(record['after_bytes'])}{limit}"
    return (f"trades speed for memory on TPU: the original fits on chip{at} and is already pipelined over"
            f" {s0} grid steps; the rewrite takes {s1} steps (x{s1 / s0:.3g}),{' ' + windows + ',' if windows else ''}{per_step} so {MODEL}"
            f" expects it slower ({MEASURED}){footprint}")


def strip_note(record: dict, example: str = "") -> str:
    """The words a written strip-mined lift gets where the example's steps still multiplied
    (``with_windows``'s ``strip_pays``): how many steps, how many windows each, what such lifts
    measured."""
    s0, s1 = record["steps_before"], record["steps_after"]
    return (f"{'at ' + example if example else 'here'} it takes {s1} grid steps (x{s1 / s0:.3g}) of"
            f" {record['windows_per_step']} windows each, with lane-dense softmax statistics: such strip-mined lifts"
            f" ran {STRIP_MEASURED}")
