"""A name a wrapper assigns more than once in straight-line code (analysis.discovery.reaching):
each pallas_call runs the kernel its `kernel` name holds there, and a stored call is invoked
where its own binding of the name is read (jax's Triton norm backwards reuse `kernel` and
`method` for two pallas_calls)."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.discovery.reaching import reaching_value
from pallas_fix.engine import analyze_source

_TWO_CALLS = """\
import functools
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def first_kernel(x_ref, o_ref, *, bs):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bs, bs)] = x_ref[pl.ds(i * bs, bs)] + 1.0


def second_kernel(x_ref, o_ref, *, bs):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bs, bs)] = x_ref[pl.ds(i * bs, bs)] * 2.0


def run(x, y):
    kernel = functools.partial(first_kernel, bs=16)
    method = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 16,),
                            compiler_params=pltriton.CompilerParams())
    method = jax.vmap(method)
    a = method(x)
    kernel = functools.partial(second_kernel, bs=16)
    method = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype), grid=(y.shape[0] // 16,),
                            compiler_params=pltriton.CompilerParams())
    assert y.ndim == 1
    b = method(y)
    return a, b
"""


def test_each_pallas_call_runs_the_kernel_its_name_holds_there() -> None:
    result = analyze_source(_TWO_CALLS, "two.py")
    kernels = sorted(s.kernel.name.value for s in result.sites)
    assert kernels == ["first_kernel", "second_kernel"]
    second = next(s for s in result.sites if s.kernel.name.value == "second_kernel")
    assert second.invocation is not None and result.ctx.code(second.invocation.args[0].value) == "y"
    first = next(s for s in result.sites if s.kernel.name.value == "first_kernel")
    assert first.invocation is None  # `method(x)` runs the vmapped call, not this pallas_call
    assert {f.code for f in result.findings} == {"PF103"}


def test_the_other_pallas_call_is_no_outside_use_of_the_kernel() -> None:
    """The first pallas_call reads `kernel` too, but there it holds `first_kernel`: the second
    kernel's windows are fixable (the first's stay refused: its call is vmapped)."""
    result = analyze_source(_TWO_CALLS, "two.py")
    second = [f for f in result.findings if f.span.line == 15]
    assert second and all(f.fixable for f in second), [f.refusal for f in second]


@pytest.mark.parametrize(
    "body, expected",
    [
        ("k = 1\n    k = 2\n    use(k)\n", "2"),
        ("k = 1\n    use(k)\n    k = 2\n", "1"),
        ("k = 1\n    if c:\n        k = 2\n    use(k)\n", None),  # which one ran is not fixed
        ("k = 1\n    k = 2\n    for k in xs:\n        pass\n    use(k)\n", None),  # a loop rebinds it
        ("k = 1\n    k = 2\n    k += 1\n    use(k)\n", None),
        ("k = 1\n    use(k)\n", None),  # one assignment: resolve_value answers that
        ("use(k)\n    k = 1\n    k = 2\n", None),
        ("k = 1; k = 2\n    use(k)\n", "2"),  # the last in source order, not the first of its line
        ("k = 1\n    k = 2; use(k)\n", None),  # the line's small statements: not placed here
    ],
)
def test_reaching_value(body: str, expected) -> None:
    ctx = ModuleContext(f"def f(c, xs):\n    {body}")
    module = ctx.module
    read = next(n for n in walk(module) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "use")
    found = reaching_value(ctx, read.args[0].value, read)
    assert (ctx.code(found) if found is not None else None) == expected


@pytest.mark.parametrize("binding", [
    "    from kernels_elsewhere import kernel\n",
    "    match functools.partial(first_kernel, bs=16):\n        case kernel:\n            pass\n",
])
def test_a_binding_no_assignment_spells_leaves_the_kernel_open(binding: str) -> None:
    """`from m import kernel` or `case kernel:` after `kernel = partial(second_kernel, ...)`: the
    second pallas_call runs that kernel, not second_kernel (red team: the rewrite of second_kernel
    was written at its call site, which ran another kernel)."""
    marker = "    method = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype)"
    source = _TWO_CALLS.replace(marker, binding + marker)
    result = analyze_source(source, "two.py")
    assert "second_kernel" not in [s.kernel.name.value for s in result.sites if s.kernel is not None]


@pytest.mark.parametrize("source", [
    "def f():\n    kernel = partial(a_kernel)\n    from m import kernel\n    use(kernel)\n",
    "kernel = partial(a_kernel)\ndef f(k):\n    match k:\n        case kernel:\n            pass\n    use(kernel)\n",
    "kernel = partial(a_kernel)\ndef f():\n    import kernel\n    use(kernel)\n",
])
def test_one_assignment_is_not_the_value_where_an_import_or_capture_binds_the_name(source: str) -> None:
    """Red team (pre-existing): `kernel = partial(mul_kernel, ...)` then `from kmod import kernel`
    and a pallas_call of `kernel`: mul_kernel was rewritten at a call that ran kmod's kernel."""
    ctx = ModuleContext(source)
    read = next(n for n in walk(ctx.module) if isinstance(n, cst.Call) and ctx.code(n.func) == "use")
    name = read.args[0].value
    assert ctx.resolve_value(name, read) is name


_STORED_TWICE = """\
import functools
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add_kernel(x_ref, o_ref, *, bn):
    i = pl.program_id(0)
    o_ref[pl.ds(i * bn, bn), :] = x_ref[pl.ds(i * bn, bn), :] + 1.0


def run(x, m):
    call = pl.pallas_call(functools.partial(add_kernel, bn=64), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(m // 64,), compiler_params=pltpu.CompilerParams())
    a = call(x)
    return USE
"""


@pytest.mark.parametrize("use", ["call(x[: x.shape[0] // 2])", "jax.vmap(call)(x[None])"])
def test_a_stored_call_used_twice_is_refused_naming_both(use: str) -> None:
    """Red team: `a = call(x)` then `call(y)` with a shorter `y`: the guard (`x.shape[0] >= (m // 64)
    * 64`) and the proofs saw `x` only, so the second call ran past the end of `y` unchecked."""
    result = analyze_source(_STORED_TWICE.replace("USE", use), "twice.py")
    refusals = {f.refusal for f in result.findings}
    assert refusals == {"the stored pallas_call `call` is also used at line 16 besides its call at line 15; its operands' "
                        "shapes are read from one call only: give each call its own pallas_call"}
