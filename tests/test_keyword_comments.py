"""A keyword a lift adds to a pallas_call copies the call's layout, not its comments
(pallas_fix.rewrite.callsite.spelling.keywords): the separator it reuses is another argument's
comma, whose whitespace holds that argument's end-of-line comment (red-team: `# same as x`, written
after out_shape, came back after the new in_specs and out_specs too)."""

from __future__ import annotations

import libcst as cst

from pallas_fix.engine import fix_source
from pallas_fix.rewrite.callsite.spelling.keywords import insert_keywords

SOURCE = '''import jax
from jax.experimental import pallas as pl

BM = 16


def double_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BM, BM), :] = x_ref[pl.ds(i * BM, BM), :] * 2.0


def double(x):
    return pl.pallas_call(
        double_kernel,  # the kernel
        grid=(x.shape[0] // BM,),  # one step per row block
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),  # same as x
        interpret=True,  # run on CPU
    )(x)
'''


def _comments(text: str) -> list[str]:
    return [line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line]


def test_a_lift_writes_each_comment_of_the_call_once_on_its_own_argument():
    out = fix_source(SOURCE, "double.py").source
    assert "in_specs=" in out and "out_specs=" in out
    assert _comments(out) == _comments(SOURCE), out
    assert "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),  # same as x\n" in out
    assert "interpret=True,  # run on CPU\n" in out


def test_a_keyword_appended_after_a_commented_last_argument_leaves_the_comment_there():
    call = cst.parse_expression("pl.pallas_call(\n    kernel,  # k\n    out_shape=s,  # the out\n    grid=g,  # the grid\n)")
    out = cst.Module([]).code_for_node(insert_keywords(call, [("in_specs", "[spec]")], anchor=None))
    assert out == "pl.pallas_call(\n    kernel,  # k\n    out_shape=s,  # the out\n    grid=g,  # the grid\n    in_specs=[spec],\n)", out


def test_a_keyword_appended_after_a_last_argument_without_comma_leaves_its_comment_there():
    call = cst.parse_expression("pl.pallas_call(\n    kernel,  # k\n    grid=g  # the grid\n)")
    out = cst.Module([]).code_for_node(insert_keywords(call, [("in_specs", "[spec]")], anchor=None))
    assert out == "pl.pallas_call(\n    kernel,  # k\n    grid=g,  # the grid\n    in_specs=[spec]\n)", out


def test_a_keyword_appended_to_a_call_on_one_line_keeps_the_comment_ending_it():
    call = cst.parse_expression("pl.pallas_call(kernel, grid=g  # the grid\n)")
    out = cst.Module([]).code_for_node(insert_keywords(call, [("in_specs", "[spec]")], anchor=None, explode=False))
    assert out == "pl.pallas_call(kernel, grid=g, in_specs=[spec]  # the grid\n)", out
