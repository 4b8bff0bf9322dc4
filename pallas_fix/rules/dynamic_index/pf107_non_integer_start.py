"""A slice start that is not an integer scalar: a one-element slice, a float or a bool.

What it detects: `pl.ds(start, size)` (or a plain index) whose start is a value of shape (1,)
loaded with `idx_ref[pl.ds(k, 1)]`, a floating-point value (`i.astype(jnp.float32) * 16`,
`i / 2`) or a boolean (`i > 3`).

Why it matters: these are the starts that GPU interpret mode rejects with "Dynamic indexing
not supported in GPU interpret mode" (integer scalar starts pass that check), that the HLO
interpreter rejects at lowering for shape-(1,) starts, and that TPU lowering rejects as
"Advanced indexers". Float starts are silently truncated.

Example:
    st = idx_ref[pl.ds(k, 1)]          # shape (1,)
    o_ref[...] = x_ref[pl.ds(st, 8)]   # PF107

Fix (safe): load a scalar instead, `st = idx_ref[k]`, or cast the start with
`.astype(jnp.int32)` / `jnp.int32(...)`.
"""

from __future__ import annotations

from typing import Optional

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse, Origin
from pallas_fix.rules.rule import make_rule, start_text

_WHAT = {"one_element": "a one-element array (shape (1,))", "float": "a float", "bool": "a bool"}


def check(use: IndexUse, window: Window) -> Optional[str]:
    prov = use.provenance
    if prov.origin is not Origin.NON_INT_SCALAR:
        return None
    what = _WHAT.get(prov.detail or "", "not an integer scalar")
    return f"start {start_text(use)} of `{use.ref_name}` is {what}; GPU interpret mode rejects it"


INVALID = (
    """\
import jax
from jax.experimental import pallas as pl


def kernel(idx_ref, x_ref, o_ref):
    st = idx_ref[pl.ds(0, 1)]
    o_ref[...] = x_ref[pl.ds(st, 8)]  # expect: PF107


def window_at(idx, x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), x.dtype))(idx, x)
""",
)

# Edits that make the INVALID example VALID.
FIX = (
    ("idx_ref[pl.ds(0, 1)]", "idx_ref[0]"),
    ("  # expect: PF107", ""),
)

RULE = make_rule(__doc__, "PF107", "non-integer-start", check, severity="error", invalid=INVALID, fix=FIX)
