"""A window written after `...` in its index sits at a dim counted from the ref's end: pallas-fix
does not read the rank there, so it refuses the window (saying to spell the dims out) instead of
taking its position for its dim. Before this, `x_ref[..., heads]` on a 3-D ref had its block
moved onto dim 1 (jondeaton/tensor-product-attention-jax's `qa_ref[..., heads_slice]`).
Windows before a `...` keep their dims; spelled out, the same window lifts onto dim 2."""

from __future__ import annotations

import pytest

from pallas_fix.engine import analyze_source, fix_source

KERNEL = '''\
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def head_sums_kernel(x_ref, o_ref, *, block_h):
    heads = pl.ds(pl.program_id(0) * block_h, block_h)
    {read}
    o_ref[...] = jnp.sum(x, axis=1)


@functools.partial(jax.jit, static_argnames=["block_h"])
def head_sums(x, block_h=4):
    seq, rank, num_heads = x.shape
    return pl.pallas_call(
        functools.partial(head_sums_kernel, block_h=block_h),
        grid=(num_heads // block_h,),
        in_specs=[pl.BlockSpec({block}, lambda h: (0, 0, 0))],
        out_specs=pl.BlockSpec((seq, block_h), lambda h: (0, h)),
        out_shape=jax.ShapeDtypeStruct((seq, num_heads), x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=4),
    )(x)
'''


def _source(read: str, block: str = "(seq, rank, num_heads)") -> str:
    return KERNEL.format(read=read, block=block)


@pytest.mark.parametrize("read", [
    "x = x_ref[..., heads]",
    "x = x_ref.at[..., heads][...]",
    "x = x_ref[(..., heads)]",
    "idx = (Ellipsis, heads); x = x_ref[idx]",
])
def test_a_window_after_an_ellipsis_is_refused_and_says_why(read: str) -> None:
    src = _source(read)
    report = analyze_source(src, "k.py")
    x_findings = [f for f in report.findings if "x_ref" in f.message]
    assert x_findings, "the window is still found"
    assert all("`...` comes before it in the index" in (f.refusal or "") for f in x_findings)
    assert fix_source(src, "k.py", unsafe=True).source == src


def test_spelled_out_the_same_window_lifts_onto_its_own_dim() -> None:
    src = _source("x = x_ref[:, :, heads]")
    out = fix_source(src, "k.py", unsafe=True).source
    assert "pl.BlockSpec((seq, rank, block_h), lambda h: (0, 0, h))" in out
    assert "x = x_ref[...]" in out


def test_a_window_before_an_ellipsis_keeps_its_dim() -> None:
    src = _source("x = x_ref[heads, ...]", block="(num_heads, rank, seq)").replace(
        "seq, rank, num_heads = x.shape", "num_heads, rank, seq = x.shape")
    out = fix_source(src, "k.py", unsafe=True).source
    assert "pl.BlockSpec((block_h, rank, seq), lambda h: (h, 0, 0))" in out


MATMUL = '''\
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def matmul_kernel(x_ref, w_ref, o_ref, *, bk):
    def body(k, acc):
        x = x_ref[..., pl.ds(k * bk, bk)]
        w = w_ref[pl.ds(k * bk, bk), :]
        return acc + jnp.dot(x, w, preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, x_ref.shape[1] // bk, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=["bk"])
def matmul(x, w, bk=128):
    m, k = x.shape
    _, n = w.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, bk=bk),
        grid=(m // 128,),
        in_specs=[
            pl.BlockSpec({x_block}, lambda i: (i, 0)),
            pl.BlockSpec((k, n), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((128, n), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, w)
'''


def test_an_ellipsis_standing_for_one_dim_of_a_stated_rank_keeps_the_window_liftable() -> None:
    """The K loop of a matmul, `x_ref[..., pl.ds(k * bk, bk)]` on a (128, k) block: `...` is dim 0,
    so the window is on dim 1 and the reduction lifts onto a grid axis walking it."""
    src = MATMUL.format(x_block="(128, k)")
    report = analyze_source(src, "k.py")
    x_findings = [f for f in report.findings if "`x_ref`" in f.message]
    assert x_findings and all("`...`" not in (f.refusal or "") for f in x_findings)
    out = fix_source(src, "k.py", unsafe=True).source
    assert "lambda i, k: (i, k)" in out, out


def test_an_ellipsis_standing_for_no_dim_is_refused() -> None:
    """`x_ref[:, ..., w]` on the 2-D block: `...` stands for no dim, so the window's dim (1) is
    not its position (2); refused, as planners read positions."""
    src = MATMUL.format(x_block="(128, k)").replace("x_ref[..., pl.ds(k * bk, bk)]", "x_ref[:, ..., pl.ds(k * bk, bk)]")
    report = analyze_source(src, "k.py")
    x_findings = [f for f in report.findings if "`x_ref`" in f.message]
    assert x_findings and all("`...` comes before it in the index" in (f.refusal or "") for f in x_findings)


ROWS = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def rows_kernel(x_ref, o_ref):
    def body(b, carry):
        o_ref[b, ...] = x_ref[b, ...] * 2.0
        return carry

    jax.lax.fori_loop(0, x_ref.shape[0], body, 0)


def rows(x):
    return pl.pallas_call(
        rows_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)
'''


def test_a_scalar_index_before_an_ellipsis_is_still_found() -> None:
    """`x_ref[b, ...]`: the `...` comes after the loop's row, whose dim is known; the read is a
    row of the ref, not a table entry (b53cd0f: 6420b5c lost these findings)."""
    found = {f.message.split("`")[1] for f in analyze_source(ROWS, "k.py").findings}
    assert {"x_ref", "o_ref"} <= found, found
