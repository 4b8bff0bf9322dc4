"""An integer-array index built from traced values (a gather/scatter on a ref).

What it detects: `x_ref[i * bs + jnp.arange(bs)]`, `x_ref.at[idx]` where `idx` is a traced array.

Why it matters: only the HLO interpreter runs these; TPU lowering rejects "Advanced indexers"
and GPU interpret mode fails at run time. When the indices are contiguous, a `pl.ds` window
(or a BlockSpec) says the same thing and pipelines.

Example:
    o_ref[...] = x_ref[i * 8 + jnp.arange(8)]   # PF108

Fix: none automatic; for contiguous indices use `x_ref[pl.ds(i * 8, 8)]` (a masked `load` /
`store` keeps its mask). The finding's reason names the window when the array is spelled
`start + jnp.arange(size)` (or `lax.iota`), the Triton idiom for a ragged block.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.loops.windows import Window
from pallas_fix.core.model import IndexUse
from pallas_fix.rules.rule import make_rule, start_text


_ARANGES = {"jnp.arange": 0, "jax.numpy.arange": 0, "np.arange": 0, "numpy.arange": 0, "lax.iota": 1, "jax.lax.iota": 1}


def contiguous_window_hint(use: IndexUse) -> str:
    """What to write instead when the integer array is a contiguous window: `start +
    jnp.arange(size)` in either order, directly or through the name it is bound to."""
    env = use.env  # type: ignore[attr-defined]
    expr = use.start
    if isinstance(expr, cst.Name):
        expr = env.reaching_assignment(expr) or expr
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add)):
        return ""
    for arange, start in ((expr.left, expr.right), (expr.right, expr.left)):
        size = _arange_size(env.ctx, arange)
        if size is not None:
            window = f"pl.ds({env.ctx.code(start)}, {size})"
            return (
                f"; `{env.ctx.code(use.start)}` is the contiguous window `{window}`: index `{use.ref_name}.at[{window}]` "
                "instead (a masked load or store keeps its mask; interpret mode clamps a window that runs past the end), "
                "which pallas-fix can then consider for a grid axis"
            )
    return ""


def _arange_size(ctx, node: cst.BaseExpression) -> Optional[str]:
    """`size` of `jnp.arange(size)` / `lax.iota(dtype, size)` (one count, no start or step)."""
    if not isinstance(node, cst.Call) or ctx.code(node.func) not in _ARANGES:
        return None
    positional = [a for a in node.args if a.keyword is None]
    at = _ARANGES[ctx.code(node.func)]
    if len(positional) != at + 1 or any(a.star for a in node.args):
        return None
    return ctx.code(positional[at].value)


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
