"""The effects model (pallas_fix.analysis.effects.model) and the kernel-entry check: which refs a piece
of kernel code writes, through which call, and whether a kernel's body is all its pallas_call
runs. Each case is a small kernel read from source; nothing is traced or run."""

from __future__ import annotations

import textwrap

import pytest

from pallas_fix.analysis.effects.model import kernel_writes, loop_body_writes, write_words
from pallas_fix.analysis.discovery.kernel_entry import entry_problem
from pallas_fix.analysis.result import analyze

HEADER = """\
import functools
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
"""


def _analysis(body: str):
    return analyze(HEADER + textwrap.dedent(body))


def _site(analysis, kernel: str):
    return next(s for s in analysis.sites if s.kernel_name == kernel)


def _writes(body: str, kernel: str = "kernel") -> dict[str, set[str]]:
    """ref -> the ways the kernel writes it ("how: entry text")."""
    a = _analysis(body)
    out: dict[str, set[str]] = {}
    for w in kernel_writes(a, _site(a, kernel)):
        out.setdefault(w.ref, set()).add(f"{w.how}: {a.ctx.code(w.entry).strip()}")
    return out


def _call(kernel_def: str) -> str:
    return kernel_def + f"\n\ndef run(x):\n    return pl.pallas_call(kernel, out_shape=x)(x)\n"


def test_a_module_helper_writes_the_ref_it_is_given():
    src = _call("""
def _acc(ref, v):
    ref[...] += v

def kernel(x_ref, o_ref):
    _acc(o_ref, x_ref[...])
""")
    assert _writes(src) == {"o_ref": {"augassign: _acc(o_ref, x_ref[...])"}}


def test_a_closure_run_by_lax_cond_writes_what_it_closes_over():
    src = _call("""
def kernel(x_ref, o_ref):
    def add(v):
        o_ref[...] += v

    def skip(v):
        pass

    lax.cond(x_ref[0, 0] > 0, add, skip, x_ref[...])
""")
    assert _writes(src) == {"o_ref": {"augassign: lax.cond(x_ref[0, 0] > 0, add, skip, x_ref[...])"}}


def test_library_stores_and_copies_write_their_destination_only():
    src = _call("""
def kernel(x_ref, o_ref, t_ref, sem):
    pltpu.store(t_ref, x_ref[...])
    pltpu.sync_copy(x_ref, o_ref)
    unused = pltpu.make_async_copy(x_ref, t_ref, sem)
""")
    assert _writes(src) == {
        "t_ref": {"store: pltpu.store(t_ref, x_ref[...])"},
        "o_ref": {"copy: pltpu.sync_copy(x_ref, o_ref)"},
    }


def test_a_dma_descriptor_writes_when_it_is_started():
    src = _call("""
def kernel(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
""")
    assert _writes(src) == {"o_ref": {"copy: copy.start()"}, "sem": {"copy: copy.start()"}}


def test_views_tuples_and_partials_reach_the_ref_behind_them():
    src = _call("""
def _fill(dst):
    dst[...] = jnp.zeros(dst.shape, dst.dtype)

def kernel(x_ref, a_ref, b_ref, c_ref):
    for r in (a_ref, b_ref):
        r[...] = x_ref[...]
    functools.partial(_fill, c_ref.at[0])()
""")
    a = _analysis(src)
    writes = kernel_writes(a, _site(a, "kernel"))
    assert {w.ref for w in writes} == {"a_ref", "b_ref", "c_ref"}
    view = next(w for w in writes if w.ref == "c_ref").view
    assert view is not None and a.ctx.code(view) == "c_ref.at[0]"


def test_a_callback_the_model_cannot_see_may_write_the_refs_it_gets():
    src = """
def build(x, cb):
    def kernel(x_ref, o_ref):
        cb(o_ref)
        y = x_ref[...]
        cb(y)
        jnp.zeros_like(o_ref)

    return pl.pallas_call(kernel, out_shape=x)(x)
"""
    a = _analysis(src)
    writes = kernel_writes(a, _site(a, "kernel"))
    assert [(w.ref, w.how, a.ctx.code(w.entry)) for w in writes] == [("o_ref", "unknown", "cb(o_ref)")]
    assert "cannot see into" in write_words(a.ctx, writes[0])


def test_decorated_and_uncalled_defs():
    src = _call("""
def kernel(x_ref, o_ref, t_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = x_ref[...]

    def never_called():
        t_ref[...] = x_ref[...]
""")
    assert set(_writes(src)) == {"o_ref"}


def test_ref_methods_and_recursion():
    src = _call("""
def _down(ref, n):
    if n:
        _down(ref, n - 1)
    ref.bitcast(jnp.int32)[...] = 0

def kernel(x_ref, o_ref, t_ref):
    t_ref.set(x_ref.get())
    _down(o_ref, 3)
""")
    assert set(_writes(src)) == {"o_ref", "t_ref"}


def test_loop_body_writes_bind_the_body_like_the_loop_does():
    src = _call("""
def _put(ref, v):
    ref[...] = v

def kernel(x_ref, o_ref, s_ref):
    def body(i, carry):
        o_ref[pl.ds(i * 8, 8)] = x_ref[pl.ds(i * 8, 8)]
        _put(s_ref, x_ref[pl.ds(i * 8, 8)])
        return carry

    lax.fori_loop(0, 4, body, None)
""")
    a = _analysis(src)
    site = _site(a, "kernel")
    loop = next(iter(a.detection.loops.values()))
    assert sorted((w.ref, len(w.path)) for w in loop_body_writes(a, site, loop)) == [("o_ref", 0), ("s_ref", 1)]


@pytest.mark.parametrize(
    "source, problem",
    [
        ("@functools.wraps(print)\ndef kernel(x_ref, o_ref):\n    pass\n", None),
        ("def deco(f):\n    return f\n\n@deco\ndef kernel(x_ref, o_ref):\n    pass\n", "decorated with `@deco`"),
        ("def kernel(x_ref, o_ref):\n    pass\n\ndef other(x_ref, o_ref):\n    kernel(x_ref, o_ref)\n", "also called"),
        ("def kernel(x_ref, o_ref):\n    pass\n\nk = functools.partial(kernel)\nKERNELS = [k]\n", "also called"),
        ("def kernel(x_ref, o_ref):\n    pass\n\ndef other(kernel):\n    return kernel\n", None),
    ],
)
def test_kernel_entry(source, problem):
    a = _analysis(source + "\ndef run(x):\n    return pl.pallas_call(kernel, out_shape=x)(x)\n")
    found = entry_problem(a, _site(a, "kernel"))
    assert (found is None) if problem is None else (problem in found), found


def test_the_decorator_form_is_its_own_pallas_call():
    a = _analysis("""
@functools.partial(pl.pallas_call, out_shape=None)
def kernel(x_ref, o_ref):
    pass

def run(x):
    return kernel(x)
""")
    assert entry_problem(a, _site(a, "kernel")) is None
