"""Program ids folded into quotient and remainder (issue 28): what the index_map text says and
which folds are atoms. The end-to-end pairs and refusals are the pid_fold_* fixtures in
tests/fixtures/codemods/program_id_blocks/ (run by tests/test_codemod_pairs.py)."""

from __future__ import annotations

import libcst as cst

from pallas_fix.core.config import Config
from pallas_fix.engine import fix_source
from pallas_fix.rewrite.blocks.plan import BlockIndexExpr


def test_fold_terms_render_with_the_parentheses_their_multipliers_need():
    h, hm1 = cst.Name("H"), cst.parse_expression("H - 1")
    assert BlockIndexExpr({}, folds=((1, 0, "//", h),)).render({0: "i"}) == "i // H"
    assert BlockIndexExpr({1: 1}, folds=((1, 0, "%", h),)).render({0: "i", 1: "j"}) == "i % H + j"
    assert BlockIndexExpr({}, 3, folds=((2, 0, "//", hm1),)).render({0: "i"}) == "2 * (i // (H - 1)) + 3"
    parenthesized = cst.parse_expression("(H - 1)")  # a divisor translated with its parentheses
    assert BlockIndexExpr({}, folds=((1, 0, "%", parenthesized),)).render({0: "i"}) == "i % (H - 1)"
    assert BlockIndexExpr({}, 3, folds=((-1, 0, "%", h),)).render({0: "i"}) == "-(i % H) + 3"


def test_fold_parts_are_part_of_the_block_key():
    h = cst.Name("H")
    quotient = BlockIndexExpr({}, folds=((1, 0, "//", h),))
    remainder = BlockIndexExpr({}, folds=((1, 0, "%", h),))
    assert quotient.key() != remainder.key() != BlockIndexExpr({0: 1}).key()


_KERNEL = '''import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref, *, nh):
    pid = pl.program_id(0)
    b = {b}
    h = {h}
    o_ref[b, h, :, :] = x_ref[b, h, :, :] * 2.0


def f(x):
    batch, heads, seq, dim = x.shape
    return pl.pallas_call(
        functools.partial(kernel, nh=heads),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=({grid},),
    )(x)
'''


def _fixed(b: str, h: str, grid: str = "batch * heads") -> str:
    source = _KERNEL.format(b=b, h=h, grid=grid)
    return fix_source(source, "k.py", Config()).source


def test_each_spelling_lifts_to_the_same_index_map():
    for b, h in [("pid // nh", "pid % nh"), ("lax.div(pid, nh)", "lax.rem(pid, nh)"),
                 ("jnp.floor_divide(pid, nh)", "jnp.mod(pid, nh)")]:
        fixed = _fixed(b, h)
        assert "lambda i: (i // heads, i % heads, 0, 0)" in fixed, (b, fixed)
        assert "o_ref[...] = x_ref[...] * 2.0" in fixed


def test_unsound_folds_stay_in_the_kernel():
    # A shifted dividend (negative in the first step), a divisor that may be zero, and a grid
    # longer than batch * heads (the quotient would run past the batch dim).
    # (`pid % (nh - 1)` fits the head dim whatever nh is: only the divisor's sign refuses it.)
    for b, h, grid, unsound in [("(pid - 1) // nh", "(pid - 1) % nh", "batch * heads", "lambda i: ("),
                                ("pid // nh", "pid % (nh - 1)", "batch * heads", "heads - 1"),
                                ("pid // nh", "pid % nh", "batch * heads + 1", "i // heads")]:
        fixed = _fixed(b, h, grid)
        assert unsound not in fixed, (b, h, grid, fixed)
