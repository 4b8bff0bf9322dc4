"""PF108's contiguous-window fix: an integer array spelled as a contiguous range (`start +
jnp.arange(size)`, the Triton idiom for a ragged block, as in JAX's gpu/rms_norm.py) is offered as
the `pl.ds(start, size)` window it reads, and no other integer array is. The golden pairs and the
interpreter runs are in tests/fixtures/codemods/contiguous_window/ (tests/test_codemod_pairs.py)."""

from __future__ import annotations

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source, fix_source

_KERNEL = '''import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def kernel(x_ref, idx_ref, o_ref, *, bs):
    n = x_ref.shape[0]

    def body(i, acc):
        cols = {cols}
        return acc + pltriton.load(x_ref.at[{index}], mask=cols < n, other=0.0)

    o_ref[...] = lax.fori_loop(0, pl.cdiv(n, bs), body, jnp.zeros(bs))


def total(x, idx):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16,), x.dtype),
        compiler_params=pltriton.CompilerParams(),
    )(x, idx)
'''


def _source(cols: str, index: str = "cols") -> str:
    return _KERNEL.replace("{cols}", cols).replace("{index}", index)


def _pf108(cols: str, index: str = "cols") -> list:
    return [f for f in analyze_source(_source(cols, index), "k.py").findings if f.code == "PF108"]


def _fixed(cols: str, index: str = "cols") -> str:
    result = fix_source(_source(cols, index), "k.py", Config(), codemods={"contiguous-window"}, unsafe=True)
    assert result.error is None, result.error
    return result.source


def test_a_range_is_offered_as_its_window() -> None:
    for cols in ("i * bs + jnp.arange(bs)", "jnp.arange(bs) + i * bs", "i * bs + lax.iota(jnp.int32, bs)"):
        (finding,) = _pf108(cols)
        assert finding.fixable and finding.fix_id == "contiguous-window", (cols, finding.refusal)
        fixed = _fixed(cols)
        assert "pltriton.load(x_ref.at[pl.ds(i * bs, bs)], mask=cols < n, other=0.0)" in fixed, fixed
        assert "cols = " in fixed  # the mask still reads it


def test_other_integer_arrays_are_refused_with_the_reason() -> None:
    for cols in ("idx_ref[...] + i", "i * bs + jnp.arange(0, 2 * bs, 2)", "i * bs * jnp.arange(bs)",
                 "i * bs + 2 * jnp.arange(bs)", "i * bs + bs - 1 - jnp.arange(bs)", "idx_ref[...] + jnp.arange(bs)"):
        findings = _pf108(cols)
        assert findings and all(not f.fixable for f in findings), (cols, findings)
        # indices computed from a table the kernel loads are a data-dependent gather, said as such
        reason = "a data-dependent gather" if cols.startswith("idx_ref") else "is not a contiguous range"
        assert all(reason in f.refusal for f in findings), (cols, [f.refusal for f in findings])
        assert _fixed(cols) == _source(cols)


def test_a_range_with_lanes_sent_elsewhere_is_refused_with_what_to_write() -> None:
    # brainevent's coomv: `jnp.where(valid, elems, 0)` keeps the lanes inside the array where they
    # are; a window past the end would be clamped whole and move them.
    (finding,) = _pf108("jnp.where(i * bs + jnp.arange(bs) < n, i * bs + jnp.arange(bs), 0)")
    assert not finding.fixable, finding
    assert "is the range `pl.ds(i * bs, bs)` with some lanes sent elsewhere" in finding.refusal, finding.refusal
    assert "pad the array to whole windows" in finding.refusal


def test_a_range_broadcast_against_the_window_shape_is_refused() -> None:
    # `rows[:, None]` alone gathers (bs, 1), the window (bs,): no window form has that shape.
    (finding,) = _pf108("i * bs + jnp.arange(bs)", "cols[:, None]")
    assert not finding.fixable and "broadcast to a shape" in finding.refusal, finding.refusal


def test_a_table_read_through_a_range_keeps_its_gather() -> None:
    # `idx_ref[jnp.arange(bs)]` is the window `idx_ref[pl.ds(0, bs)]`, but the rows it picks from
    # `x_ref` are data: that gather stays.
    source = _source("idx_ref[jnp.arange(bs)]")
    findings = {f.span.column: f for f in analyze_source(source, "k.py").findings if f.code == "PF108"}
    outer = [f for f in findings.values() if f.message.startswith("`x_ref`")]
    assert outer and all(not f.fixable and "a data-dependent gather" in f.refusal for f in outer)
    fixed = _fixed("idx_ref[jnp.arange(bs)]")
    assert "cols = idx_ref[pl.ds(0, bs)]" in fixed and "x_ref.at[cols]" in fixed, fixed


def test_the_window_then_gets_the_lift_refusal_a_written_window_gets() -> None:
    """After the fix, the window is an ordinary `pl.ds` window: the finding `--apply`'s rounds leave
    is the one for `x_ref.at[pl.ds(i * bs, bs)]` written by hand (here: a Triton reduction)."""
    by_hand = analyze_source(_source("i * bs + jnp.arange(bs)", "pl.ds(i * bs, bs)"), "k.py").findings
    normalised = _fixed("i * bs + jnp.arange(bs)")
    after = analyze_source(normalised, "k.py").findings
    assert [(f.code, f.refusal) for f in after] == [(f.code, f.refusal) for f in by_hand]
    assert after and "Triton runs grid axes as independent programs" in after[0].refusal


_OUTER = '''import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def kernel(x_ref, o_ref, *, bm, bn):
    j = pl.program_id(0)
    cols = j * bn + jnp.arange(bn)

    def body(i, acc):
        rows = i * bm + jnp.arange(bm)
        return acc + pltriton.load(x_ref.at[rows[:, None], {cols}]).sum(axis=0)

    pltriton.store(o_ref.at[cols], lax.fori_loop(0, x_ref.shape[0] // bm, body, jnp.zeros(bn)))


def col_sums(x):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((x.shape[1],), x.dtype), grid=(x.shape[1] // 16,),
        compiler_params=pltriton.CompilerParams(),
    )(x)
'''


def test_an_outer_product_of_ranges_is_two_windows_however_the_row_is_broadcast() -> None:
    """`cols[None]` leaves its last dim implicit, as numpy does: the same `cols[None, :]`, as
    JAX's own Triton norm backwards write it."""
    for cols in ("cols[None, :]", "cols[None]"):
        found = [f for f in analyze_source(_OUTER.replace("{cols}", cols), "k.py").findings if f.code == "PF108"]
        assert found and all(f.fixable for f in found), (cols, [f.refusal for f in found])


def test_a_range_through_compiler_hints_is_its_window() -> None:
    """`pl.multiple_of` and `pltriton.max_contiguous` are hints whose value is their argument
    (jax-triton's LSTM cell: `idx_m = pltriton.max_contiguous(pl.multiple_of(idx_m, bm), bm)`)."""
    for cols in ("pltriton.max_contiguous(pl.multiple_of(i * bs + jnp.arange(bs), bs), bs)",
                 "i * bs + jnp.arange(bs)\n        cols = pltriton.max_contiguous(pl.multiple_of(cols, bs), bs)"):
        (finding,) = _pf108(cols)
        assert finding.fixable and finding.fix_id == "contiguous-window", (cols, finding.refusal)
        assert "pltriton.load(x_ref.at[pl.ds(i * bs, bs)], mask=cols < n, other=0.0)" in _fixed(cols)
    (finding,) = _pf108("pltriton.max_contiguous(2 * jnp.arange(bs), bs)")  # a hint does not make a step a range
    assert not finding.fixable


_SHARED_LINE = '''import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def kernel(x_ref, o_ref, *, bm):
    pm = pl.program_id(0)
    rows = pm * bm + jnp.arange(bm)
    rows = pl.multiple_of(rows, bm); scale = 2.0
    x = pltriton.load(x_ref.at[rows])
    pltriton.store(o_ref.at[rows], x * scale)


def scale(x, bm=16):
    return pl.pallas_call(
        functools.partial(kernel, bm=bm),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // bm,),
        compiler_params=pltriton.CompilerParams(num_warps=4),
    )(x)
'''


def test_a_range_and_its_hints_go_together_or_stay_together() -> None:
    """Found re-reading the change: a hint sharing its line with another statement stayed while
    the range it rebinds went, so it read `rows` unbound (UnboundLocalError when traced)."""
    result = fix_source(_SHARED_LINE, "k.py", Config(), codemods={"contiguous-window"}, unsafe=True)
    assert result.error is None, result.error
    assert "rows = pm * bm + jnp.arange(bm)" in result.source  # kept, with the hint that reads it
    assert "pltriton.load(x_ref.at[pl.ds(pm * bm, bm)])" in result.source
