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


ROWS = '''\
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def kernel(x_ref, o_ref):
    def body(i, carry):
        o_ref[i, :] = x_ref[i, :] * 2.0
        return carry

    jax.lax.fori_loop(0, 8, body, 0)


def double(x):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)
'''


def test_a_refusal_resting_on_a_counted_rank_says_it_is_counted() -> None:
    # `o_ref` is shaped like `x`, whose rank only the kernel's two indices tell: TPU's rule on the
    # last two dims holds for a 2-D array, but the array may have more dims, so the words may not
    # call it 2-D (it read "dim 0 of the 2-D `o_ref`").
    refusals = {f.refusal for f in analyze_source(ROWS, "k.py").findings}
    assert any("dim 0 of `o_ref`, which the kernel indexes with 2 indices and whose rank nothing at the call states"
               in r for r in refusals), refusals
    stated = ROWS.replace("def double(x):\n", "def double(x):\n    m, n = x.shape\n")
    refusals = {f.refusal for f in analyze_source(stated, "k.py").findings}
    assert any("dim 0 of the 2-D `o_ref`" in r for r in refusals), refusals
