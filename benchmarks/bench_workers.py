"""Verification with a fresh worker process per job against workers forked from a warm server.

    .venv/bin/python benchmarks/bench_workers.py [--pair matmul|elementwise] [--rounds 5]

Each round verifies the same pair twice, one way after the other in alternating order: once
with PALLAS_FIX_FRESH_WORKERS=1 (a fresh `python -m pallas_fix.verify.worker.main`: interpreter
start, `import jax`, the job) and once forked from the server (pallas_fix/verify/zygote_server.py),
which is started and warmed by one job before the rounds, as it is after a run's first job.
Wall time of `verify_sources` as a caller sees it; medians over the rounds and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pallas_fix.verify import collect_examples, verify_sources  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "verify"
PAIRS = {"matmul": ("matmul_before.py", "matmul_after.py"), "elementwise": ("elementwise_before.py", "elementwise_after.py")}


def _verify_once(before: str, after: str, examples, fresh: bool) -> float:
    if fresh:
        os.environ["PALLAS_FIX_FRESH_WORKERS"] = "1"
    else:
        os.environ.pop("PALLAS_FIX_FRESH_WORKERS", None)
    t0 = time.perf_counter()
    verdicts = verify_sources(before, after, examples, timeout_s=300)
    elapsed = time.perf_counter() - t0
    assert all(v.status == "verified" for v in verdicts), [v.message for v in verdicts]
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", choices=sorted(PAIRS), default="matmul")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    b, a = PAIRS[args.pair]
    before, after = (FIX / b).read_text(), (FIX / a).read_text()
    examples = collect_examples(FIX / b, before)
    _verify_once(before, after, examples, fresh=False)  # starts and warms the server
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for fresh in ((True, False) if r % 2 == 0 else (False, True)):
            times[fresh].append(_verify_once(before, after, examples, fresh))
    fresh, forked = statistics.median(times[True]), statistics.median(times[False])
    print(f"pair {args.pair}, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"  fresh worker process : {fresh:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[True])})")
    print(f"  forked from server   : {forked:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[False])})")
    print(f"  forked / fresh       : {forked / fresh:.2f}x")


if __name__ == "__main__":
    main()
