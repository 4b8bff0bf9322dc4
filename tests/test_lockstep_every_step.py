"""A block read in lockstep with a proved (or ragged) operand takes that operand's extent only
where every grid step reads it (pallas_fix.rewrite.proofs.every_step): under `pl.when` the array
may be shorter, and its BlockSpec would fetch blocks past its end (red-team: TPU interpret mode
raised IndexError on the rewrite; the original, which reads `r` only where it has rows, ran)."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.values.provenance import Env
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.rewrite.proofs.every_step import Reader, read_every_step

RAGGED = '''import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# pallas-fix: example add_prefix(f32[40, 128], f32[8, 128])

BM = 8


def add_prefix_kernel(x_ref, r_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BM, BM), :] = x_ref[pl.ds(i * BM, BM), :]

    @pl.when(i * BM < r_ref.shape[0])
    def _():
        o_ref[pl.ds(i * BM, BM), :] += r_ref[pl.ds(i * BM, BM), :]


def add_prefix(x, r):
    m, n = x.shape
    return pl.pallas_call(
        add_prefix_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(GRID,),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, r)
'''


# The same read in a loop whose trip count the step computes: 0 where `r` has no rows.
IN_LOOP = RAGGED.replace("""    @pl.when(i * BM < r_ref.shape[0])
    def _():
        o_ref[pl.ds(i * BM, BM), :] += r_ref[pl.ds(i * BM, BM), :]
""", """    def body(k, carry):
        o_ref[pl.ds(i * BM, BM), :] += r_ref[pl.ds(i * BM, BM), :]
        return carry

    jax.lax.fori_loop(0, jnp.where(i * BM < r_ref.shape[0], 1, 0), body, 0)
""").replace("import jax\n", "import jax\nimport jax.numpy as jnp\n")

# A test of the extent, decided at trace time: a shorter `r` is read in no step at all.
SHAPE_IF = RAGGED.replace("""    @pl.when(i * BM < r_ref.shape[0])
    def _():
""", """    if r_ref.shape[0] >= x_ref.shape[0]:
        pass
""")


# A `while_loop` whose first test a step computes (red-team: the trip count was not looked at).
IN_WHILE = RAGGED.replace("""    @pl.when(i * BM < r_ref.shape[0])
    def _():
        o_ref[pl.ds(i * BM, BM), :] += r_ref[pl.ds(i * BM, BM), :]
""", """    def more(k):
        return k < jnp.where(i * BM < r_ref.shape[0], 1, 0)

    def body(k):
        o_ref[pl.ds(i * BM, BM), :] += r_ref[pl.ds(i * BM, BM), :]
        return k + 1

    jax.lax.while_loop(more, body, 0)
""").replace("import jax\n", "import jax\nimport jax.numpy as jnp\n")

# A static loop whose trip count is read from `r`'s extent: 0 trips for the example's short `r`.
EXTENT_FOR = SHAPE_IF.replace("    if r_ref.shape[0] >= x_ref.shape[0]:\n        pass\n",
                              "    for _ in range(r_ref.shape[0] // x_ref.shape[0]):\n        pass\n")

# A flag the wrapper computes from the shapes and binds with functools.partial, read as a plain
# `if` in the kernel (red-team: `if has_r:` was trusted as a caller's flag).
SHAPE_FLAG = SHAPE_IF.replace("    if r_ref.shape[0] >= x_ref.shape[0]:\n", "    if has_r:\n").replace(
    "def add_prefix_kernel(x_ref, r_ref, o_ref):", "def add_prefix_kernel(x_ref, r_ref, o_ref, *, has_r):").replace(
    "        add_prefix_kernel,\n", "        functools.partial(add_prefix_kernel, has_r=has_r),\n").replace(
    "    m, n = x.shape\n", "    m, n = x.shape\n    has_r = r.shape[0] >= m\n").replace("import jax\n", "import functools\n\nimport jax\n")


@pytest.mark.parametrize("grid", ["pl.cdiv(m, BM)", "m // BM"])
@pytest.mark.parametrize("kernel", ["when", "loop", "shape_if", "while", "extent_for", "shape_flag"])
def test_a_window_read_in_some_steps_only_does_not_take_its_lockstep_witness_rows(grid, kernel):
    source = {"when": RAGGED, "loop": IN_LOOP, "shape_if": SHAPE_IF, "while": IN_WHILE, "extent_for": EXTENT_FOR,
              "shape_flag": SHAPE_FLAG}[kernel].replace("GRID", grid)
    assert source.count("r_ref[pl.ds(i * BM, BM), :]") == 1, source
    out = fix_source(source, "add_prefix.py", unsafe=True).source
    assert "x_ref[...]" in out  # the witness lifts
    # Not `r`: its BlockSpec would fetch blocks past its end, and a check `r.shape[0] >= 40` would
    # reject the example's call, which the original runs.
    assert "r_ref[pl.ds(i * BM, BM), :]" in out and "raise ValueError" not in out, out
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "r_ref[pl.ds(i * BM, BM), :]" in text)
    (finding,) = [f for f in analyze_source(source, "add_prefix.py").findings if "`r_ref`" in f.message and f.span.line == line]
    assert "cannot prove the blocks of `r_ref` stay inside" in (finding.refusal or ""), finding


KERNEL = '''def kernel(x_ref, o_ref):
    a = x_ref[0]
    def body(k, acc):
        return acc + x_ref[1]
    def branch():
        return x_ref[2]
    lax.fori_loop(0, 2, body, 0)
    lax.cond(a > 0, branch, lambda: x_ref[3])
    b = x_ref[4] if a else 0
    if a:
        c = x_ref[5]
    if o_ref.shape[0] > 8:
        d = x_ref[10]
    @pl.when(a > 0)
    def _():
        o_ref[...] = x_ref[6]
    def tail():
        o_ref[...] = x_ref[7]
    pl.when(a > 0)(tail)
    def some(k, acc):
        return acc + x_ref[8]
    lax.fori_loop(0, jnp.where(pl.program_id(0) > 0, 1, 0), some, 0)
    @pl.loop(0, x_ref.shape[0])
    def _(k):
        o_ref[...] += x_ref[9]
'''


def test_read_every_step_knows_the_traced_conditions():
    # A Python `if` (or conditional expression) is decided when the kernel is traced: the same in
    # every step, but one that tests an extent or a flag (redteam8) may leave a shorter array unread
    # in all of them. `pl.when` bodies, `lax.cond` branches and a loop whose trip count a step computes
    # run in some steps only.
    ctx = ModuleContext("from jax import lax\nfrom jax.experimental import pallas as pl\n" + KERNEL)
    kernel = next(n for n in ctx.module.body if isinstance(n, cst.FunctionDef))
    subs = {}
    for node in walk(kernel):
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value == "x_ref":
            subs[int(node.slice[0].slice.value.value)] = node
    env = Env(ctx, kernel, Env(ctx, ctx.module, None, {}, {}), {}, {})
    assert {k: read_every_step(ctx, kernel, env, s) for k, s in sorted(subs.items())} == {
        0: True, 1: True, 2: False, 3: False, 4: False, 5: False, 6: False, 7: False, 8: False, 9: True, 10: False}


NESTED = '''def wrapper(x, r, flag):
    has_r = r.shape[0] >= x.shape[0]
    def kernel(x_ref, r_ref, o_ref):
        if has_r:
            a = r_ref[0]
        if flag:
            b = r_ref[1]
        for _ in range(x_ref.shape[0] // 8):
            c = r_ref[2]
        for _ in range(r_ref.shape[0] // 8):
            d = r_ref[3]
        n = r.shape[0] // 8
        for _ in range(n):
            e = r_ref[4]
'''


def test_read_every_step_reads_flags_and_trip_counts_through_their_bindings():
    # A flag the wrapper computed from an extent may skip a shorter `r`, and so may the caller's own
    # flag, off with a short stand-in `r` (redteam8). A loop's trip count matters only when read from `r`'s own extent (here
    # through a closed-over local).
    ctx = ModuleContext(NESTED)
    wrapper = next(n for n in ctx.module.body if isinstance(n, cst.FunctionDef))
    kernel = next(n for n in walk(wrapper) if isinstance(n, cst.FunctionDef) and n.name.value == "kernel")
    subs = {int(n.slice[0].slice.value.value): n for n in walk(kernel)
            if isinstance(n, cst.Subscript) and isinstance(n.value, cst.Name) and n.value.value == "r_ref"}
    env = Env(ctx, kernel, Env(ctx, ctx.module, None, {}, {}), {}, {})
    reader = Reader("r_ref", cst.Name("r"), {})
    assert {k: read_every_step(ctx, kernel, env, s, reader=reader) for k, s in sorted(subs.items())} == {
        0: False, 1: False, 2: True, 3: False, 4: False}


FLAG = '''import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM = 8


def add_extra_kernel(x_ref, r_ref, o_ref, *, use_r):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BM, BM), :] = x_ref[pl.ds(i * BM, BM), :]
    if TEST:
        o_ref[pl.ds(i * BM, BM), :] += r_ref[pl.ds(i * BM, BM), :]


def add_extra(x, r, use_r=True):
    m, n = x.shape
    return pl.pallas_call(
        functools.partial(add_extra_kernel, use_r=use_r),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // BM,),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, r)
'''


@pytest.mark.parametrize("test, lockstep", [("use_r", False), ("r_ref is not None", True)])
def test_a_callers_flag_may_leave_a_stand_in_unread(test, lockstep):
    """redteam8: `add_extra(x, jnp.zeros((8, 128)), use_r=False)` ran; the safe-marked rewrite gave
    `r` the rows of `x` ((BM, n) blocks indexed by i) and TPU interpret mode raised on its blocks past
    the end. Only `r_ref is not None` says the operand is there whenever the read is skipped."""
    findings = analyze_source(FLAG.replace("TEST", test), "k.py").findings
    r_read = next(f for f in findings if "`r_ref`" in f.message)
    assert r_read.fix_safety is not None and (r_read.fix_safety.value == "safe") == lockstep, r_read.fix_safety
