"""A reduction whose carry starts as a whole read of a kernel ref (`h = h0_ref[:, :]`, the axlearn
SSD kernels' `h_carry = mutable_final_state_ref[:, :]`): its shape is the ref's block and its dtype
exactly the ref's, so lift-reduction's scratch buffer is written from the call site's operand
(`pltpu.VMEM((h0.shape[0], h0.shape[1]), h0.dtype)`) instead of being refused for want of a
`jnp.zeros(shape, dtype)`.
"""

from __future__ import annotations

import pytest

from pallas_fix.core.config import Config
from pallas_fix.core.examples import parse_example
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.verify.runner import verify_sources

_BEFORE = '''import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BS = 16


def decay_kernel(x_ref, h0_ref, o_ref):
    def body(t, h):
        return h * 0.5 + x_ref[pl.ds(t * BS, BS), :]

    h = h0_ref[{window}]
    o_ref[...] = lax.fori_loop(0, x_ref.shape[0] // BS, body, h)


# pallas-fix: example decay(f32[64, 128], f32[16, 128])
def decay(x, h0):
    return pl.pallas_call(
        decay_kernel,
        out_shape=jax.ShapeDtypeStruct(h0.shape, h0.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x, h0)
'''

_AFTER = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BS = 16


def decay_kernel(x_ref, h0_ref, o_ref, h_ref):
    @pl.when(pl.program_id(0) == 0)
    def _init():
        h_ref[...] = h0_ref[:, :]

    h = h_ref[...]
    h_ref[...] = h * 0.5 + x_ref[...]

    @pl.when(pl.program_id(0) == pl.num_programs(0) - 1)
    def _finalize():
        o_ref[...] = h_ref[...]


# pallas-fix: example decay(f32[64, 128], f32[16, 128])
def decay(x, h0):
    return pl.pallas_call(
        decay_kernel,
        out_shape=jax.ShapeDtypeStruct(h0.shape, h0.dtype),
        grid=(x.shape[0] // BS,),
        in_specs=[
            pl.BlockSpec((BS, x.shape[1]), lambda t: (t, 0)),
            pl.BlockSpec(h0.shape, lambda t: (0, 0)),
        ],
        out_specs=pl.BlockSpec(h0.shape, lambda t: (0, 0)),
        scratch_shapes=[pltpu.VMEM((h0.shape[0], h0.shape[1]), h0.dtype)],
        compiler_params=pltpu.CompilerParams(),
    )(x, h0)
'''


def test_a_carry_read_whole_from_a_ref_gets_the_refs_shape_and_dtype_in_scratch():
    fixed = fix_source(_BEFORE.format(window=":, :"), "k.py", Config(), unsafe=True)
    assert fixed.source == _AFTER


def test_a_carry_read_from_part_of_a_ref_is_still_refused_with_the_spelling_that_would_fix_it():
    found = analyze_source(_BEFORE.format(window="0:4, :"), "k.py").findings
    reasons = [f.refusal or "" for f in found if f.code == "PF102"]
    assert reasons and all("cannot tell the shape and dtype of the carry" in r and "jnp.zeros(shape, dtype)" in r for r in reasons), reasons


@pytest.mark.interp
def test_the_lifted_carry_matches_the_original_in_the_interpreters_at_f32_and_bf16():
    """The golden pair through the interpreters; the jaxpr keeps no dynamic slice, and at bf16
    the scratch buffer (h0.dtype) holds the carry without a cast."""
    before = _BEFORE.format(window=":, :")
    examples = [parse_example("decay(f32[64, 128], f32[16, 128])"), parse_example("decay(bf16[64, 128], bf16[16, 128])")]
    verdicts = verify_sources(before, _AFTER, examples, path="k.py")
    assert [v.status for v in verdicts] == ["verified", "verified"], [v.message for v in verdicts]
    assert [(v.dynamic_slices_before, v.dynamic_slices_after) for v in verdicts] == [(1, 0), (1, 0)]
