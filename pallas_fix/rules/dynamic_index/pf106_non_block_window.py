"""A dynamic window that no BlockSpec can express: dynamic size, overlap, stride or misalignment.

What it detects: `pl.ds(start, size)` with a traced size, a stride other than 1, or a start
that is not an integer multiple of the size (`pl.ds(i * 8, 16)` overlapping windows,
`pl.ds(i + 1, bs)`, `pl.ds(i * bs + 3, bs)`); Python slices with traced bounds.

Why it matters: a BlockSpec index_map returns block indices, so element offsets must be
multiples of the block size. Dynamic sizes fail at trace time in every Pallas mode.

Example:
    halo = x_ref[pl.ds(i * 128, 256), :]   # PF106: windows overlap

Fix: none automatic. Restructure so each step reads whole blocks (e.g. two BlockSpecs for the
block and its neighbour, or `pl.Element` block dims on TPU), or keep the manual slice.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse
from pallas_fix.rules.rule import make_rule


def check(use: IndexUse, window: Window) -> Optional[str]:
    if use.kind == "slice":
        return f"`{use.ref_name}` is sliced with traced Python slice bounds, which are not a block window"
    if window.not_block:
        return f"dynamic window on `{use.ref_name}` is not a block: {window.reason}"
    return None


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    i = pl.program_id(0)
    halo = x_ref[pl.ds(i * 128, 256)]  # expect: PF106
    o_ref[...] = halo[:128] + halo[128:]


def pair_sums(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((384,), x.dtype),
        grid=(3,),
        out_specs=pl.BlockSpec((128,), lambda i: (i,)),
    )(x)
""",
)

VALID = (
    """\
import jax
from jax.experimental import pallas as pl


def kernel(x_ref, next_ref, o_ref):
    o_ref[...] = x_ref[...] + next_ref[...]


def pair_sums(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((384,), x.dtype),
        grid=(3,),
        in_specs=[pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i + 1,))],
        out_specs=pl.BlockSpec((128,), lambda i: (i,)),
    )(x, x)
""",
)

RULE = make_rule(__doc__, "PF106", "non-block-window", check, valid=VALID, invalid=INVALID)
