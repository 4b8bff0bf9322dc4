"""A start computed from a traced constant such as `jnp.int32(3)`.

What it detects: `pl.ds(jnp.int32(3) * bs, bs)`, `jnp.array(2) * bs` — values fixed when the
kernel is written but wrapped in a jax constructor, which makes them traced.

Why it matters: the slice is static in fact but dynamic in the jaxpr, so Pallas treats it as
a dynamic slice (no static bounds checks, dynamic-offset loads).

Example:
    o_ref[...] = x_ref[pl.ds(jnp.int32(3) * 128, 128)]

Fix (safe when the window provably fits the ref, as the pallas_call shapes it; unsafe otherwise):
use the Python int, `pl.ds(3 * 128, 128)`. Traced, a start past the end is clamped; static, Pallas
rejects it when the kernel is traced, so a window pallas-fix cannot place waits for verification.
"""

from __future__ import annotations

from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.rules.rule import claims_origin, make_rule, start_text


def message(use: IndexUse) -> str:
    return f"start {start_text(use)} of `{use.ref_name}` is a traced constant; a Python int keeps the slice static"


check = claims_origin(Origin.TRACED_CONST, message)


INVALID = (
    """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(jnp.int32(3) * 128, 128)]  # expect: PF104


def fourth_block(x):
    assert x.shape == (512,)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128,), x.dtype))(x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("import jax.numpy as jnp\n", ""),
    ("x_ref[pl.ds(jnp.int32(3) * 128, 128)]  # expect: PF104", "x_ref[pl.ds(3 * 128, 128)]"),
)

RULE = make_rule(__doc__, "PF104", "traced-constant-start", check, invalid=INVALID, fix=FIX)
