"""A kernel that holds more on chip per grid step than its backend allows by default.

What it detects: at verification time, on the example call it ran (given, recorded or
synthesised), a pallas_call whose per-step footprint is over its backend's default scoped
on-chip limit: on TPU the VMEM of its blocks (double-buffered where Pallas pipelines them, once
for whole-array operands and calls without a grid) plus VMEM scratch, over 16 MiB, libtpu's
default `--xla_tpu_scoped_vmem_limit_kib` on v4, v5e and v5p (32 MiB on v6e, v7x; jax 0.12
jax/_src/pallas/mosaic/core.py names the flag, `CompilerParams.vmem_limit_bytes` overrides it);
on Mosaic GPU the shared memory of its blocks and scratch, over 227 KiB per block (jax 0.12
jax/experimental/mosaic/gpu/core.py). It also says whether the proposed rewrite brings the kernel
under the limit, and reports a rewrite that goes over a limit the original kept.

Why it matters: the interpreters run it, but compiled on the device it fails to compile
(a scoped VMEM out-of-memory error) at these shapes, or at production shapes larger than the
test's. A kernel that walks whole arrays by hand keeps them resident; with BlockSpecs each grid
step holds only its blocks.

Example:
    # pallas-fix: example scale_rows(f32[2048, 2048])
    def kernel(x_ref, o_ref):                 # 16 MiB in + 16 MiB out, whole
        def body(i, c):
            o_ref[pl.ds(i * 256, 256), :] = x_ref[pl.ds(i * 256, 256), :] * 2.0
            return c
        lax.fori_loop(0, 8, body, 0)
    pl.pallas_call(kernel, out_shape=...)(x)  # PF301: 32 MiB of VMEM per step

What to do: apply the rewrite pallas-fix proposes when it says it brings the kernel under the
limit (here: 2 MiB blocks, double-buffered, 8 MiB per step); otherwise use smaller blocks, or
raise the limit with `pltpu.CompilerParams(vmem_limit_bytes=...)` up to the chip's VMEM.

Fix safety: no fix of its own; the PF1xx rewrite that lifts the loop is what brings the
footprint down, and it is verified like every rewrite. Reported by `pallas-fix verify` and
`--apply` with each verdict (the `findings` of a verdict in JSON), not by the static check.
"""

from __future__ import annotations

from pallas_fix.rules.rule import claims_no_index, make_rule

INVALID = (
    """\
# pallas-fix: example scale_rows(f32[2048, 2048])
import jax
from jax import lax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    def body(i, c):
        o_ref[pl.ds(i * 256, 256), :] = x_ref[pl.ds(i * 256, 256), :] * 2.0
        return c

    lax.fori_loop(0, x_ref.shape[0] // 256, body, 0)


def scale_rows(x):
    return pl.pallas_call(  # expect: PF301
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
""",
)

# Edits that make the INVALID example VALID: the rewrite pallas-fix proposes for it.
FIX = (
    ("""    def body(i, c):
        o_ref[pl.ds(i * 256, 256), :] = x_ref[pl.ds(i * 256, 256), :] * 2.0
        return c

    lax.fori_loop(0, x_ref.shape[0] // 256, body, 0)
""", """    o_ref[...] = x_ref[...] * 2.0
"""),
    ("from jax import lax\n", ""),
    ("    return pl.pallas_call(  # expect: PF301\n", "    return pl.pallas_call(\n"),
    ("""        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
""", """        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 256,),
        in_specs=[pl.BlockSpec((256, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((256, x.shape[1]), lambda i: (i, 0)),
"""),
)

RULE = make_rule(__doc__, "PF301", "on-chip-footprint-over-limit", claims_no_index, stage="verification",
                 invalid=INVALID, fix=FIX)
