"""A rank counted from the kernel's indexing is a lower bound, not a fact: `x_ref[h, pl.ds(...)]`
spells two indices, and is as legal on a (heads, rows, cols) ref, where it reads a (bk, cols)
tile. A plan that writes BlockSpecs of the counted rank is therefore unsafe (written by plain
`--apply` only once verified on an example, whose trace tells the rank) and says why. Before,
such a plan was safe: written unverified, it failed at trace time on every 3-D call the original
ran (red team, 2026-12-07)."""

from __future__ import annotations

from pallas_fix.core.model import FixSafety
from pallas_fix.engine import analyze_source, fix_source

KERNEL = '''\
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def double_kernel(x_ref, o_ref, *, bk):
    h = pl.program_id(0)

    def body(i, c):
        o_ref[h, pl.ds(i * bk, bk)] = x_ref[h, pl.ds(i * bk, bk)] * 2.0
        return c

    jax.lax.fori_loop(0, x_ref.shape[1] // bk, body, 0)


@functools.partial(jax.jit, static_argnames=["bk"])
def double_rows(x, bk=16):
    {shape}return pl.pallas_call(
        functools.partial(double_kernel, bk=bk),
        grid=(x.shape[0],),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=4),
    )(x)
'''


def test_a_counted_rank_makes_the_plan_unsafe_and_says_so() -> None:
    src = KERNEL.format(shape="")
    plans = [f.plan for f in analyze_source(src, "k.py").findings if f.plan is not None]
    assert plans and all(p.safety is FixSafety.UNSAFE for p in plans)
    assert all("takes `x_ref` as rank 2 from the indices every access of it spells" in p.description for p in plans)
    assert fix_source(src, "k.py").source == src  # nothing written unverified
    assert "pl.BlockSpec((None, bk), lambda i, j: (i, j))" in fix_source(src, "k.py", unsafe=True).source


def test_a_rank_the_wrapper_states_keeps_the_plan_safe() -> None:
    """`rows, cols = x.shape`: the call site says rank 2, so nothing is counted."""
    src = KERNEL.format(shape="rows, cols = x.shape\n    ")
    plans = [f.plan for f in analyze_source(src, "k.py").findings if f.plan is not None]
    assert plans and all(p.safety is FixSafety.SAFE for p in plans), [p.description for p in plans]
    assert "pl.BlockSpec((None, bk), lambda i, j: (i, j))" in fix_source(src, "k.py").source
