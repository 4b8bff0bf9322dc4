"""An integer-array index built from traced values (a gather/scatter on a ref).

What it detects: `x_ref[i * bs + jnp.arange(bs)]`, `x_ref.at[idx]` where `idx` is a traced array,
and such an array passed as an atomic's index (`atomic_add(o_ref, idx, v)`, reported at the call:
a scatter of the kind atomics exist for, never rewritten).

Why it matters: only the HLO interpreter runs these; TPU lowering rejects "Advanced indexers"
and GPU interpret mode fails at run time. When the indices are contiguous, a `pl.ds` window
(or a BlockSpec) says the same thing and pipelines.

Example:
    o_ref[...] = x_ref[i * 8 + jnp.arange(8)]   # PF108

Fix: contiguous-window (unsafe, applied once verified) when the array is a contiguous range,
`start + jnp.arange(size)` (or `lax.iota`, `lax.broadcasted_iota`, broadcast as `rows[:, None]`
for an outer product), the Triton idiom for a ragged block: the index becomes the window
`pl.ds(start, size)` (a masked `load` / `store` keeps its mask), which a later round can lift into
a grid axis. A gather through a table, a step or a reversed range has no window and is refused.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse
from pallas_fix.rules.rule import make_rule, start_text


def check(use: IndexUse, window: Window) -> Optional[str]:
    if use.kind != "int_array":
        return None
    return f"`{use.ref_name}` is indexed with a traced integer array {start_text(use)}"


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[...] = x_ref[i * 8 + jnp.arange(8)]  # expect: PF108


def copy_blocks(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(4,),
        out_specs=pl.BlockSpec((8,), lambda i: (i,)),
    )(x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("import jax.numpy as jnp\n", ""),
    ("x_ref[i * 8 + jnp.arange(8)]  # expect: PF108", "x_ref[pl.ds(i * 8, 8)]"),
)

RULE = make_rule(__doc__, "PF108", "traced-integer-array-index", check, invalid=INVALID, fix=FIX)
