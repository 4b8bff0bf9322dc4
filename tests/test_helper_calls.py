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


# A window built across helper levels: the kernel passes `i * tile` and `tile`, a helper builds
# `pl.ds(start, size)` (or hands it on). The start is a multiple of the window at every level.
LEVELS = {
    1: """
        def _store(ref, start, size, v):
            ref[pl.ds(start, size), :] = v
    """,
    2: """
        def _put(ref, rows, v):
            ref[rows, :] = v


        def _store(ref, start, size, v):
            _put(ref, pl.ds(start, size), v)
    """,
    3: """
        def _write(ref, start, size, v):
            ref[pl.ds(start, size), :] = v


        def _put(ref, start, size, v):
            _write(ref, start, size, v)


        def _store(ref, start, size, v):
            _put(ref, start=start, v=v, size=size)
    """,
}

LEVEL_KERNEL = """
    def kernel(x_ref, o_ref, *, tile):
        def body(i, carry):
            {call}
            return carry

        lax.fori_loop(0, x_ref.shape[0] // tile, body, None)


    def run(x):
        return pl.pallas_call(functools.partial(kernel, tile=16), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


def _level_findings(helpers: str, call: str):
    src = "import functools\n" + HEADER + textwrap.dedent(helpers) + textwrap.dedent(LEVEL_KERNEL).replace("{call}", call)
    return analyze_source(src, "k.py").findings


def test_a_window_built_across_helper_levels_is_a_block_at_every_level():
    calls = (
        "_store(o_ref, i * tile, tile, x_ref[pl.ds(i * tile, tile), :])",
        "_store(o_ref, size=tile, v=x_ref[pl.ds(i * tile, tile), :], start=i * tile)",
    )
    for level, helpers in LEVELS.items():
        for call in calls:
            findings = _level_findings(helpers, call)
            assert sorted(f.code for f in findings) == ["PF101", "PF101"], (level, call, [f.refusal for f in findings])
            assert all(f.fixable for f in findings), (level, call, [f.refusal for f in findings])
            assert not any("not a multiple" in (f.refusal or "") + f.message for f in findings)


def test_an_overlapping_window_across_helpers_is_still_pf106_in_the_callers_words():
    call = "_store(o_ref, i * tile, 2 * tile, x_ref[pl.ds(i * tile, 2 * tile), :])"
    for level, helpers in LEVELS.items():
        findings = _level_findings(helpers, call)
        assert [f.code for f in findings] == ["PF106", "PF106"], level
        assert all("start `i * tile` is not a multiple of the window size `2 * tile`" in f.message for f in findings), level


def test_a_start_hinted_with_multiple_of_in_the_helper_is_read_through():
    helpers = """
        def _store(ref, start, size, v):
            start = pl.multiple_of(start, size)
            ref[pl.ds(start, size), :] = v
    """
    findings = _level_findings(helpers, "_store(o_ref, i * tile, tile, x_ref[pl.ds(i * tile, tile), :])")
    assert [f.code for f in findings] == ["PF101", "PF101"]
    assert all(f.fixable for f in findings), [f.refusal for f in findings]
    assert "`start` receives `i * tile` from the call `_store(...)`" in findings[0].provenance


def test_a_size_the_caller_cannot_see_is_refused_as_not_followed_not_as_misaligned():
    helpers = """
        def _store(ref, start, v):
            rows = v.shape[0]
            ref[pl.ds(start, rows), :] = v
    """
    findings = _level_findings(helpers, "_store(o_ref, i * tile, x_ref[pl.ds(i * tile, tile), :])")
    assert findings and not any(f.fixable for f in findings)
    assert not any(f.code == "PF106" or "not a multiple" in (f.refusal or "") for f in findings)
    refusal = next(f.refusal for f in findings if f.span.line == 12)  # `ref[pl.ds(start, rows), :] = v`
    assert "the start `start` reads the parameter `start`, whose value comes from the call `_store(...)`" in (refusal or "")
    assert "could not read that argument together with the window size `rows`" in (refusal or "")
