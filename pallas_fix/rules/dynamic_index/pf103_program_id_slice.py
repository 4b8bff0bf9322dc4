"""A slice whose start comes from `pl.program_id`.

What it detects: `x_ref[pl.ds(pl.program_id(0) * bs, bs)]` (also through a variable or
`pl.multiple_of`) on a ref whose BlockSpec is the whole array.

Why it matters: the grid already iterates, but the ref is brought in whole; the block for
each step could be selected by the BlockSpec's index_map and pipelined. GPU interpret mode
computes `pl.program_id` as 0 (see PF201).

Example:
    pid = pl.program_id(0)
    o_ref[pl.ds(pid * 128, 128)] = x_ref[pl.ds(pid * 128, 128)] + 1

A scalar index (`row = pl.program_id(0); x_ref[row, :]`, Triton's per-row kernels) is a window of
one element: it could become a squeezed (`None`) block dim whose index_map returns the row.

Fix (safe, when the ref's block is the whole array and the window is a block): move the
slice into `pl.BlockSpec((128,), lambda i: (i,))` and access `x_ref[...]`.
"""

from __future__ import annotations

from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.rules.dynamic_index.pf101_independent_loop_slice import SQUEEZABLE
from pallas_fix.rules.rule import claims_origin, make_rule, start_text


def message(use: IndexUse) -> str:
    if use.kind == "scalar":
        return f"`{use.ref_name}` is indexed by `pl.program_id` with the scalar index {start_text(use)}; {SQUEEZABLE}"
    return f"`{use.ref_name}` is sliced by `pl.program_id` with start {start_text(use)}; {SELECTABLE}"


SELECTABLE = "a BlockSpec index_map can select the block"


check = claims_origin(Origin.PROGRAM_ID, message)


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    pid = pl.program_id(0)
    o_ref[pl.ds(pid * 128, 128)] = x_ref[pl.ds(pid * 128, 128)] + 1  # expect: PF103


def add_one(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 128,),
    )(x)
""",
)

# Edits that make the INVALID example VALID: the slice moves into the BlockSpecs.
FIX = (
    ("    pid = pl.program_id(0)\n", ""),
    ("o_ref[pl.ds(pid * 128, 128)] = x_ref[pl.ds(pid * 128, 128)] + 1  # expect: PF103", "o_ref[...] = x_ref[...] + 1"),
    ("        grid=(x.shape[0] // 128,),\n", "        grid=(x.shape[0] // 128,),\n        in_specs=[pl.BlockSpec((128,), lambda i: (i,))],\n        out_specs=pl.BlockSpec((128,), lambda i: (i,)),\n"),
)

RULE = make_rule(__doc__, "PF103", "program-id-slice", check, invalid=INVALID, fix=FIX, promises=(SELECTABLE, SQUEEZABLE))
