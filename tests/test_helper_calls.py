"""Slice objects handed to helpers with the refs (analysis.discovery.helper_calls): where the finding
stands, what its provenance says, and the tuples that must not be rewritten as one element."""

from __future__ import annotations

import textwrap

from pallas_fix.engine import analyze_source

HEADER = """
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

# pallas-fix: example run(f32[64, 128])
"""

KERNEL = """
def _rows(x_ref, o_ref, rows):
    o_ref[{index}] = x_ref[{index}] * 2.0


def kernel(x_ref, o_ref):
    @pl.loop(0, x_ref.shape[0] // 16)
    def _(r):
        _rows(x_ref, o_ref, {arg})


def run(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


def _findings(arg: str, before: str = "", index: str = "rows, :"):
    body = KERNEL.format(arg=arg, index=index)
    if before:
        body = body.replace("    def _(r):\n", f"    def _(r):\n        {before}\n")
    src = HEADER + textwrap.dedent(body)
    return src, analyze_source(src, "k.py").findings


def _line_of(src: str, text: str) -> int:
    return next(n for n, line in enumerate(src.splitlines(), 1) if text in line)


def test_each_access_in_the_helper_is_reported_where_it_stands():
    src, findings = _findings("pl.ds(r * 16, 16)")
    assert sorted(f.code for f in findings) == ["PF101", "PF101"]
    assert {f.span.line for f in findings} == {_line_of(src, "o_ref[rows, :] =")}
    assert {f.span.column for f in findings} == {4, 21}  # `o_ref[` and `x_ref[`, as in the helper


def test_the_provenance_names_the_call_that_passes_the_slice():
    src, findings = _findings("pl.ds(r * 16, 16)")
    call_line = _line_of(src, "_rows(x_ref, o_ref, pl.ds")
    for f in findings:
        assert f"`rows` receives `pl.ds(r * 16, 16)` from the call `_rows(...)` at line {call_line}" in f.provenance


def test_a_named_slice_and_a_whole_dim_tuple_are_followed_and_lifted():
    cases = (("idx = pl.ds(r * 16, 16)", "rows, :"), ("idx = (pl.ds(r * 16, 16), slice(None))", "rows"))
    for before, index in cases:
        _, findings = _findings("idx", before, index)
        assert [f.code for f in findings] == ["PF101", "PF101"], before
        assert all(f.fixable for f in findings), [f.refusal for f in findings]


def test_a_tuple_with_another_windowed_dim_is_not_rewritten_as_one_element():
    # Lifting `o_ref[rows]` to `o_ref[...]` would drop the column window `pl.ds(0, 64)`.
    _, findings = _findings("(pl.ds(r * 16, 16), pl.ds(0, 64))", index="rows")
    assert findings and not any(f.fixable for f in findings)
    assert all("other dims that are not whole" in (f.refusal or "") for f in findings)


def test_a_start_passed_as_an_int_is_traced_to_the_loop():
    src = HEADER + textwrap.dedent("""
        def _rows(x_ref, o_ref, start):
            o_ref[pl.ds(start, 16), :] = x_ref[pl.ds(start, 16), :] * 2.0


        def kernel(x_ref, o_ref):
            def body(i, carry):
                _rows(x_ref, o_ref, i * 16)
                return carry

            lax.fori_loop(0, x_ref.shape[0] // 16, body, None)


        def run(x):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    """)
    findings = analyze_source(src, "k.py").findings
    assert [f.code for f in findings] == ["PF101", "PF101"]
    assert all(f.fixable for f in findings), [f.refusal for f in findings]
