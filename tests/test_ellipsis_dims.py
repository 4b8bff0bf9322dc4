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
