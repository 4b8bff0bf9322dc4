"""A lift names the comments in the kernel that describe a lifted ref as the whole array."""

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.core.config import Config
from pallas_fix.engine import fix_source
from pallas_fix.rewrite.text.stale_comments import stale_comments_note

SOURCE = '''import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

BM = 16


def kernel(x_ref, o_ref):
    # x_ref holds all rows: (M, N), resident for the whole kernel.
    # The output has the same layout as the input.
    def body(i, carry):
        rows = pl.ds(i * BM, BM)
        o_ref[rows, :] = jnp.tanh(x_ref[rows, :])  # one (BM, N) row block
        return carry

    lax.fori_loop(0, 4, body, 0)


def run(x):
    assert x.shape == (64, 128)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''


def test_the_lift_summary_names_the_shape_comment_about_the_lifted_ref():
    fixed = fix_source(SOURCE, "k.py", Config())
    (applied,) = fixed.applied
    assert "line 10 (`# x_ref holds all rows: (M, N), resident for the whole kernel.`)" in applied
    assert "line 11" not in applied  # no ref named, no shape: not about a lifted ref


def test_comments_that_name_no_lifted_ref_are_not_flagged():
    ctx = ModuleContext(SOURCE)
    kernel = next(s for s in ctx.module.body if getattr(s, "name", None) and s.name.value == "kernel")
    assert stale_comments_note(ctx, kernel, {"y_ref"}) == ""
    assert stale_comments_note(ctx, kernel, {"o_ref"}) == ""  # line 10 is about x_ref only
