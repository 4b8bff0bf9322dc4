"""rewrite.kernel.ref_lists: a comprehension's target read as the refs it walks only over a
literal list of distinct kernel inputs, bound by that comprehension alone. The golden pair is
program_id_blocks/pid_refs_listed_in_comprehension_triton; jax-triton's LSTM cell is the real form."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.rewrite.kernel.ref_lists import listed_refs

_KERNEL = """
def kernel(a_ref, b_ref, c_ref, o_ref):
    j = 0
    ws = {comp}
{extra}"""

_INPUTS = {"a_ref", "b_ref", "c_ref"}


def _listed(comp: str, extra: str = ""):
    ctx = ModuleContext(_KERNEL.format(comp=comp, extra=extra))
    kernel = next(n for n in ctx.module.body if isinstance(n, cst.FunctionDef))
    return listed_refs(ctx, kernel, "w_ref", _INPUTS)


def test_a_list_or_generator_over_literal_inputs_is_read():
    found = _listed("[w_ref[j] for w_ref in [a_ref, b_ref, c_ref]]")
    assert found is not None and found.name == "w_ref" and found.refs == ("a_ref", "b_ref", "c_ref")
    assert len(found.mentions) == 4  # the target and the three listed names
    assert _listed("tuple(w_ref[j] for w_ref in (c_ref, a_ref))").refs == ("c_ref", "a_ref")


@pytest.mark.parametrize("comp, extra", [
    ("[w_ref[j] for w_ref in [a_ref, b_ref] if j]", ""),  # a filter: not every listed ref is accessed
    ("[w_ref[j] for w_ref in [a_ref, o_ref]]", ""),  # an output: its writes would be read per ref
    ("[w_ref[j] for w_ref in [a_ref, a_ref]]", ""),  # the same ref twice
    ("[w_ref[j] for w_ref in refs]", ""),  # not a literal
    ("[w_ref[j] for w_ref in [a_ref, b_ref] for k in [0]]", ""),  # a second `for`
    ("[w_ref[j] for w_ref in [a_ref, b_ref]]", "    w_ref = c_ref\n"),  # bound again
    ("[w_ref[j] for w_ref in [a_ref, b_ref]]", "    vs = [w_ref for w_ref in [c_ref]]\n"),  # two comprehensions
])
def test_anything_else_is_not_read(comp: str, extra: str):
    assert _listed(comp, extra) is None
