"""Shared by the --apply tests of files and notebooks: a kernel with one fixable finding, the CLI
run in-process, and the planner that fixes it.

The write path (encodings, newlines, atomic replace, notebook cells) does not depend on which
codemod produced the rewrite. Until the real PF104 codemod (R4, `jnp.int32(3) * BS` -> `3 * BS`)
is registered, a stand-in planner doing the same rewrite lets those tests run; each test that uses
`planner` runs with both, and the "real" variant skips while R4 is missing.
"""

from __future__ import annotations

import pytest

import libcst as cst
import libcst.matchers as m

from pallas_fix import codemods
from pallas_fix.frontends.cli.app import main
from pallas_fix.core.plans import FixPlan, use_key
from pallas_fix.core.model import FixSafety, Origin

KERNEL = '''"""Pick one block of rows."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# pallas-fix: example pick(f32[128, 128])

BS = 32


def pick_kernel(x_ref, o_ref):
    # the start is a traced constant
    third = jnp.int32(3) * BS
    o_ref[...] = x_ref[pl.ds(third, BS), :]


def pick(x):
    assert x.shape[0] >= 4 * BS, "pick reads the fourth block of rows"
    return pl.pallas_call(
        pick_kernel,
        out_shape=jax.ShapeDtypeStruct((BS, x.shape[1]), x.dtype),
    )(x)
'''

_INT32_LITERAL = m.Call(func=m.Attribute(value=m.Name("jnp"), attr=m.Name("int32")), args=[m.Arg(value=m.Integer())])


class _Unwrap(cst.CSTTransformer):
    def leave_Call(self, original_node, updated_node):
        if m.matches(updated_node, _INT32_LITERAL):
            return updated_node.args[0].value
        return updated_node


def stand_in_pf104(analysis):
    """R4 for the one form KERNEL uses: `jnp.int32(<int literal>)` becomes the literal."""
    out = {}
    if "jnp.int32(" not in analysis.source:
        return out
    for use in analysis.uses:
        if use.provenance.origin is Origin.TRACED_CONST:
            out[use_key(use)] = FixPlan(
                codemod="stand-in-hoist",
                safety=FixSafety.SAFE,
                uses=[use],
                description="jnp.int32(N) -> N (test stand-in for R4)",
                rewrite=lambda module: module.visit(_Unwrap()),
            )
    return out


stand_in_pf104.name = "stand-in-hoist"
stand_in_pf104.codes = frozenset({"PF104"})


def real_pf104_available() -> bool:
    return any("PF104" in getattr(p, "codes", ()) for p in codemods.PLANNERS if p is not stand_in_pf104)


@pytest.fixture(params=["stand-in", "real"])
def planner(request, monkeypatch):
    """Which PF104 planner the run uses; the rest of the registry is left out so that only the
    expected rewrite happens."""
    if request.param == "real":
        if not real_pf104_available():
            pytest.skip("no codemod with PF104 in its codes is registered yet (R4 is being written); "
                        "the stand-in variant of this test covers the write path meanwhile")
        chosen = [p for p in codemods.PLANNERS if "PF104" in getattr(p, "codes", ())]
    else:
        chosen = [stand_in_pf104]
    monkeypatch.setattr(codemods, "PLANNERS", chosen)
    return request.param


def run_cli(*args: str) -> int:
    """`pallas-fix ARGS` in this process; its exit status."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    code = info.value.code
    return 0 if code is None else int(code)
