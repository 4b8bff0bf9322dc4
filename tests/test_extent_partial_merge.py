"""A full size the kernel reads becomes a functools.partial keyword (rewrite.extents.extent_params).
Where the pallas_call is passed a name bound to a partial just before, the keyword joins that
partial; where the size's value could differ between the two statements, or the name means
more than that one partial, the name is wrapped in a partial of its own at the call."""

from __future__ import annotations

import ast

import pytest

from pallas_fix.engine import fix_source

SOURCE = '''import functools

import jax
from jax.experimental import pallas as pl

BS = 16


def frac_kernel(x_ref, o_ref, *, scale):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * (scale / x_ref.shape[0])


def row_share(x, scale=2.0):
    kernel = functools.partial(frac_kernel, scale=scale)
    BETWEEN
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // BS,))(x)
'''

MERGED = "kernel = functools.partial(frac_kernel, scale=scale, x_rows=x.shape[0])"
WRAPPED = "functools.partial(kernel, x_rows=x.shape[0])"


@pytest.mark.parametrize("between, merged", [
    ("pass", True),
    # `x` rebound between the partial and the call: its rows at the call are not those at the partial.
    ("x = x[: x.shape[0] // 2]", False),
    ("x, _ = x, 0", False),
    ("for x in [x]: pass", False),
    # The name read again (another call, a list of kernels): it means more than this pallas_call.
    ("kernels = [kernel]", False),
])
def test_the_size_joins_the_named_partial_only_where_it_is_the_same_value(between, merged):
    source = SOURCE.replace("BETWEEN", between)
    out = fix_source(source, "share.py").source
    ast.parse(out)
    assert (MERGED in out) == merged, out
    if merged or between.startswith("x"):  # lifted: otherwise wrapped (the others refuse the lift)
        assert (WRAPPED in out) != merged, out


def test_a_partial_bound_twice_is_not_joined():
    source = SOURCE.replace("BETWEEN", "pass").replace(
        "    kernel = functools.partial(frac_kernel, scale=scale)\n",
        "    kernel = functools.partial(frac_kernel, scale=scale)\n    if scale > 1:\n"
        "        kernel = functools.partial(frac_kernel, scale=1.0)\n")
    out = fix_source(source, "share.py").source
    assert MERGED not in out, out


@pytest.mark.parametrize("signature, expected", [
    # hanging, black's one-line body: the break before `)` stays before `)`
    ("def k(\n    a_ref, o_ref, *, bm\n):\n", "def k(\n    a_ref, o_ref, *, bm, rows, cols\n):\n"),
    ("def k(\n    a_ref,\n    o_ref,\n):\n", "def k(\n    a_ref,\n    o_ref,\n    *,\n    rows,\n    cols,\n):\n"),
    ("def k(a_ref, o_ref):\n", "def k(a_ref, o_ref, *, rows, cols):\n"),
])
def test_new_keyword_parameters_keep_the_signatures_layout(signature, expected):
    """Sizes a lift adds as keyword-only parameters (`rows`, `cols`) go before the `)` wherever the
    signature puts it: a hanging one keeps its line break before `)` (redteam9 found `b_cols):` at
    column 0 once a second round added a parameter to a signature the first had hung)."""
    import libcst as cst
    from pallas_fix.rewrite.extents.extent_params import _with_kwonly

    fn = cst.parse_module(signature + "    pass\n").body[0]
    new = fn.with_changes(params=_with_kwonly(fn.params, ["rows", "cols"]))
    assert cst.Module(body=[new]).code == expected + "    pass\n"
