"""Cost of verification vs. one plain interpret-mode run of original + rewrite.

    .venv/bin/python benchmarks/bench_verify.py [--pair matmul|elementwise] [--repeat 3]

Baseline ("one run"): original and rewrite each called once under ``interpret=True`` (the HLO
interpreter) on one input: trace + compile + run, no comparison.
Full: :func:`pallas_fix.verify.verify_sources` with defaults (3 seeds, reference + every candidate
interpreter it picks, dynamic-slice counting, comparison).

With ``--synthesise`` the full run starts from the pair's text without its example comments and
includes finding the example (:func:`collect_examples` with ``synthesise=True``: the `__main__`
calls and calls built from the code, which the verification worker tries before verifying with
the first one the original runs on; an empty cache each round), as plain ``pallas-fix`` does on a
file nobody annotated.

Both are measured two ways, and both are reported:
* with process start-up: wall time of a fresh ``python`` process doing the work (baseline: a child
  running this script with ``--baseline-child``; full: ``verify_sources``, which starts the
  worker), including interpreter start, ``import jax`` and importing the two modules;
* without start-up: the time measured inside that process after imports (baseline: around the two
  calls; full: the sum of the verdicts' ``seconds``, which excludes worker start and module import).
The target is a ratio of about 3x or less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "verify"
PAIRS = {
    "matmul": ("matmul_before.py", "matmul_after.py"),
    "elementwise": ("elementwise_before.py", "elementwise_after.py"),
}


def _baseline_child(pair: str) -> None:
    """In a fresh process: import both modules, run each once under interpret=True."""
    t_start = time.perf_counter()
    import importlib.util

    import jax
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from pallas_fix.verify.examples.sources import collect_examples
    from pallas_fix.verify.worker.calls import Call
    from pallas_fix.verify.worker.interpret_mode import forced_interpreter, install_patches
    from pallas_fix.verify.worker.user_modules import resolve_entry

    install_patches()
    before, after = PAIRS[pair]
    mods = []
    for name in (before, after):
        spec = importlib.util.spec_from_file_location(name[:-3], FIX / name)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    ex = collect_examples(FIX / before)[0]
    call = Call(ex)
    inputs = call.inputs(0)
    t0 = time.perf_counter()
    with forced_interpreter(True):
        for mod in mods:
            fn = jax.jit(call.bind(resolve_entry(mod, ex.entry)))
            jax.block_until_ready(fn(*inputs))
    t1 = time.perf_counter()
    print(json.dumps({"run_s": t1 - t0, "in_process_total_s": t1 - t_start}))


def _baseline(pair: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--baseline-child", "--pair", pair],
        check=True, capture_output=True, text=True,
        env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
    )
    wall = time.perf_counter() - t0
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return wall, data["run_s"]


def _unannotated(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("# pallas-fix:"))


def _full(pair: str, synthesise: bool):
    sys.path.insert(0, str(ROOT))
    from pallas_fix.verify.examples.sources import collect_examples
    from pallas_fix.verify.runner import verify_sources

    before, after = PAIRS[pair]
    src_b = (FIX / before).read_text()
    src_a = (FIX / after).read_text()
    t0 = time.perf_counter()
    if synthesise:
        src_b, src_a = _unannotated(src_b), _unannotated(src_a)
        with tempfile.TemporaryDirectory() as cache:
            os.environ["PALLAS_FIX_CACHE_DIR"] = cache  # nothing found in an earlier round
            examples = collect_examples(FIX / before, src_b, synthesise=True, pyproject=False)
    else:
        examples = collect_examples(FIX / before, src_b)
    t_examples = time.perf_counter() - t0
    assert examples, "no example found"
    verdicts = verify_sources(src_b, src_a, examples, path=str(FIX / before))
    wall = time.perf_counter() - t0
    assert all(v.status == "verified" for v in verdicts), [v.message for v in verdicts]
    found = ", ".join(f"{len(e.candidates)} candidates for {e.entry}" if hasattr(e, "candidates") else e.canonical()
                      for e in examples)
    print(f"  examples gathered in {t_examples:.2f}s: {found}")
    return wall, t_examples + sum(v.seconds for v in verdicts), verdicts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", choices=sorted(PAIRS), default="matmul")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline-child", action="store_true")
    ap.add_argument("--synthesise", action="store_true", help="find the example too (no example comments)")
    ns = ap.parse_args()
    if ns.baseline_child:
        _baseline_child(ns.pair)
        return
    b_wall, b_run, f_wall, f_run = [], [], [], []
    last = None
    for _ in range(ns.repeat):
        w, r = _baseline(ns.pair)
        b_wall.append(w)
        b_run.append(r)
        w, r, last = _full(ns.pair, ns.synthesise)
        f_wall.append(w)
        f_run.append(r)
    med = statistics.median
    from pallas_fix.verify.runner import format_verdict

    how = "example found by synthesis" if ns.synthesise else "example from the comment"
    print(f"pair: {ns.pair} ({PAIRS[ns.pair][0]} -> {PAIRS[ns.pair][1]}), {how}, median of {ns.repeat}")
    for v in last:
        print("  " + format_verdict(v))
        print(f"  per-interpreter seconds: {v.details.get('timings')}")
    print(f"  with process start-up   : one interpret run (orig+rewrite) {med(b_wall):6.2f}s | "
          f"full verification {med(f_wall):6.2f}s | ratio {med(f_wall) / med(b_wall):4.2f}x")
    print(f"  without process start-up: one interpret run (orig+rewrite) {med(b_run):6.2f}s | "
          f"full verification {med(f_run):6.2f}s | ratio {med(f_run) / med(b_run):4.2f}x")


if __name__ == "__main__":
    main()
