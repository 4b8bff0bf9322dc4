"""A reduction loop held in a helper the kernel calls once (rewrite.loops.helper_inline), and the
check `trip >= 1` a lift writes where the examples show its loop runs (rewrite.proofs.one_step).

The golden pairs and refusal fixtures (tests/fixtures/codemods/lift_reduction/helper_held_loop*,
refuse_helper_loop_*, loop_from_one_guarded, refuse_loop_may_run_no_step) run through the
interpreters and the jaxpr check; these tests pin what the fixtures cannot show on their own:
the inlined text before the lift, scope-aware substitution, a kernel-local helper, `__all__`,
and the guard's evidence (wrapper arguments, traced operand shapes, none).
"""

from __future__ import annotations

import re

import pytest
from kernel_loading import FIXTURES

from pallas_fix.analysis.result import analyze
from pallas_fix.core.config import Config
from pallas_fix.core.model import Backend
from pallas_fix.core.plans import Refuse
from pallas_fix.core.traced_facts import Seen, TracedFacts
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.rewrite.loops.helper_inline import held_loop, inlined_source

_TPU = Config(backend=Backend.TPU)

_MODULE = '''import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BK = 128
{extra}

def _k_loop(x_ref, y_ref, bm, bn, bk):
    nk = x_ref.shape[1] // bk

    def body(k, acc):
        x = x_ref[:, pl.ds(k * bk, bk)]
        y = y_ref[pl.ds(k * bk, bk), :]
        return acc + jnp.dot(x, y, preferred_element_type=jnp.float32)

    return lax.fori_loop(0, nk, body, jnp.zeros((bm, bn), jnp.float32))


def matmul_kernel(x_ref, y_ref, o_ref, *, bk):
    bm, bn = o_ref.shape
{call}
    o_ref[...] = acc.astype(o_ref.dtype)


@jax.jit
def matmul(x, y):
    m, k = x.shape
    _, n = y.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, bk=BK),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x, y)
'''


def _inlined(source: str) -> str:
    analysis = analyze(source, "<test>", _TPU)
    for use in analysis.uses:
        loop, site = use.provenance.loop, use.kernel_site
        if loop is not None and site is not None and site.kernel is not None:
            held = held_loop(analysis.ctx, site.kernel, loop)
            if held is not None:
                return inlined_source(analysis.ctx, site.kernel, held)
    raise AssertionError("no helper-held loop found")


def _kernel_text(source: str) -> str:
    return source[source.index("def matmul_kernel"):source.index("@jax.jit")]


def test_inlined_body_takes_the_call_s_place_and_the_def_goes():
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)")
    out = _inlined(source)
    assert "def _k_loop" not in out
    kernel = _kernel_text(out)
    assert "    nk = x_ref.shape[1] // bk\n" in kernel
    assert "    acc = lax.fori_loop(0, nk, body, jnp.zeros((bm, bn), jnp.float32))\n" in kernel
    assert kernel.index("bm, bn = o_ref.shape") < kernel.index("nk = ") < kernel.index("o_ref[...] = acc")


def test_a_name_argument_is_substituted():
    # `rows` is passed the kernel's `bm`: the helper's reads of it (the carry's shape) read `bm`.
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)").replace(
        "def _k_loop(x_ref, y_ref, bm, bn, bk):", "def _k_loop(x_ref, y_ref, rows, bn, bk):").replace(
        "jnp.zeros((bm, bn), jnp.float32)", "jnp.zeros((rows, bn), jnp.float32)")
    kernel = _kernel_text(_inlined(source))
    assert "jnp.zeros((bm, bn), jnp.float32)" in kernel and "rows" not in kernel


def test_a_parameter_bound_to_an_expression_is_bound_before_the_body():
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn_out=bn * 1, bk=bk)").replace(
        "def _k_loop(x_ref, y_ref, bm, bn, bk):", "def _k_loop(x_ref, y_ref, bm, bn_out, bk):").replace(
        "jnp.zeros((bm, bn), jnp.float32)", "jnp.zeros((bm, bn_out), jnp.float32)")
    kernel = _kernel_text(_inlined(source))
    assert re.search(r"\n    bn_out = bn \* 1\n    nk = ", kernel), kernel
    assert "jnp.zeros((bm, bn_out), jnp.float32)" in kernel


def test_nested_parameter_of_the_same_name_is_not_renamed():
    # The helper's `y_ref` is passed the kernel's `w_ref`; the nested body declares a `y_ref` of
    # its own (a default): its reads are the body's, not the helper's parameter.
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, w_ref, bm, bn, bk)").replace(
        "def matmul_kernel(x_ref, y_ref, o_ref, *, bk):", "def matmul_kernel(x_ref, w_ref, o_ref, *, bk):").replace(
        "    def body(k, acc):\n", "    def body(k, acc, y_ref=y_ref):\n")
    kernel = _kernel_text(_inlined(source))
    assert "def body(k, acc, y_ref=w_ref):" in kernel
    assert "y = y_ref[pl.ds(k * bk, bk), :]" in kernel


def test_the_def_stays_when_the_module_exports_it():
    source = _MODULE.format(extra='\n__all__ = ["_k_loop", "matmul"]\n', call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)")
    out = _inlined(source)
    assert "def _k_loop" in out
    assert "nk = x_ref.shape[1] // bk" in _kernel_text(out)


def test_a_public_module_level_helper_stays_for_other_modules():
    """pallas-fix sees one file: `k_loop` without a leading underscore may be imported elsewhere,
    so its def stays though the kernel no longer calls it; the private `_k_loop` goes."""
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)").replace("_k_loop", "k_loop")
    out = _inlined(source)
    assert "def k_loop" in out and "nk = x_ref.shape[1] // bk" in _kernel_text(out)
    assert "def _k_loop" not in _inlined(_MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)"))


def test_a_kernel_local_helper_is_inlined_and_its_def_removed():
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)")
    helper = source[source.index("def _k_loop"):source.index("def matmul_kernel")]
    local = "\n".join(("    " + line) if line else "" for line in helper.rstrip().splitlines()) + "\n\n"
    source = source.replace(helper, "").replace("    bm, bn = o_ref.shape\n", "    bm, bn = o_ref.shape\n" + local)
    result = fix_source(source, "<test>", _TPU, unsafe=True)
    assert result.error is None, result.error
    assert result.applied and result.applied[0].startswith("inlined `_k_loop` into `matmul_kernel`")
    assert "_k_loop" not in result.source
    assert "grid=(x.shape[1] // BK,)" in result.source


def test_identity_parameter_the_helper_rebinds_is_refused():
    # `x_ref = x_ref.at[...]` in the helper would rebind the kernel's `x_ref` once inlined.
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)").replace(
        "    nk = x_ref.shape[1] // bk\n", "    x_ref = x_ref.at[:, :]\n    nk = x_ref.shape[1] // bk\n")
    refusals = [f.refusal for f in analyze_source(source, "<test>", _TPU).findings if f.refusal]
    assert any("would bind `x_ref`, a name `matmul_kernel` uses too" in r for r in refusals), refusals


def test_the_lift_after_inlining_is_one_plan():
    source = _MODULE.format(extra="", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)")
    result = fix_source(source, "<test>", _TPU, unsafe=True)
    assert result.rounds == 1 and len(result.applied) == 1
    assert "then lifted the reduction over `k` in `matmul_kernel`" in result.applied[0]
    assert "_k_loop" not in result.source and "fori_loop" not in result.source


# -- part 2: the check that the loop runs -------------------------------------------------------------
_ROWSUM = '''import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BK = 128
{examples}

def _padded(n):
    return (n + BK - 1) // BK * BK


def rowsum_kernel(x_ref, o_ref, *, nk):
    def body(k, acc):
        blk = x_ref[:, pl.ds(k * BK, BK)]
        return acc + jnp.sum(blk, axis=1, keepdims=True)

    acc = lax.fori_loop(1, nk, body, jnp.zeros((x_ref.shape[0], 1), jnp.float32))
    o_ref[...] = acc


def rowsum(x):
    x = jnp.pad(x, ((0, 0), (0, _padded(x.shape[1]) - x.shape[1])))
    cols = x.shape[1]
    return pl.pallas_call(
        functools.partial(rowsum_kernel, nk=cols // BK),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 1), jnp.float32),
        grid=(x.shape[0] // 32,),
        in_specs=[pl.BlockSpec((32, cols), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((32, 1), lambda i: (i, 0)),
    )(x)
'''


def _facts(*cols: int) -> TracedFacts:
    return TracedFacts(tuple(Seen(f"rowsum(f32[64, {c}])", "rowsum_kernel", 0, (((64, c), "float32"),), (((64, 1), "float32"),))
                             for c in cols))


def _refusals(source: str, config: Config) -> list[str]:
    return [f.refusal for f in analyze_source(source, "<test>", config).findings if f.refusal]


def test_zero_step_refusal_kept_without_examples():
    source = _ROWSUM.format(examples="")
    refusals = _refusals(source, Config())
    assert any("steps may be none at a size the original handles" in r and "no example call fixes it" in r for r in refusals), refusals
    assert fix_source(source, "<test>", Config(), unsafe=True).source == source


def test_guard_written_from_the_traced_operand_shapes():
    # The wrapper pads `x` through a helper: only the trace says how many columns reach the call.
    source = _ROWSUM.format(examples="# pallas-fix: example rowsum(f32[64, 500])\n# pallas-fix: example rowsum(f32[64, 200])")
    assert any("no example call fixes it" in r for r in _refusals(source, Config()))
    config = Config(traced_facts=_facts(512, 256))
    result = fix_source(source, "<test>", config, unsafe=True)
    assert result.error is None, result.error
    assert '    if (cols // BK) - 1 < 1:\n        raise ValueError("(cols // BK) - 1 must be at least 1")\n' in result.source, result.source
    assert "the examples run it at least once (3 in `rowsum(f32[64, 512])`, 1 in `rowsum(f32[64, 256])`)" in result.applied[0]


def test_guard_refused_where_an_example_runs_no_step():
    source = _ROWSUM.format(examples="# pallas-fix: example rowsum(f32[64, 100])")
    refusals = _refusals(source, Config(traced_facts=_facts(512, 128)))
    assert any("the example `rowsum(f32[64, 128])` runs it no step" in r for r in refusals), refusals


def test_guard_is_an_assert_where_the_wrapper_asserts():
    source = _ROWSUM.format(examples="# pallas-fix: example rowsum(f32[64, 500])").replace(
        "    cols = x.shape[1]\n", "    cols = x.shape[1]\n    assert x.ndim == 2\n")
    result = fix_source(source, "<test>", Config(traced_facts=_facts(512)), unsafe=True)
    assert '    assert (cols // BK) - 1 >= 1, "(cols // BK) - 1 must be at least 1"\n' in result.source, result.source


def test_a_global_a_factory_around_the_kernel_binds_is_refused():
    # The kernel comes from a factory that binds `SCALE`: inlined, the helper's `SCALE` (the
    # module's) would read the factory's.
    source = _MODULE.format(extra="SCALE = 0.5\n", call="    acc = _k_loop(x_ref, y_ref, bm, bn, bk)").replace(
        "return acc + jnp.dot(", "return acc + SCALE * jnp.dot(")
    kernel = source[source.index("def matmul_kernel"):source.index("\n\n@jax.jit")]
    factory = "def make_kernel():\n    SCALE = 2.0\n\n" + "\n".join("    " + l if l else "" for l in kernel.splitlines()) + "\n\n    return matmul_kernel\n"
    source = source.replace(kernel, factory).replace("functools.partial(matmul_kernel, bk=BK)", "functools.partial(make_kernel(), bk=BK)")
    analysis = analyze(source, "<test>", _TPU)
    for use in analysis.uses:
        loop, site = use.provenance.loop, use.kernel_site
        if loop is None or site is None or site.kernel is None:
            continue
        held = held_loop(analysis.ctx, site.kernel, loop)
        assert held is not None
        with pytest.raises(Refuse, match="reads the module.s `SCALE`, which `make_kernel` binds too"):
            inlined_source(analysis.ctx, site.kernel, held)
        return
    raise AssertionError("no loop found")


def test_a_refusal_after_the_inlining_names_lines_of_the_users_file():
    """The second helper's refusal is found on the text with the first inlined: the line it names
    is `_get_specs`'s in the file as written (36), not in that text (31)."""
    path = FIXTURES / "codemods" / "lift_reduction" / "refuse_helper_loop_spec_helper_called_twice.py"
    source = path.read_text(encoding="utf-8")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if text.startswith("def _get_specs"))
    reasons = [f.refusal for f in analyze_source(source, str(path)).findings if f.refusal and "_get_specs" in f.refusal]
    assert reasons and all(f"`_get_specs` (line {line})" in r for r in reasons), (line, reasons)
