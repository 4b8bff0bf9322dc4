"""A start that is traced but whose origin pallas-fix cannot name.

What it detects: starts from a `lax.while_loop` carry, a fori_loop carry, a parameter of a
function pallas-fix could not follow, or any other traced value; also a scalar index so traced
(with no loop or grid term) that a write, or a read keeping dims, uses on an input or output.

Why it matters: as PF101/PF105, a dynamic window keeps the ref resident and unpipelined.

Example:
    def body(carry):
        off, acc = carry
        return off + 8, acc + x_ref[pl.ds(off, 8)]

Fix: none automatic; rewrite the loop as a fori_loop over block indices first.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse
from pallas_fix.rules.rule import make_rule, start_text


def check(use: IndexUse, window: Window) -> Optional[str]:
    """The last rule in `ORDER`: it claims every index the others leave."""
    if use.kind == "scalar":
        return f"`{use.ref_name}` is indexed by the traced scalar {start_text(use)} ({use.provenance.description})"
    return f"start {start_text(use)} of `{use.ref_name}` is traced ({use.provenance.description})"


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    def cond(carry):
        return carry[0] < 64

    def body(carry):
        off, acc = carry
        return off + 8, acc + x_ref[pl.ds(off, 8)]  # expect: PF109

    o_ref[...] = lax.while_loop(cond, body, (0, jnp.zeros((8,), jnp.float32)))[1]


def block_sum(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))(x)
""",
)

VALID = (
    """\
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    def body(k, acc):
        return acc + x_ref[pl.ds(k * 8, 8)]

    o_ref[...] = lax.fori_loop(0, 8, body, jnp.zeros((8,), jnp.float32))


def block_sum(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))(x)
""",
)

RULE = make_rule(__doc__, "PF109", "traced-start", check, valid=VALID, invalid=INVALID)
