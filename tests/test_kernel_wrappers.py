"""What stands between a kernel def and its pallas_call. A kernel handed over through a lambda that
forwards every ref (`lambda *refs: _kernel(*refs, capacity=capacity)`, as sglang-jax writes it)
is found and analysed, its keywords read as partial keywords. Written in the pallas_call, it
lifts like a partial (a size the lift adds joins the lambda's call); bound to a name before the
call, whose keywords it reads when the call runs, its fixes are refused, saying to write the
partial. A decorator that only names the kernel (`jax.named_call`, also through
functools.partial) leaves its body whole."""

from __future__ import annotations

import pytest

from pallas_fix.engine import analyze_source, fix_source

SOURCE = '''import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref, *, bm):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bm, bm), :] = x_ref[pl.ds(i * bm, bm), :] * 2.0


def run(x, bm=16):
    return pl.pallas_call(
        KERNEL,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // bm,),
    )(x)
'''


def test_a_forwarding_lambda_in_the_call_is_the_kernel_with_its_keywords():
    source = SOURCE.replace("KERNEL", "lambda *refs: _kernel(*refs, bm=bm)")
    findings = analyze_source(source, "k.py").findings
    assert len(findings) == 2 and all(f.fixable for f in findings), [(f.message, f.refusal) for f in findings]
    out = fix_source(source, "k.py").source
    assert "pl.BlockSpec((bm, x.shape[1]), lambda i: (i, 0))" in out and "o_ref[...] = x_ref[...] * 2.0" in out, out


def test_a_lambda_naming_its_refs_is_refused():
    # A lift that adds a scratch ref would call the lambda with one ref more than it takes.
    findings = analyze_source(SOURCE.replace("KERNEL", "lambda x_ref, o_ref: _kernel(x_ref, o_ref, bm=bm)"), "k.py").findings
    assert len(findings) == 2, [f.message for f in findings]
    assert all(not f.fixable and "a lambda that names the refs it forwards" in (f.refusal or "") for f in findings)


def test_a_lambda_bound_before_the_call_is_refused():
    source = SOURCE.replace("    return pl.pallas_call(\n        KERNEL,", "    k = lambda *refs: _kernel(*refs, bm=bm)\n"
                            "    return pl.pallas_call(\n        k,")
    findings = analyze_source(source, "k.py").findings
    assert len(findings) == 2, [f.message for f in findings]
    for f in findings:
        assert not f.fixable
        assert "a lambda bound before the call" in (f.refusal or "") and "functools.partial(_kernel, ...)" in f.refusal


SHARE = '''import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * 16, 16), :] = x_ref[pl.ds(i * 16, 16), :] / x_ref.shape[0]


def run(x):
    return pl.pallas_call(
        KERNEL,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 16,),
    )(x)
'''


def test_a_size_the_lift_adds_is_not_read_through_a_lambda_parameter_of_its_name():
    """redteam8: `lambda *x: _kernel(*x)` took the full row count as `x_rows=x.shape[0]` inside the
    lambda, where `x` is the tuple of refs: a safe-marked rewrite that failed where the original ran."""
    assert "_rows=x.shape[0]" in fix_source(SHARE.replace("KERNEL", "lambda *refs: _kernel(*refs)"), "k.py").source
    findings = analyze_source(SHARE.replace("KERNEL", "lambda *x: _kernel(*x)"), "k.py").findings
    assert len(findings) == 2, [f.message for f in findings]
    x_read = next(f for f in findings if "`x_ref`" in f.message)  # `o_ref` alone lifts: x_ref stays whole
    assert not x_read.fixable
    assert "names a parameter of the lambda" in (x_read.refusal or "") and "lambda *refs" in x_read.refusal, x_read.refusal
    assert "_rows=" not in fix_source(SHARE.replace("KERNEL", "lambda *x: _kernel(*x)"), "k.py", unsafe=True).source


@pytest.mark.parametrize("kernel", [
    "lambda *refs: _kernel(*refs[::-1], bm=bm)",    # refs reordered
    "lambda x_ref, o_ref: _kernel(o_ref, x_ref, bm=bm)",
    "lambda *refs: _kernel(*refs, bm=refs[0].shape[0])",  # a keyword read from a ref
])
def test_a_lambda_that_does_more_than_forward_is_not_read_as_the_kernel(kernel):
    findings = analyze_source(SOURCE.replace("KERNEL", kernel), "k.py").findings
    assert not any("a lambda that forwards every ref" in (f.refusal or "") for f in findings)


DECORATED = '''import functools

import jax
from jax.experimental import pallas as pl


DECORATOR
def _kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * 16, 16), :] = x_ref[pl.ds(i * 16, 16), :] * 2.0


def run(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 16,))(x)
'''


@pytest.mark.parametrize("decorator, pure", [
    ("@jax.named_call", True),
    ('@functools.partial(jax.named_call, name="k")', True),   # jax-llm-examples' ragged decode kernel
    ("@jax.named_scope('k')", True),
    ("@jax.jit", False),
    ('@functools.partial(jax.jit, static_argnames="n")', False),
])
def test_a_decorator_that_only_names_the_kernel_leaves_its_body_whole(decorator, pure):
    findings = analyze_source(DECORATED.replace("DECORATOR", decorator), "k.py").findings
    assert findings
    assert all(("is decorated with" not in (f.refusal or "")) == pure for f in findings), [f.refusal for f in findings]


LAMBDA_MODULE = '''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def scale_kernel(x_ref, o_ref, *, factor):
    o_ref[...] = x_ref[...] * factor


def run(x):
    return pl.pallas_call(lambda *refs: scale_kernel(*refs, factor=2.0),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)
'''


def test_a_traced_lambda_kernel_is_named_by_the_kernel_it_calls(tmp_path):
    # Verification tells which kernels an example reached by the traced kernels' names; a lambda
    # is `<lambda>` there, so a forwarded kernel's lift was never counted as reached (redteam8).
    import importlib.util

    import jax
    import jax.numpy as jnp

    from pallas_fix.verify.worker.kernel_survey import kernel_name

    path = tmp_path / "lambda_kernel.py"
    path.write_text(LAMBDA_MODULE)
    spec = importlib.util.spec_from_file_location("lambda_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jaxpr = jax.make_jaxpr(module.run)(jnp.ones((8, 128), jnp.float32))
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert kernel_name(eqn) == "scale_kernel"


def test_a_kernel_bound_in_a_tuple_unpacking_is_found_and_lifts():
    # maxtext's RWKV-7: `kernel, name = functools.partial(_fwd_kernel, chunk=chunk), "rwkv7_wkv_fwd"`
    # left the kernel unresolved (no finding at all), then its target read as another use.
    source = SOURCE.replace("    return pl.pallas_call(\n        KERNEL,",
                            "    kernel, label = functools.partial(_kernel, bm=bm), 'scale'\n"
                            "    return pl.pallas_call(\n        kernel,").replace("import jax\n", "import functools\n\nimport jax\n")
    findings = analyze_source(source, "k.py").findings
    assert len(findings) == 2 and all(f.fixable for f in findings), [(f.message, f.refusal) for f in findings]
    out = fix_source(source, "k.py").source
    assert "o_ref[...] = x_ref[...] * 2.0" in out, out
    # `a, b = b, a` swaps: neither name is one value to follow.
    swapped = source.replace("    kernel, label = functools.partial(_kernel, bm=bm), 'scale'\n",
                             "    kernel, label = functools.partial(_kernel, bm=bm), 'scale'\n    kernel, label = label, kernel\n")
    assert not any(f.fixable for f in analyze_source(swapped, "k.py").findings)
