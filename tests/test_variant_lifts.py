"""Lifting a call's kernel variants each against its own arm (rewrite.callsite.variant_arms): which
bindings the arm pins, which shapes of `if` leave the variants refused, and how `--apply` verifies
them (the golden pairs and refusals are program_id_blocks/pid_variants_* and
refuse_pid_variants_*)."""

from __future__ import annotations

from pallas_fix.engine import analyze_source, plan_kernel
from pallas_fix.frontends.kernel_rewrites import reached, unit_names
from pallas_fix.verify.runner import Verdict

_WRAPPER = '''
import functools
import jax
from jax.experimental import pallas as pl


def _scaled_kernel(x_ref, o_ref, *, bm):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bm, bm), :] = x_ref[pl.ds(i * bm, bm), :] * 2.0


def _plain_kernel(x_ref, o_ref, *, bm):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bm, bm), :] = x_ref[pl.ds(i * bm, bm), :]


def run(x, scaled, bm=8):
{head}    if scaled:
        kernel_fn = _scaled_kernel
        in_specs = [pl.no_block_spec]
        out_specs = [pl.no_block_spec]
    else:
        kernel_fn = _plain_kernel
        in_specs = [pl.no_block_spec]
        out_specs = [pl.no_block_spec]
{tail}    (out,) = pl.pallas_call(
        functools.partial(kernel_fn, bm=bm),
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype)],
        grid=(x.shape[0] // bm,),
        in_specs=in_specs,
        out_specs=out_specs,
    )(x)
    return out
'''


def _lifts(src: str) -> list:
    return [f for f in analyze_source(src, "k.py").findings if f.code == "PF103"]


def test_each_variant_lifts_against_its_own_arms_lists():
    lifts = _lifts(_WRAPPER.format(head="", tail=""))
    assert len(lifts) == 4 and all(f.plan is not None for f in lifts), [f.refusal for f in lifts]
    # each plan is its own variant's: its edits stay in its def and its arm, none is joined
    assert all("the same operand's window" not in f.plan.description for f in lifts)


def test_a_list_also_bound_before_the_if_is_not_pinned():
    """`in_specs = ...` before the `if` too: a read after the `if` sees one of two values only on
    some paths (an arm that did not rebind it would leave the first), so no arm's value is taken."""
    lifts = _lifts(_WRAPPER.format(head="    in_specs = [pl.no_block_spec]\n", tail=""))
    inputs = [f for f in lifts if "x_ref" in f.message]
    assert inputs and all(f.plan is None for f in inputs), [f.refusal for f in inputs]


def test_a_rebinding_after_the_if_is_not_the_arms_value():
    lifts = _lifts(_WRAPPER.format(head="", tail="    in_specs = list(in_specs)\n"))
    inputs = [f for f in lifts if "x_ref" in f.message]
    assert inputs and all(f.plan is None for f in inputs), [f.refusal for f in inputs]


def test_an_if_inside_a_loop_leaves_the_variants_refused():
    src = _WRAPPER.format(head="", tail="").replace("    if scaled:", "    for _ in range(1):\n      if scaled:")
    src = src.replace("\n        kernel_fn", "\n          kernel_fn").replace("\n        in_specs", "\n          in_specs")
    src = src.replace("\n        out_specs = [", "\n          out_specs = [").replace("    else:\n", "      else:\n")
    lifts = _lifts(src)
    assert lifts and all(f.plan is None for f in lifts), [f.refusal for f in lifts]
    assert all("a name bound to one of" in (f.refusal or "") for f in lifts), [f.refusal for f in lifts]


def test_picked_variants_are_one_unit_verified_on_the_examples_of_either():
    """The trace names each def (`_plain_kernel`), not the name that picks it (`kernel_fn`):
    `--apply` verifies the call's variants as one unit, reached by an example of either."""
    lifts = _lifts(_WRAPPER.format(head="", tail=""))
    unit = plan_kernel(lifts[0].plan)
    assert unit_names(unit) == {"_scaled_kernel", "_plain_kernel"}, unit
    ran_plain = Verdict("run", "verified", details={"pallas_calls": [{"kernel": "_plain_kernel"}]})
    assert reached(ran_plain, unit)
    assert not reached(ran_plain, "kernel_fn")
