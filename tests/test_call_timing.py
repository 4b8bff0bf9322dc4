"""A size written at the pallas_call must hold there what the kernel got (rewrite.call_timing):
an operand rebound between the pallas_call and its invocation, an out_shape or BlockSpec entry
rebound between its binding and the pallas_call, and a wrapper name a nested kernel reads when
the call runs. analysis.same_value decides, in either order; tests/fixtures/traps/rebound_*.py
and the `refuse_*rebound*` / `refuse_call_then_pad` codemod fixtures test it end to end."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.result import analyze
from pallas_fix.analysis.values.same_value import value_change
from pallas_fix.rewrite.callsite.reading import CallSite
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.text.translate import Translator

_KERNEL = """
import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def k(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0
"""


def _call_site(wrapper: str) -> CallSite:
    analysis = analyze(_KERNEL + textwrap.dedent(wrapper), "k.py")
    site = analysis.sites[0]
    return CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))


def _code(cs: CallSite, expr) -> str:
    return cst.Module([]).code_for_node(expr)


@pytest.mark.parametrize(
    "between",
    ["x = jnp.pad(x, ((0, 0), (0, 56)))", "x += 1", "for x in (x, x):\n        pass", "if x.shape[0]:\n        x = x.T"],
)
def test_an_operand_rebound_after_the_call_is_built_is_refused_with_the_line(between: str):
    cs = _call_site(f"""
def f(x):
    call = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
    {between}
    return call(x)
""")
    with pytest.raises(CallSiteError, match=r"`x` is rebound at line \d+ after the pallas_call \(line \d+\) and before the call at line \d+"):
        cs.shape_dim("x_ref", 1)
    assert not cs.arg_at_call(cs.slots["x_ref"].arg)


@pytest.mark.parametrize(
    "wrapper",
    [
        # invoked where it is built
        "def f(x):\n    x = jnp.pad(x, ((0, 0), (0, 56)))\n    return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n",
        # built, then invoked with nothing rebound in between (a rebinding after the call is fine)
        "def f(x):\n    call = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))\n    y = jnp.pad(x, ((0, 0), (0, 56)))\n    out = call(x)\n    x = y\n    return out\n",
    ],
)
def test_an_operand_that_holds_the_kernels_array_is_written(wrapper: str):
    cs = _call_site(wrapper)
    assert _code(cs, cs.shape_dim("x_ref", 1)) == "x.shape[1]"
    assert cs.arg_at_call(cs.slots["x_ref"].arg)


def test_an_operand_built_and_called_in_one_loop_iteration_is_written():
    cs = _call_site("""
def f(xs):
    for x in xs:
        call = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
        y = call(x)
    return y
""")
    assert _code(cs, cs.shape_dim("x_ref", 0)) == "x.shape[0]"


def test_an_out_shape_entry_rebound_before_the_call_is_refused():
    cs = _call_site("""
def f(x):
    n, d = x.shape
    out_shape = jax.ShapeDtypeStruct((n, d), x.dtype)
    d = d + 56
    return pl.pallas_call(k, out_shape=out_shape)(x)
""")
    assert _code(cs, cs.shape_dim("o_ref", 0)) == "n"  # `n` still holds the out_shape's value
    with pytest.raises(CallSiteError, match=r"`d` in out_shape \(line \d+\) is rebound at line \d+ before the pallas_call"):
        cs.shape_dim("o_ref", 1)


def test_an_out_shape_entry_unchanged_since_its_binding_is_written():
    cs = _call_site("""
def f(x):
    n, d = x.shape
    out_shape = jax.ShapeDtypeStruct((n, d), x.dtype)
    e = d + 56
    return pl.pallas_call(k, out_shape=out_shape)(x)
""")
    assert _code(cs, cs.shape_dim("o_ref", 1)) == "d"


def test_a_block_shape_rebound_before_the_call_is_refused():
    cs = _call_site("""
def f(x):
    bm = 8
    spec = pl.BlockSpec((bm, x.shape[1]), lambda i: (i, 0))
    bm = 16
    return pl.pallas_call(k, grid=(4,), in_specs=[spec], out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
""")
    with pytest.raises(CallSiteError, match=r"`pl.BlockSpec\(.*\)` in the BlockSpec of `x_ref` .* is rebound at line \d+ \(its `bm`\)"):
        cs.kernel_shape_dim("x_ref", 0)


def test_a_wrapper_name_a_nested_kernel_reads_when_the_call_runs():
    src = _KERNEL + textwrap.dedent("""
    def f(x):
        bk = 128

        def kern(x_ref, o_ref):
            o_ref[...] = x_ref[:, pl.ds(0, bk)]

        call = pl.pallas_call(kern, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
        bk = 256
        return call(x)
    """)
    analysis = analyze(src, "k.py")
    site = next(s for s in analysis.sites if s.kernel_name == "kern")
    env = analysis.detection.envs.get(site.kernel)
    read = next(n for n in walk(site.kernel) if isinstance(n, cst.Name) and n.value == "bk")
    with pytest.raises(CallSiteError, match=r"the kernel reads `bk` when the call at line \d+ runs it, and `bk` is rebound at line \d+"):
        Translator(analysis.ctx, site, lambda *_: None)(read, env)
    unchanged = src.replace("    bk = 256\n", "")
    assert unchanged != src
    analysis = analyze(unchanged, "k.py")
    site = next(s for s in analysis.sites if s.kernel_name == "kern")
    read = next(n for n in walk(site.kernel) if isinstance(n, cst.Name) and n.value == "bk")
    assert Translator(analysis.ctx, site, lambda *_: None)(read, analysis.detection.envs.get(site.kernel)).value == "bk"


def test_value_change_either_order_names_the_binding():
    ctx = ModuleContext(textwrap.dedent("""
    def f(x):
        call = g()
        x = h(x)
        return call(x)
    """))
    call = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "g")
    arg = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "call").args[0].value
    assert value_change(ctx, arg, call) is not None  # one way: `at` runs first, so not the same without either_order
    change = value_change(ctx, arg, call, either_order=True)
    assert change is not None and (change.name, change.line) == ("x", 4)
    ctx = ModuleContext(textwrap.dedent("""
    def f(x):
        call = g()
        y = h(x)
        return call(x)
    """))
    call = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "g")
    arg = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "call").args[0].value
    assert value_change(ctx, arg, call, either_order=True) is None


def test_an_attribute_operand_is_written_only_where_the_call_is_invoked_as_built():
    # `self.w = ...` binds no name: between a pallas_call built apart and its invocation,
    # nothing says the attribute still holds the array
    apart = _call_site("""
class M:
    def f(self):
        call = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(self.w.shape, self.w.dtype))
        self.w = jnp.pad(self.w, ((0, 0), (0, 56)))
        return call(self.w)
""")
    assert not apart.arg_at_call(apart.slots["x_ref"].arg)
    direct = _call_site("""
class M:
    def f(self):
        return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(self.w.shape, self.w.dtype))(self.w)
""")
    assert direct.arg_at_call(direct.slots["x_ref"].arg)
