"""Red-team harness: run pallas-fix over the trap kernels in tests/fixtures/traps/ and check every rewrite.

Each trap file starts with a docstring and the headers

    # trap: <class>
    # trap-example: entry(f32[64, 128], ...)          (same grammar as pallas-fix examples)
    # trap-ragged-example: entry(f32[70, 128])         (optional: a shape that does not divide)
    # trap-check-example: other_entry(f32[64, 128])    (optional, repeatable: compared, never given to pallas-fix)
    # trap-int-range: 0 8                               (optional: the range the code's int inputs index)

For every trap and mode the trap is copied to a fresh temporary directory and pallas-fix runs on the copy:

    plain    pallas-fix --apply FILE
    unsafe   pallas-fix --apply --unsafe-fixes FILE
    example  pallas-fix --apply --unsafe-fixes --example HEADER [--example RAGGED] FILE
    gpu      pallas-fix --apply --target gpu-interpret FILE        (unroll / hoisted-start traps, or `# trap-gpu: yes`)

and two extra modes that show what the planner writes when nothing verifies it (pallas-fix also synthesises
example calls from a module's `__main__` block, so `plain` is verified whenever that block calls the entry):

    noverify      pallas-fix --apply --unsafe-fixes --no-verify FILE
    gpu-noverify  pallas-fix --apply --target gpu-interpret --no-verify FILE   (where gpu runs)

When the copy changed, a worker subprocess (benchmarks/trap_worker.py) imports the original and the rewrite
(importlib, from their paths), calls the entries of every example on random inputs (several seeds; floats N(0,1), x10 and x1000; ints in the
trap's index range and in a wide range) and compares the outputs (f32: rtol 1e-5 atol 1e-6; bf16/f16: rtol 1e-2
atol 1e-2). The kernels keep their own `interpret=True`. For TPU-style traps it also runs a race check: the
original and the rewrite with `interpret=pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)`
(TPU interpret mode splits "parallel" axes across two simulated cores), on the header example.

    .venv/bin/python benchmarks/bench_traps.py [TRAP ...] [--modes plain,unsafe,...] [--json OUT]

Stdlib and jax only; pallas_fix is never imported (only its command line tool is run).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAPS = ROOT / "tests" / "fixtures" / "traps"
MODES = ("plain", "unsafe", "example", "gpu", "noverify", "gpu-noverify")
GPU_CLASSES = ("unroll", "hoisted-start")
DEFAULT_INTS = (-8, 9)
WORKER = Path(__file__).resolve().parent / "trap_worker.py"


# ---------------------------------------------------------------- trap headers


def read_headers(path: Path) -> dict:
    text = path.read_text()
    one = lambda key: (re.search(rf"^# {key}:\s*(.+?)\s*$", text, re.M) or [None, None])[1]
    int_range = one("trap-int-range")
    return {
        "class": one("trap"),
        "example": one("trap-example"),
        "ragged": one("trap-ragged-example"),
        "checks": re.findall(r"^# trap-check-example:\s*(.+?)\s*$", text, re.M),
        "int_range": tuple(int(v) for v in int_range.split()) if int_range else DEFAULT_INTS,
        "gpu": one("trap-gpu") == "yes",
    }


# ---------------------------------------------------------------- running pallas-fix


def tool_command(tool: str, mode: str, file: Path, headers: dict) -> list[str]:
    cmd = [tool, "--apply"]
    if mode in ("unsafe", "example", "noverify"):
        cmd.append("--unsafe-fixes")
    if mode.endswith("noverify"):
        cmd.append("--no-verify")
    if mode == "example":
        for call in (headers["example"], headers["ragged"]):
            if call:
                cmd += ["--example", call]
    if mode.startswith("gpu"):
        cmd += ["--target", "gpu-interpret"]
    return cmd + [str(file)]


def run_tool(tool: str, mode: str, trap: Path, headers: dict, workdir: Path, timeout: float) -> dict:
    copy = workdir / mode / trap.name
    copy.parent.mkdir(parents=True)
    shutil.copy(trap, copy)
    cmd = tool_command(tool, mode, copy, headers)
    try:
        proc = subprocess.run(cmd, cwd=copy.parent, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = None, f"pallas-fix timed out after {timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
    text = copy.read_text()
    crashed = rc is None or rc >= 2 or "Traceback (most recent call last)" in out or "internal error" in out.lower()
    return {
        "command": " ".join(cmd).replace(str(copy), trap.name),
        "rc": rc,
        "output": out.replace(str(copy.parent) + os.sep, ""),
        "crashed": crashed,
        "changed": text != trap.read_text(),
        "rewrite": str(copy),
    }


def verification_refusals(output: str) -> list[str]:
    """The tool's own 'not written: ... verification failed' lines: a wrong plan that verification caught."""
    return [ln.strip()[:400] for ln in output.splitlines() if ln.startswith("not written") or "verification failed" in ln]


def tool_message(output: str, limit: int = 12) -> str:
    keep = [ln for ln in output.splitlines() if not ln.startswith(("---", "+++", "@@", "+", "-", " "))]
    keep += [ln for ln in output.splitlines() if "no fix" in ln and ln not in keep]
    return "\n".join(keep[:limit])


def run_worker(original: Path, rewrites: list[str], headers: dict, args, workdir: Path) -> dict:
    examples = [c for c in (headers["example"], headers["ragged"], *headers["checks"]) if c]
    spec = {"original": str(original), "rewrites": rewrites, "examples": examples, "seeds": args.seeds,
            "int_range": list(headers["int_range"]), "out": str(workdir / "results.json")}
    (workdir / "spec.json").write_text(json.dumps(spec))
    cmd = [sys.executable, str(WORKER), str(workdir / "spec.json")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.worker_timeout,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"})
    except subprocess.TimeoutExpired:
        return {p: {"status": "rewrite-fails-to-run", "how": "comparison timed out"} for p in rewrites}
    if proc.returncode != 0 or not Path(spec["out"]).exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {p: {"status": "rewrite-fails-to-run", "how": f"worker: {tail}"} for p in rewrites}
    return json.loads(Path(spec["out"]).read_text())


# ---------------------------------------------------------------- driver


def trap_paths(names: list[str]) -> list[Path]:
    if not names:
        return sorted(TRAPS.glob("*.py"))
    paths = []
    for name in names:
        p = Path(name)
        paths.append(p if p.exists() else TRAPS / (name if name.endswith(".py") else name + ".py"))
    return paths


def run_trap(trap: Path, args) -> list[dict]:
    headers = read_headers(trap)
    gpu = headers["class"] in GPU_CLASSES or headers["gpu"]
    modes = [m for m in args.modes if gpu or not m.startswith("gpu")]
    workdir = Path(tempfile.mkdtemp(prefix=f"trap_{trap.stem}_"))
    shutil.copy(trap, workdir / trap.name)
    runs = {m: run_tool(args.pallas_fix, m, trap, headers, workdir, args.timeout) for m in modes}
    by_text: dict[str, str] = {}
    for run in runs.values():
        if run["changed"]:
            by_text.setdefault(hashlib.sha1(Path(run["rewrite"]).read_bytes()).hexdigest(), run["rewrite"])
    checked = run_worker(workdir / trap.name, list(by_text.values()), headers, args, workdir) if by_text else {}
    records = []
    for mode, run in runs.items():
        result = {"status": "unchanged", "how": ""}
        if run["changed"]:
            digest = hashlib.sha1(Path(run["rewrite"]).read_bytes()).hexdigest()
            result = checked[by_text[digest]]
            if result["status"] == "rewritten-equal" and str(result.get("race", "")).startswith("FAIL"):
                result = {**result, "status": "WRONG", "how": f"race check: {result['race']}"}
        diff = "".join(difflib.unified_diff(trap.read_text().splitlines(True), Path(run["rewrite"]).read_text().splitlines(True),
                                            trap.name, trap.name + " (rewritten)")) if run["changed"] else ""
        records.append({"trap": trap.name, "class": headers["class"], "mode": mode, **result,
                        "tool_rc": run["rc"], "crashed": run["crashed"], "command": run["command"],
                        "caught_by_verification": verification_refusals(run["output"]),
                        "tool_message": tool_message(run["output"]), "tool_output": run["output"], "diff": diff})
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return records


def print_record(rec: dict) -> None:
    status = rec["status"] + (f" ({rec['how']})" if rec["how"] else "")
    race = f"  [race check: {rec['race']}]" if rec.get("race") and rec["status"] == "rewritten-equal" else ""
    crash = "  [TOOL CRASHED, rc %s]" % rec["tool_rc"] if rec["crashed"] else ""
    caught = "  [tool's verification refused a plan]" if rec["caught_by_verification"] else ""
    print(f"{rec['trap']:<45} {rec['mode']:<12} {status}{race}{crash}{caught}", flush=True)


def print_totals(records: list[dict]) -> None:
    print("\ntotals by mode:")
    for mode in MODES:
        rows = [r for r in records if r["mode"] == mode]
        if rows:
            counts = {s: sum(r["status"] == s for r in rows) for s in ("unchanged", "rewritten-equal", "WRONG", "rewrite-fails-to-run")}
            crashes = sum(r["crashed"] for r in rows)
            caught = sum(bool(r["caught_by_verification"]) for r in rows)
            print(f"  {mode:<12} " + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + f", tool crashes {crashes}, plans refused by the tool's verification {caught}")
    print("WRONG or failing by class and mode:")
    for cls in sorted({r["class"] for r in records}):
        bad = [r for r in records if r["class"] == cls and r["status"] in ("WRONG", "rewrite-fails-to-run")]
        if bad:
            print(f"  {cls}: " + "; ".join(f"{r['mode']} {r['trap']} ({r['status']})" for r in bad))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traps", nargs="*", help="trap files or names (default: all of tests/fixtures/traps)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--json", dest="json_out", help="write every result (with tool output and diff) here")
    parser.add_argument("--pallas-fix", default=str(ROOT / ".venv" / "bin" / "pallas-fix"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one pallas-fix run")
    parser.add_argument("--worker-timeout", type=float, default=900.0, help="seconds for one trap's comparison")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes: {sorted(unknown)}")
    records = []
    for trap in trap_paths(args.traps):
        for rec in run_trap(trap, args):
            print_record(rec)
            records.append(rec)
    print_totals(records)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
