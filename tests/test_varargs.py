"""Unit tests for analysis.discovery.varargs: which operand slot each name a kernel binds from `*refs` gets
at its pallas_call, and which bindings leave that unknown. The pairs and refusals under
tests/fixtures/codemods/ (`*varargs*`) test the same mapping end to end through the planners."""

from __future__ import annotations

import textwrap

import pytest

from pallas_fix.analysis.result import analyze
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError

_MODULE = """
import functools
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel({params}):
{body}
    pass

def wrapper(x, y, z):
    return pl.pallas_call(
        {kernel},
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),{extra}
    )({operands})
"""


def _slots(params: str, body: str, *, kernel: str = "kernel", operands: str = "x, y", extra: str = "") -> dict[str, tuple[str, int]]:
    source = _MODULE.format(params=params, body=textwrap.indent(textwrap.dedent(body), "    "), kernel=kernel, operands=operands, extra=extra)
    analysis = analyze(source, "k.py")
    site = analysis.sites[0]
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
    return {name: (slot.kind, slot.index) for name, slot in cs.slots.items()}


@pytest.mark.parametrize(
    "params, body, expected",
    [
        ("*refs", "x_ref, y_ref, o_ref = refs", {"x_ref": ("in", 0), "y_ref": ("in", 1), "o_ref": ("out", 0)}),
        ("x_ref, *rest", "y_ref, o_ref = rest", {"x_ref": ("in", 0), "y_ref": ("in", 1), "o_ref": ("out", 0)}),
        ("*refs", "x_ref, *rest = refs\ny_ref, o_ref = rest", {"x_ref": ("in", 0), "y_ref": ("in", 1), "o_ref": ("out", 0)}),
        ("*refs", "*ins, o_ref = refs\nx_ref = ins[0]\ny_ref = ins[-1]", {"x_ref": ("in", 0), "y_ref": ("in", 1), "o_ref": ("out", 0)}),
        ("*refs", "x_ref = refs[0]\no_ref = refs[-1]", {"x_ref": ("in", 0), "o_ref": ("out", 0)}),
        ("*refs", "o_ref, x_ref = refs[-1], refs[0]\nn = len(refs)", {"x_ref": ("in", 0), "o_ref": ("out", 0)}),
    ],
)
def test_names_bound_from_star_refs_get_their_operand_slot(params: str, body: str, expected):
    assert _slots(params, body) == expected


def test_the_call_s_ref_count_picks_the_arm_of_a_static_if():
    body = """
    if has_bias:
        b_ref, o_ref = refs
    else:
        (o_ref,) = refs
    """
    with_bias = _slots("x_ref, *refs, has_bias", body, kernel="functools.partial(kernel, has_bias=True)")
    assert with_bias == {"x_ref": ("in", 0), "b_ref": ("in", 1), "o_ref": ("out", 0)}
    without = _slots("x_ref, *refs, has_bias", body, kernel="functools.partial(kernel, has_bias=False)", operands="x")
    assert without == {"x_ref": ("in", 0), "o_ref": ("out", 0)}


def test_scratch_counts_from_the_end():
    extra = "\n        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],"
    body = "x_ref = refs[0]\no_ref, acc_ref = refs[-2], refs[-1]"
    assert _slots("*refs", body, extra=extra, operands="x") == {"x_ref": ("in", 0), "o_ref": ("out", 0), "acc_ref": ("scratch", 0)}


@pytest.mark.parametrize(
    "params, body, operands, reason",
    [
        ("*refs", "x_ref, o_ref = refs", "x, y", "different number of refs"),
        ("*refs", "for r in refs:\n    pass", "x", "reads `refs`"),
        ("*refs", "helper(refs)", "x", "reads `refs`"),
        ("*refs", "allr = refs", "x", "bound whole to another name"),
        ("*refs", "x_ref, o_ref = refs\nx_ref = o_ref", "x", "also assigned elsewhere"),
        ("*refs", "x_ref, *rest = refs\nrest = (x_ref,)\n(o_ref,) = rest", "x", "reads `rest`"),
        ("x_ref, *refs", "if x_ref[0, 0] > 0:\n    (o_ref,) = refs", "x", "a traced value"),
        ("*refs", "for _ in range(2):\n    x_ref, o_ref = refs", "x", "nested block"),
        ("*refs, flag", "if flag:\n    a_ref, b_ref, o_ref = refs\nelse:\n    b_ref, a_ref, o_ref = refs", "x, y", "depends on the test"),
    ],
)
def test_bindings_that_leave_the_mapping_unknown_are_refused(params: str, body: str, operands: str, reason: str):
    kernel = "functools.partial(kernel, flag=True)" if "flag" in params else "kernel"
    with pytest.raises(CallSiteError, match=reason):
        _slots(params, body, kernel=kernel, operands=operands)


def test_a_scratch_count_the_call_does_not_fix_is_refused():
    extra = "\n        scratch_shapes=make_scratch(),"
    with pytest.raises(CallSiteError, match="not fixed at the call site"):
        _slots("*refs", "x_ref = refs[0]\no_ref = refs[-1]", extra=extra, operands="x")


_BUILT = """
import functools
import jax
from jax.experimental import pallas as pl

def kernel({params}):
{body}
    pass

def wrapper(x, y, z=None, flag=False):
    {build}
    return pl.pallas_call(
        {kernel},
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(*operands)
"""

_ARMS = """
x_ref, *rest = refs
if flag:
    z_ref, o_ref = rest
else:
    (o_ref,) = rest
    z_ref = None
"""

_SPLIT = """
ins, outs = refs[:n_in], refs[n_in:]
x_ref = ins[0]
z_ref = ins[1] if n_in > 1 else None
(o_ref,) = outs
"""


def _built_slots(params: str, body: str, build: str, kernel: str) -> dict[str, tuple[str, int]]:
    source = _BUILT.format(params=params, body=textwrap.indent(textwrap.dedent(body), "    "), build=build, kernel=kernel)
    analysis = analyze(source, "k.py")
    site = analysis.sites[0]
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
    return {name: (slot.kind, slot.index) for name, slot in cs.slots.items()}


@pytest.mark.parametrize(
    "params, body, build, kernel",
    [
        ("*refs, flag", _ARMS, "operands = (x,) + ((z,) if flag else ())", "functools.partial(kernel, flag=flag)"),
        ("*refs, flag", _ARMS, "operands = [x] + ([] if z is None else [z])", "functools.partial(kernel, flag=z is not None)"),
        ("*refs, flag", _ARMS, "operands = (x, z) if flag else (x,)", "functools.partial(kernel, flag=flag)"),
        ("*refs, n_in", _SPLIT, "operands = (x, z) if flag else (x,)", "functools.partial(kernel, n_in=len(operands))"),
        ("*refs, flag", "x_ref, o_ref = refs[0], refs[-1]\nz_ref = refs[1] if flag else None",
         "operands = [x] + ([z] if flag else [])", "functools.partial(kernel, flag=flag)"),
    ],
)
def test_optional_operands_chosen_by_code_keep_their_refs_at_every_count(params: str, body: str, build: str, kernel: str):
    assert _built_slots(params, body, build, kernel) == {"x_ref": ("in", 0), "z_ref": ("in", 1), "o_ref": ("out", 0)}


@pytest.mark.parametrize(
    "params, body, build, kernel, reason",
    [
        # without `z`, `rest[0]` is the output: the arm fits that count too, so `z_ref` may be the output
        ("*refs, flag", "x_ref, *rest = refs\no_ref = rest[-1]\nif flag:\n    z_ref = rest[0]",
         "operands = (x,) + ((z,) if flag else ())", "functools.partial(kernel, flag=flag)", "two names"),
        ("*refs, n_in", _SPLIT, "operands = (x, z) if flag else (x,)", "functools.partial(kernel, n_in=2 if flag else 1)",
         "not bound with functools.partial to `len"),
        # `len(operands)` counts `x` too, which the named `x_ref` takes: `refs[n_in:]` is empty, as when traced
        ("x_ref, *refs, n_in", "outs = refs[n_in:]\n(o_ref,) = outs", "operands = (x, y) + ((z,) if flag else ())",
         "functools.partial(kernel, n_in=len(operands))", "different number of refs"),
        ("*refs, flag", _ARMS, "operands = (x, z) if flag else (z,)", "functools.partial(kernel, flag=flag)", "called with \\*args"),
        # the flag is not bound to the operand's test: `z_ref` may be `refs[1]` when `z` is not passed
        ("*refs, flag", "x_ref, o_ref = refs[0], refs[-1]\nz_ref = refs[1] if flag else None",
         "operands = [x] + ([z] if flag else [])", "functools.partial(kernel, flag=True)", "a ref is bound under `flag`"),
    ],
)
def test_optional_operands_whose_refs_may_move_are_refused(params: str, body: str, build: str, kernel: str, reason: str):
    with pytest.raises(CallSiteError, match=reason):
        _built_slots(params, body, build, kernel)
