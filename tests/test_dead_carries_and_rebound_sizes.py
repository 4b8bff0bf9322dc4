"""Three readings real kernels needed (real corpus part k, primatrix/tokamax's KDA kernels):

- a `fori_loop` whose body ignores its carry and hands back a constant, run as a statement, carries
  nothing (analysis.loops.loops._dead_carry), so it lifts as an independent loop;
- a kernel parameter the body rebinds (`BT, BK = k_ref.shape[1], ...`) is read at the call as the
  binding that reaches the read (rewrite.text.translate);
- a loop whose trip count reads the program id and which writes outputs lifts only where the
  steps it skips write back rows the original also left unwritten (blockspecs.unwritten_steps_problem).
"""

from __future__ import annotations

import textwrap

import pytest

from pallas_fix.engine import analyze_source, fix_source

HEADER = """
import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
"""

LOOP = """
def kernel(x_ref, o_ref):
    def body(c, carry):
{body}
    {statement}lax.fori_loop(0, x_ref.shape[0] // 8, body, {init})


def run(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


def _loop(body: str, statement: str = "", init: str = "0"):
    src = HEADER + LOOP.format(body=textwrap.indent(textwrap.dedent(body), " " * 8), statement=statement, init=init)
    result = analyze_source(src, "k.py")
    (loop,) = {id(u.provenance.loop): u.provenance.loop for u in result.analysis.uses if u.provenance.loop}.values()
    return loop, result.findings


WRITE = "o_ref[pl.ds(c * 8, 8), :] = x_ref[pl.ds(c * 8, 8), :] * 2.0\n"


@pytest.mark.parametrize("ret", ["return 0", "return -1.0", "return None", "return"])
def test_a_constant_handed_back_by_a_loop_run_as_a_statement_is_no_carry(ret):
    loop, findings = _loop(WRITE + ret)
    assert not loop.carries
    assert {f.code for f in findings} == {"PF101"}
    assert all(f.fixable for f in findings), [f.refusal for f in findings]


@pytest.mark.parametrize("body, statement", [
    (WRITE + "return 0", "r = "),                 # a constant, but assigned: someone may read it
    (WRITE + "return carry + 1", ""),             # computed from the carry
    (WRITE + "return jnp.float32(0)", ""),        # a call: it may do anything
    ("def inner():\n    return carry\n" + WRITE + "return 0", ""),  # read by a nested function
    ("o_ref[pl.ds(c * 8, 8), :] = x_ref[pl.ds(c * 8, 8), :] * carry\nreturn 0", ""),  # read: step 0 sees init
])
def test_a_carry_someone_may_read_stays_a_carry(body, statement):
    loop, _ = _loop(body, statement)
    assert loop.carries


REBOUND = """
D = 128


def heads_kernel(x_ref, o_ref, *, heads):
    {before}
    heads = o_ref.shape[2] // D
    i_nh = pl.program_id(0)
    i_b, i_h = i_nh // heads, i_nh % heads
    o_ref[i_b, :, pl.ds(i_h * D, D)] = x_ref[i_b, :, pl.ds(i_h * D, D)] * 2.0


def heads_call(x, heads):
    assert x.shape[2] == heads * D
    return pl.pallas_call(
        functools.partial(heads_kernel, heads=heads),
        grid=(x.shape[0] * heads,),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
"""


def _x_finding(src: str):
    findings = analyze_source(HEADER + src, "k.py").findings
    return next(f for f in findings if "`x_ref`" in f.message)


def test_a_rebound_parameter_reads_as_the_rebinding_that_reaches_the_index():
    src = HEADER + REBOUND.format(before="pass")
    finding = _x_finding(REBOUND.format(before="pass"))
    assert finding.fixable, finding.refusal
    assert "lambda i: (i // (x.shape[2] // D), 0, i % (x.shape[2] // D))" in fix_source(src, "k.py").source


def test_a_read_before_the_rebinding_is_the_argument_the_call_passed():
    # `heads` is read for the fold before the kernel rebinds it: the partial's keyword.
    src = REBOUND.replace("    i_b, i_h = i_nh // heads, i_nh % heads\n", "").replace(
        "    heads = o_ref.shape[2] // D\n    i_nh = pl.program_id(0)\n",
        "    i_nh = pl.program_id(0)\n    i_b, i_h = i_nh // heads, i_nh % heads\n    heads = o_ref.shape[2] // D\n")
    assert src != REBOUND
    finding = _x_finding(src.format(before="pass"))
    assert finding.fixable, finding.refusal
    assert "lambda i: (i // heads, 0, i % heads)" in fix_source(HEADER + src.format(before="pass"), "k.py").source


def test_a_rebinding_in_one_arm_of_a_traced_branch_decides_nothing():
    # `rebind` comes from the wrapper's own argument: nothing says which arm runs.
    src = (REBOUND.replace("    heads = o_ref.shape[2] // D\n", "    if rebind:\n        heads = o_ref.shape[2] // D\n")
           .replace("*, heads):", "*, heads, rebind):").replace("def heads_call(x, heads):", "def heads_call(x, heads, rebind):")
           .replace("heads=heads)", "heads=heads, rebind=rebind)").format(before="pass"))
    finding = _x_finding(src)
    assert not finding.fixable
    assert "cannot be written at the pallas_call" in finding.refusal
