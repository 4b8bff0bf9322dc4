"""Kernel parameters a rewrite leaves unread are removed with their partial keyword
(pallas_fix.rewrite.kernel.dead_params), and nothing else is."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.rewrite.kernel.dead_params import drop_dead_params

BEFORE = '''import functools

import jax
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref, *, bk, scale):
    o_ref[...] = x_ref[pl.ds(0, bk)] * scale


def call(x, bk):
    return pl.pallas_call(functools.partial(kernel, bk=bk, scale=2.0), out_shape=x)(x)
'''
# What a rewrite leaves: the window is a block now, `bk` is read nowhere in the kernel.
AFTER = BEFORE.replace("x_ref[pl.ds(0, bk)]", "x_ref[...]")


def _drop(before: str, after: str) -> str:
    return drop_dead_params(cst.parse_module(before), cst.parse_module(after), "kernel").code


def test_a_parameter_the_rewrite_made_dead_goes_with_its_partial_keyword():
    out = _drop(BEFORE, AFTER)
    assert "def kernel(x_ref, o_ref, *, scale):" in out
    assert "functools.partial(kernel, scale=2.0)" in out


def test_the_partial_and_its_import_go_when_nothing_else_is_bound():
    before = BEFORE.replace(", scale=2.0", "").replace(", scale", "").replace(" * scale", "")
    after = before.replace("x_ref[pl.ds(0, bk)]", "x_ref[...]")
    out = _drop(before, after)
    assert "def kernel(x_ref, o_ref):" in out
    assert "pl.pallas_call(kernel, out_shape=x)" in out
    assert "import functools" not in out
    compile(out, "k.py", "exec")


@pytest.mark.parametrize(
    "before, after",
    [
        # still read after the rewrite
        (BEFORE, AFTER.replace("* scale", "* scale * bk")),
        # never read, before either: the user's own parameter, not the rewrite's doing
        (BEFORE.replace("x_ref[pl.ds(0, bk)]", "x_ref[...]"), AFTER),
        # bound positionally: dropping it would shift the others
        (BEFORE.replace("def kernel(x_ref, o_ref, *, bk, scale)", "def kernel(bk, x_ref, o_ref, *, scale)")
         .replace("partial(kernel, bk=bk,", "partial(kernel, bk,"),
         AFTER.replace("def kernel(x_ref, o_ref, *, bk, scale)", "def kernel(bk, x_ref, o_ref, *, scale)")
         .replace("partial(kernel, bk=bk,", "partial(kernel, bk,")),
        # the bound value is a call: dropping it would not run it
        (BEFORE.replace("bk=bk", "bk=block(bk)"), AFTER.replace("bk=bk", "bk=block(bk)")),
        # the kernel is referenced twice: another caller may bind it
        (BEFORE + "\nother = kernel\n", AFTER + "\nother = kernel\n"),
        # the partial is bound again by an outer partial, which may pass the parameter itself
        (BEFORE.replace("pl.pallas_call(functools.partial(kernel, bk=bk, scale=2.0)",
                        "pl.pallas_call(functools.partial(inner, bk=4)").replace("def call(x, bk):", "inner = functools.partial(kernel, bk=8, scale=2.0)\n\n\ndef call(x, bk):"),
         AFTER.replace("pl.pallas_call(functools.partial(kernel, bk=bk, scale=2.0)",
                       "pl.pallas_call(functools.partial(inner, bk=4)").replace("def call(x, bk):", "inner = functools.partial(kernel, bk=8, scale=2.0)\n\n\ndef call(x, bk):")),
    ],
    ids=["still-read", "never-read", "positional", "call-value", "referenced-twice", "partial-of-partial"],
)
def test_everything_else_is_left_alone(before, after):
    assert _drop(before, after) == after


def test_a_partial_bound_to_a_name_the_pallas_call_runs_counts():
    before = BEFORE.replace("    return pl.pallas_call(functools.partial(kernel, bk=bk, scale=2.0), out_shape=x)(x)",
                            "    k = functools.partial(kernel, bk=bk, scale=2.0)\n    return pl.pallas_call(k, out_shape=x)(x)")
    after = before.replace("x_ref[pl.ds(0, bk)]", "x_ref[...]")
    assert "k = functools.partial(kernel, scale=2.0)" in _drop(before, after)
