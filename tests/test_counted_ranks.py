"""A rank counted from the kernel's indexing is a lower bound, not a fact: `x_ref[h, pl.ds(...)]`
spells two indices, and is as legal on a (heads, rows, cols) ref, where it reads a (bk, cols)
tile. Where the examples' trace shows the operand with another rank, the trace wins: the plan
takes the traced rank (a hypothesis, so unsafe and verified) instead of writing 2-D BlockSpecs
that fail at trace time on the very calls the original ran (red team, 2026-12-07: before, the
count won and the lift wrote blocks of the wrong rank). Where nothing else tells the rank, the
count stands, as the README's fix-safety section says."""

from __future__ import annotations

from pallas_fix.core.config import Config
from pallas_fix.core.model import FixSafety
from pallas_fix.core.traced_facts import Seen, TracedFacts
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
    return pl.pallas_call(
        functools.partial(double_kernel, bk=bk),
        grid=(x.shape[0],),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=4),
    )(x)
'''


def _traced(shape: tuple) -> Config:
    seen = Seen("double_rows(f32[2, 64, 128])", "double_kernel", 0, ((shape, "float32"),), ((shape, "float32"),))
    return Config(traced_facts=TracedFacts((seen,)))


def test_a_trace_of_a_higher_rank_wins_over_the_count() -> None:
    config = _traced((2, 64, 128))
    plans = [f.plan for f in analyze_source(KERNEL, "k.py", config).findings if f.plan is not None]
    assert plans and all(p.safety is FixSafety.UNSAFE for p in plans)
    assert any("has rank 3 on the examples" in p.description for p in plans), [p.description for p in plans]
    out = fix_source(KERNEL, "k.py", config, unsafe=True).source
    assert "pl.BlockSpec((None, bk), " not in out  # the count's 2-D block
    assert "pl.BlockSpec((None, bk, x.shape[2]), lambda j, i: (j, i, 0))" in out, out
    assert "if x.ndim != 3:" in out  # the hypothesis, stated before the call


def test_a_trace_that_agrees_leaves_the_counted_plan_as_it_was() -> None:
    counted = fix_source(KERNEL, "k.py").source
    assert "pl.BlockSpec((None, bk), lambda i, j: (i, j))" in counted
    assert fix_source(KERNEL, "k.py", _traced((2, 64))).source == counted
