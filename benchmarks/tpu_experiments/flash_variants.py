"""Why is pallas-fix's flash-attention rewrite slower than JAX's kernel at the same blocks?

    python benchmarks/tpu_experiments/flash_variants.py --json OUT.json     # on a TPU (< 5 min)
    python benchmarks/tpu_experiments/flash_variants.py --smoke            # on CPU, interpret mode

Times, compiled on the chip, at f32 (1, 2, 16384, 128) and bf16 (1, 8, 2048, 128) with
block_q=256, block_k=512 (bench_tpu's flash_attention rows, where the rewrite ran at 0.82x and
0.67x of JAX's kernel):

- ``original``: the user kernel ``benchmarks/tpu_pairs/flash_attention.py`` (K and V whole per
  batch*head, the key loop in the kernel; out of VMEM at the f32 size);
- ``rewrite``: its rewrite by ``pallas_fix.engine.fix_source``, made now as bench_tpu makes it;
- ``hand``: JAX's ``ops/tpu/flash_attention.py`` at the same blocks;
- ``lanes`` (``flash_lanes.py``): the rewrite with m / l kept lane-broadcast (block_q, 128);
- ``call4`` (``flash_call4.py``): the rewrite's body in JAX's call (4-D grid and blocks,
  PrefetchScalarGridSpec, semantics, cost estimate);
- ``jaxbody`` (``flash_jaxbody.py``): the rewrite's call with JAX's kernel body.

The variants are hand edits of the rewrite as this tree writes it (REWRITE_SHA below); the script
says when the product's rewrite has changed since. Each kernel's output is compared with the
original's (with XLA's where the original does not compile). Times are ms per call inside one
jitted loop (``pallas_fix/verify/device/timing.py``, the median of ``--repeat`` loops).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
for _p in (BENCH.parent, BENCH, HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import bench_tpu  # noqa: E402  (the pair loader, error classes, timing; beside this folder)

VARIANTS = ("lanes", "call4", "jaxbody")
KERNELS = ("original", "rewrite", "hand") + VARIANTS
# (name, dtype, (batch*heads, seq, head_dim), block_q, block_k); the smoke sizes run in interpret mode
CONFIGS = {
    "chip": [("f32 (1, 2, 16384, 128)", "float32", (2, 16384, 128), 256, 512),
             ("bf16 (1, 8, 2048, 128)", "bfloat16", (8, 2048, 128), 256, 512)],
    "smoke": [("f32 (1, 2, 512, 128)", "float32", (2, 512, 128), 128, 256),
              ("bf16 (1, 2, 512, 128)", "bfloat16", (2, 512, 128), 128, 256)],
}
# The sha256 of the rewrite's text the variants were edited from (pallas_fix at the commit that
# added this script): when the product's rewrite changes, the variants may no longer isolate
# what they say.
REWRITE_SHA = "0fdb752ee3838e10"
TOL = {"float32": 2e-3, "bfloat16": 2e-2}  # jaxbody / hand round differently (the division moves)


def entries():
    """{kernel name: callable(q, k, v, *, block_q, block_k)} and the rewrite's sha."""
    original, rewritten, rewrite = bench_tpu.load_pair("flash_attention")
    if rewritten is None:
        raise SystemExit(f"no rewrite of flash_attention: {rewrite.fix} {rewrite.error}")
    fns = {"original": original.attention, "rewrite": rewritten.attention,
           "hand": original.hand}
    for name in VARIANTS:
        fns[name] = importlib.import_module(f"flash_{name}").attention
    return fns, original, hashlib.sha256(rewrite.source.encode()).hexdigest()[:16]


def inputs(dtype, shape):
    import jax

    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    return tuple(jax.random.normal(kx, shape, dtype) for kx in (kq, kk, kv))


def run_config(fns, original, config, repeat: int, smoke: bool) -> list[dict]:
    import jax

    label, dtype, shape, block_q, block_k = config
    args = inputs(dtype, shape)
    kwargs = {"block_q": block_q, "block_k": block_k}
    rows, outs = [], {}
    for name in KERNELS:
        fn = fns[name] if name != "hand" else jax.jit(functools.partial(fns[name], **kwargs))
        kw = {} if name == "hand" else kwargs
        if smoke:
            try:
                outs[name] = jax.block_until_ready(fn(*args, **kw))
                side = bench_tpu.Side(ran=True)
            except Exception as exc:
                side = bench_tpu.Side(error=bench_tpu.classify_error(exc))
        else:
            outs[name], side = bench_tpu.run_side(fn, args, kw, repeat)
        rows.append({"config": label, "dtype": dtype, "kernel": name, "ran": side.ran, "ms": side.ms,
                     "error": side.error})
    ref_name = "original" if outs.get("original") is not None else None
    reference = outs.get("original")
    if reference is None:  # the original does not fit (f32 at 16384): XLA's attention instead
        reference, ref_name = jax.jit(original.xla)(*args), "xla"
    hand_ms = next(r["ms"] for r in rows if r["kernel"] == "hand")
    for r in rows:
        out = outs.get(r["kernel"])
        r["against"] = ref_name
        r["max_rel_err"] = None if out is None else bench_tpu.max_rel_err(out, reference)
        r["agrees"] = None if out is None else r["max_rel_err"] <= (TOL[dtype] if ref_name == "original" else bench_tpu.TOL_XLA[dtype])
        r["speed_vs_hand"] = hand_ms / r["ms"] if r["ms"] and hand_ms else None
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="OUT", help="write the rows to this file")
    ap.add_argument("--repeat", type=int, default=5, help="timed loops per kernel (median)")
    ap.add_argument("--smoke", action="store_true", help="off a TPU: tiny sizes in TPU interpret mode, no timing")
    args = ap.parse_args(argv)
    import jax

    if not args.smoke and jax.default_backend() != "tpu":
        print(f"JAX's default backend is {jax.default_backend()}, not a TPU: run with --smoke off a TPU")
        return 2
    fns, original, sha = entries()
    if sha != REWRITE_SHA:
        print(f"note: the product's rewrite (sha {sha}) is not the text the variants were edited from "
              f"({REWRITE_SHA}); compare `rewrite` with them before reading the variants' rows")
    print(f"{jax.devices()[0].device_kind}; jax {jax.__version__}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
          + ("; SMOKE: TPU interpret mode, tiny sizes, no times" if args.smoke else f"; median of {args.repeat} loops"))
    rows: list[dict] = []
    for config in CONFIGS["smoke" if args.smoke else "chip"]:
        if args.smoke:
            from jax.experimental.pallas import tpu as pltpu

            from pallas_fix.verify.worker.interpret_mode import forced_interpreter

            with forced_interpreter(pltpu.InterpretParams()):
                done = run_config(fns, original, config, args.repeat, smoke=True)
        else:
            done = run_config(fns, original, config, args.repeat, smoke=False)
        rows += done
        for r in done:
            ms = f"{r['ms']:.4g} ms" if r["ms"] else ("ran" if r["ran"] else "fails")
            vs = f"{r['speed_vs_hand']:.2f}x of hand" if r["speed_vs_hand"] else ""
            err = "-" if r["max_rel_err"] is None else f"{r['max_rel_err']:.1e} vs {r['against']}"
            flag = "" if r["agrees"] in (True, None) else " DIFFERS"
            print(f"  {r['config']:<24} {r['kernel']:<9} {ms:<12} {vs:<14} err {err}{flag} {r['error'][:120]}")
        if args.json:  # after every config: a run stopped at its limit keeps what it did
            Path(args.json).write_text(json.dumps({"rewrite_sha": sha, "rows": rows}, indent=1))
    bad = [r for r in rows if r["agrees"] is False or (r["kernel"] != "original" and not r["ran"])]
    for r in bad:
        print(f"FAILED: {r['config']} {r['kernel']}: {r['error'] or 'output differs'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
