"""A slice driven by the index of a loop whose iterations are independent.

What it detects: `lax.fori_loop` / `jax.lax.fori_loop` / `@pl.loop` bodies that slice refs
with `pl.ds(i * bs, bs)` (or `pl.multiple_of(i * bs, bs)`, `(i + c) * bs`, ...) and carry no
value between iterations.

Why it matters: the kernel keeps the whole array resident in on-chip memory and walks it by
hand; Pallas cannot double-buffer the blocks. A grid axis with a BlockSpec index_map lets
Pallas pipeline the copies and, on TPU, split the axis across cores.

Example:
    def body(i, _):
        o_ref[pl.ds(i * bs, bs), :] = jnp.tanh(x_ref[pl.ds(i * bs, bs), :])
    lax.fori_loop(0, n // bs, body, None)

A scalar index the loop index drives (`o_ref[r, :] = x_ref[r, :] * 2`) is a window of one
element: it could become a squeezed (`None`) block dim whose index_map returns `r`.

Fix (safe, when every precondition holds): remove the loop, access whole blocks
(`x_ref[...]`), add a grid axis of the trip count and BlockSpecs
`pl.BlockSpec((bs, d), lambda ..., i: (i, 0))` at the pallas_call.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.rules.rule import make_rule, start_text


def check(use: IndexUse, window: Window) -> Optional[str]:
    loop = use.provenance.loop
    if use.provenance.origin is not Origin.LOOP or loop is None or loop.carries:
        return None
    if use.kind == "scalar":
        return f"`{use.ref_name}` is indexed by a loop index with the scalar index {start_text(use)}; {SQUEEZABLE}"
    return f"`{use.ref_name}` is sliced by a loop index with start {start_text(use)}; {GRID_AXIS}"


# What a message says the index could become, when a fix does it (rules.rule.Rule.promises): a
# finding without a fix says neither. SQUEEZABLE is also PF102's and PF103's.
GRID_AXIS = "the loop can become a grid axis"
SQUEEZABLE = "a scalar index can become a squeezed (None) block dim of a grid axis"


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BS = 8


def kernel(x_ref, o_ref):
    def body(i, _):
        o_ref[pl.ds(i * BS, BS), :] = jnp.tanh(x_ref[pl.ds(i * BS, BS), :])  # expect: PF101

    lax.fori_loop(0, 4, body, None)


def tanh(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
""",
)

VALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BS = 8


def kernel(x_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...])


def tanh(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // BS,),
        in_specs=[pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((BS, x.shape[1]), lambda i: (i, 0)),
    )(x)
""",
)

RULE = make_rule(__doc__, "PF101", "independent-loop-slice", check, valid=VALID, invalid=INVALID, promises=(GRID_AXIS, SQUEEZABLE))
