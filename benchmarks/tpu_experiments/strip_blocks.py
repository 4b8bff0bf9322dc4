"""Would blocks sized for the chip pay? The map-loop and row-block rewrites at m times the user's block.

    python benchmarks/tpu_experiments/strip_blocks.py --json OUT.json     # on a TPU (a few minutes)
    python benchmarks/tpu_experiments/strip_blocks.py --smoke            # on CPU, interpret mode

bench_tpu's ``map_silu``, ``rms_norm`` and ``layer_norm`` rewrites make the user's loop window
(``block_rows``, 256 rows) the grid block: at 1024x1024 f32 that is 4 steps of 1 MiB each, about
0.008 ms a call, launch- and step-dominated, against a 16 MiB scoped VMEM. Issue 27 proposes that
a lift of a map loop whose body is row-wise take m windows per grid step (blocks of m * w rows,
the body run on the whole block). For these three kernels that rewrite is exactly the product's
rewrite called with ``block_rows = m * w`` (their rewritten bodies never read ``block_rows``), so
this times it before anything is built: per (pair, dtype, size) and m in 1, 2, 4, 8, 16 (m * w a
divisor of the rows, at most 2048 rows), the original at its own ``block_rows`` and at ``m * w``
(the loop's stride alone), the rewrite at ``m * w``, the bytes one grid step holds on chip
(``pallas_fix/verify/judge/footprint.py``), the speed ratio against the original at the user's
block, and which m the proposed rule picks (RULE_* below), to read against the fastest measured. Every output is compared with the original's at the user's block (XLA's where that does not
compile). A block over the scoped VMEM fails to compile (VMEM OOM): that row shows where the
budget stops m, and is not counted as a failure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
for _p in (BENCH.parent, BENCH):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import bench_tpu  # noqa: E402  (the pair loader, error classes, timing; beside this folder)

PAIRS = ("map_silu", "rms_norm", "layer_norm")
FACTORS = (1, 2, 4, 8, 16)
MAX_ROWS = 2048
# The rule under test (issue 27): the largest m whose block holds at most RULE_SHARE of the scoped
# VMEM per step (double-buffered blocks, as footprint.py counts them) and at most RULE_ROWS rows.
# A quarter leaves the compiler room for the body's temporaries (an f32 copy of a bf16 block, the
# normalised rows) that the footprint model does not count; 1024 rows is the cap, not a
# measured optimum. At 1024-wide f32 the user's 256 rows already hold 4 MiB (a quarter), so the
# rule keeps m = 1 there: the rows above it say whether the share is too cautious.
RULE_SHARE = 4
RULE_ROWS = 1024


def run_case(name, original, rewritten, rewrite, size, dtype, repeat, smoke) -> list[dict]:
    import jax
    import jax.numpy as jnp

    args, kwargs = original.make_inputs(size, jnp.dtype(dtype), jax.random.key(0))
    w, rows = kwargs["block_rows"], args[0].shape[0]
    entry = original.ENTRY

    def call(mod, block_rows):
        fn = getattr(mod, entry)
        kw = kwargs | {"block_rows": block_rows}
        if smoke:
            try:
                return jax.block_until_ready(fn(*args, **kw)), bench_tpu.Side(ran=True)
            except Exception as exc:
                return None, bench_tpu.Side(error=bench_tpu.classify_error(exc))
        return bench_tpu.run_side(fn, args, kw, repeat)

    reference, base = call(original, w)
    against = "original"
    if reference is None:
        reference, against = jax.jit(original.xla)(*args, **kwargs), "xla"
    out = []
    for m in FACTORS:
        bm = m * w
        if bm > min(rows, MAX_ROWS) or rows % bm:
            continue
        row = {"pair": name, "dtype": dtype, "size": size, "shape": "x".join(map(str, args[0].shape)),
               "user_block_rows": w, "m": m, "block_rows": bm, "steps": rows // bm, "fix": rewrite.fix}
        o_out, o_side = (reference, base) if m == 1 and against == "original" else call(original, bm)
        r_out, r_side = call(rewritten, bm)
        after = bench_tpu.traced_calls(getattr(rewritten, entry), args, kwargs | {"block_rows": bm})
        limit = next((c["on_chip"].get("limit_bytes") for c in after or () if c.get("on_chip")), None)
        row |= {"original_ms": o_side.ms, "original_error": o_side.error, "rewrite_ms": r_side.ms,
                "rewrite_error": r_side.error, "rewrite_bytes_per_step": bench_tpu.on_chip_bytes(after),
                "limit_bytes": limit,
                "original_ms_at_user_block": base.ms, "against": against}
        row["ratio_vs_user_block"] = base.ms / r_side.ms if base.ms and r_side.ms else None
        for who, o in (("original", o_out), ("rewrite", r_out)):
            err = None if o is None else bench_tpu.max_rel_err(o, reference)
            tol = (bench_tpu.TOL_SAME if against == "original" else bench_tpu.TOL_XLA)[dtype]
            row[f"{who}_err"], row[f"{who}_agrees"] = err, None if err is None else err <= tol
        out.append(row)
    mark_rule(out)
    return out


def mark_rule(rows: list[dict]) -> None:
    """Set ``rule_pick`` on the row of the m the rule picks (module constants RULE_*); where no m
    fits the share, the rule keeps the user's block (m = 1: the plain lift)."""
    fits = [r for r in rows if r["block_rows"] <= RULE_ROWS and r["rewrite_bytes_per_step"] is not None
            and r["limit_bytes"] and r["rewrite_bytes_per_step"] * RULE_SHARE <= r["limit_bytes"]]
    pick = max(fits, key=lambda r: r["m"], default=next((r for r in rows if r["m"] == 1), None))
    for r in rows:
        r["rule_pick"] = r is pick


def show(r: dict) -> str:
    def ms(v, e):
        return f"{v:.4g}" if v else ("fails" if e else "ran")

    mib = "-" if r["rewrite_bytes_per_step"] is None else f"{r['rewrite_bytes_per_step'] / 2**20:.2f}"
    ratio = f"{r['ratio_vs_user_block']:.2f}x" if r["ratio_vs_user_block"] else "-"
    bad = "" if r["rewrite_agrees"] is not False else " REWRITE DIFFERS"
    return (f"| {r['pair']} | {r['dtype']} | {r['size']} {r['shape']} | {r['block_rows']} (m={r['m']}) | {r['steps']} | "
            f"{ms(r['original_ms'], r['original_error'])} | {ms(r['rewrite_ms'], r['rewrite_error'])} | {mib} | {ratio}{bad} |"
            f"{' rule' if r.get('rule_pick') else ''} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="OUT", help="write the rows to this file")
    ap.add_argument("--pair", action="append", choices=PAIRS, help="only these pairs (repeatable)")
    ap.add_argument("--repeat", type=int, default=5, help="timed loops per kernel (median)")
    ap.add_argument("--smoke", action="store_true", help="off a TPU: the small size in TPU interpret mode, no timing")
    args = ap.parse_args(argv)
    import jax

    if not args.smoke and jax.default_backend() != "tpu":
        print(f"JAX's default backend is {jax.default_backend()}, not a TPU: run with --smoke off a TPU")
        return 2
    print(f"{jax.devices()[0].device_kind}; jax {jax.__version__}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
          + ("; SMOKE: TPU interpret mode, small size, no times" if args.smoke else f"; median of {args.repeat} loops"))
    print(f"rule: the largest m with at most 1/{RULE_SHARE} of the scoped VMEM per step and at most {RULE_ROWS} rows")
    print("| pair | dtype | size | grid block rows | steps | original ms | rewrite ms | rewrite MiB/step | "
          "speed vs the original at the user's block | rule's pick |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows: list[dict] = []
    for name in args.pair or PAIRS:
        original, rewritten, rewrite = bench_tpu.load_pair(name)
        cases = sorted({("small", d) for _, d in original.CASES}) if args.smoke else original.CASES
        for size, dtype in cases:
            if args.smoke:
                from jax.experimental.pallas import tpu as pltpu

                from pallas_fix.verify.worker.interpret_mode import forced_interpreter

                with forced_interpreter(pltpu.InterpretParams()):
                    done = run_case(name, original, rewritten, rewrite, size, dtype, args.repeat, True)
            else:
                done = run_case(name, original, rewritten, rewrite, size, dtype, args.repeat, False)
            rows += done
            for r in done:
                print(show(r), flush=True)
            if args.json:  # after every case: a run stopped at its limit keeps what it did
                Path(args.json).write_text(json.dumps(rows, indent=1))
    # A block over the scoped VMEM is a finding of this experiment (where the budget stops m), not a failure.
    bad = [r for r in rows if r["rewrite_agrees"] is False
           or (r["rewrite_error"] and not r["rewrite_error"].startswith("VMEM OOM"))]
    for r in bad:
        print(f"FAILED: {r['pair']} {r['dtype']} {r['size']} block_rows={r['block_rows']}: {r['rewrite_error'] or 'output differs'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
