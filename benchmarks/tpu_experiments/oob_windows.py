"""What a compiled TPU kernel does with a `pl.ds` window that runs past the end of a whole-array
ref (the last program of a `pl.cdiv` grid), against a BlockSpec's partial last block: does the
chip clamp the window back inside the array, as the interpreters do, or keep the rows at the
positions the program id names? (pallas_fix/rewrite/proofs/ragged_blocks.py reasons from it.)

    PYTHONUNBUFFERED=1 python3 benchmarks/tpu_experiments/oob_windows.py --json $OUT/oob.json
    python3 benchmarks/tpu_experiments/oob_windows.py --smoke     # CPU, interpret mode
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

N, B, L = 20, 8, 128  # 20 rows in windows of 8: the third window covers rows 16..23
STEPS = pl.cdiv(N, B)
WHOLE = pl.BlockSpec(memory_space=pltpu.VMEM)
ROWS = pl.BlockSpec((B, L), lambda i: (i, 0))


def read_kernel(x_ref, o_ref):  # whole-array input, the window past the end read
    i = pl.program_id(0)
    o_ref[...] = x_ref[pl.ds(pl.multiple_of(i * B, B), B), :]


def write_kernel(x_ref, o_ref):  # whole-array output, the window past the end written
    del x_ref
    i = pl.program_id(0)
    rows = i * B + jax.lax.broadcasted_iota(jnp.int32, (B, L), 0)
    o_ref[pl.ds(pl.multiple_of(i * B, B), B), :] = (rows + 1000 * (i + 1)).astype(jnp.float32)


def partial_kernel(x_ref, o_ref):  # the lift: a partial last block, masked by position
    i = pl.program_id(0)
    rows = i * B + jax.lax.broadcasted_iota(jnp.int32, (B, L), 0)
    o_ref[...] = jnp.where(rows < N, x_ref[...] * 2, -1.0)


CASES = {
    "read past the end": (read_kernel, WHOLE, ROWS, (STEPS * B, L)),
    "write past the end": (write_kernel, ROWS, WHOLE, (N, L)),
    "partial last block": (partial_kernel, ROWS, ROWS, (N, L)),
}


def run(interpret: bool) -> dict:
    x = jnp.arange(N, dtype=jnp.float32)[:, None] * jnp.ones((1, L), jnp.float32)
    out = {}
    for name, (kernel, ins, outs, shape) in CASES.items():
        call = pl.pallas_call(kernel, grid=(STEPS,), in_specs=[ins], out_specs=outs,
                              out_shape=jax.ShapeDtypeStruct(shape, jnp.float32), interpret=interpret)
        try:
            out[name] = np.asarray(jax.jit(call)(x))[:, 0].tolist()
        except Exception as exc:  # noqa: BLE001 - the finding is the error itself
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"{name}: column 0 = {out[name]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="interpret mode on the CPU")
    args = ap.parse_args()
    result = {"jax": jax.__version__, "device": str(jax.devices()[0]), "interpret": args.smoke, "rows": run(args.smoke)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
