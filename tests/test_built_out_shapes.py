"""Out_shapes that code builds (issue 28): a builder def's returned list read by substitution in
the call's names, generators over a literal tuple of arrays, `+` of parts, `[s] * n`
(pallas_fix.rewrite.callsite.spelling.built_structs / returned_structs), and the refusals for a
builder pallas-fix cannot read line by line. The golden pairs (interpreters and jaxpr checks, run
by test_codemod_pairs) are program_id_blocks/pid_out_shape_builder, pid_out_shape_generator and
pid_out_shape_repeated."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.engine import analyze_source
from pallas_fix.rewrite.callsite.spelling.built_structs import read_structs
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError

_HEAD = "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n\nCHUNK = 4\n\n"


def _read(src: str) -> list[str]:
    """The structs `read_structs` gives for the value of `out = ...` in `wrapper`, as text."""
    ctx = ModuleContext(_HEAD + src)
    assign = next(n for n in ctx.nodes_of(cst.Assign) if isinstance(n.targets[0].target, cst.Name) and n.targets[0].target.value == "out")
    found = read_structs(ctx, assign.value, assign)
    return None if found is None else [ctx.code(s) for s in found[0]] + (["one"] if found[1] else [])


def test_a_builder_is_read_in_the_names_of_the_call():
    src = ("def _outs(r, dt):\n    B, N, T = r.shape\n    n = T // CHUNK\n    return [jax.ShapeDtypeStruct((B, N, T), r.dtype), "
           "jax.ShapeDtypeStruct((B, n + 1, N), dt)]\n\n\ndef wrapper(x):\n    out = _outs(x, dt=jnp.float32)\n")
    assert _read(src) == ["jax.ShapeDtypeStruct((x.shape[0], x.shape[1], x.shape[2]), x.dtype)",
                          "jax.ShapeDtypeStruct((x.shape[0], (x.shape[2] // CHUNK) + 1, x.shape[1]), jnp.float32)"]


def test_a_builder_returning_one_struct_or_a_generator_is_read():
    one = "def _out(r):\n    return jax.ShapeDtypeStruct(r.shape, r.dtype)\n\n\ndef wrapper(x):\n    out = _out(x)\n"
    assert _read(one) == ["jax.ShapeDtypeStruct(x.shape, x.dtype)", "one"]  # one struct, not a list of one
    gen = "def _outs(a, b):\n    return [jax.ShapeDtypeStruct(t.shape, t.dtype) for t in (a, b)]\n\n\ndef wrapper(x, y):\n    out = _outs(y, x)\n"
    assert _read(gen) == ["jax.ShapeDtypeStruct(y.shape, y.dtype)", "jax.ShapeDtypeStruct(x.shape, x.dtype)"]


@pytest.mark.parametrize("value, want", [
    ("tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, y))", ["x", "y"]),
    ("[jax.ShapeDtypeStruct(a.shape, jnp.float32) for a in (x, y)] + [jax.ShapeDtypeStruct((8,), x.dtype)]", ["x", "y", "(8,)"]),
    ("(jax.ShapeDtypeStruct(x.shape, x.dtype),) * 3", ["x", "x", "x"]),
    ("2 * [jax.ShapeDtypeStruct(y.shape, y.dtype)]", ["y", "y"]),
])
def test_generators_sums_and_repeats_give_one_struct_per_item(value, want):
    found = _read(f"def wrapper(x, y):\n    out = {value}\n")
    assert found is not None and [s.split("(", 1)[1].split(".shape")[0].split(", ")[0] if ".shape" in s else "(8,)" for s in found] == want, found


@pytest.mark.parametrize("value", [
    "tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)",  # a parameter: its length is unknown
    "[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, y) if a.ndim == 2]",
    "[jax.ShapeDtypeStruct(x.shape, x.dtype)] * n",
    "[jax.ShapeDtypeStruct(x.shape, x.dtype), None]",  # a literal: the caller's own reading
    "helper_from_elsewhere(x)",
    "jax.ShapeDtypeStruct(x.shape, x.dtype)",  # one struct written out: the caller's own reading
])
def test_forms_not_read_are_left_to_the_caller(value):
    assert _read(f"from other import helper_from_elsewhere\n\n\ndef wrapper(x, y, arrays, n):\n    out = {value}\n") is None


_KERNEL = '''
def _kernel(x_ref, y_ref, s_ref):
    b = pl.program_id(0)
    rows = x_ref[b, :, :]
    y_ref[b, :, :] = rows * 2.0
    s_ref[b, :, :] = rows[: s_ref.shape[1]]


def run(x):
    return pl.pallas_call(_kernel, grid=(x.shape[0],), out_shape=_outs(x))(x)
'''


def _refusals(builder: str) -> set:
    src = _HEAD + builder + _KERNEL
    return {f.refusal for f in analyze_source(src, "k.py").findings if not f.fixable}


_TAIL = ("; pallas-fix reads such a function only when it is plain assignments and one `return` of the list: write the "
         "list of `jax.ShapeDtypeStruct`s at the call (sizes named there) to get this fix")
_WHAT = "the out_shape `_outs(x)` is built by `_outs`, "


@pytest.mark.parametrize("builder, why", [
    ("def _outs(r):\n    B, T, D = r.shape\n    if T > 8:\n        T = 8\n    return [jax.ShapeDtypeStruct((B, T, D), r.dtype)] * 2\n",
     "whose body has a branch (`if`) (line 9)"),
    ("def _outs(r):\n    out = []\n    for _ in range(2):\n        out.append(jax.ShapeDtypeStruct(r.shape, r.dtype))\n    return out\n",
     "whose body has a loop (`for`) (line 9)"),
    ("def _outs(r):\n    r = r[:, :4]\n    return [jax.ShapeDtypeStruct(r.shape, r.dtype)] * 2\n",
     "which rebinds its parameter `r` (line 8)"),
    ("def _outs(r, rows=CHUNK):\n    B, T, D = r.shape\n    return [jax.ShapeDtypeStruct(r.shape, r.dtype), jax.ShapeDtypeStruct((B, rows, D), r.dtype)]\n",
     "and the call leaves `rows` to its default, evaluated where the def stands; pass it (line 19)"),
    ("def _outs(r):\n    return [jax.ShapeDtypeStruct(r.shape, r.dtype)] * 2\n\n\n_outs = jax.jit(_outs)\n",
     "and `_outs` is bound more than once (or named by `global`), so the call may run another function (line 7)"),
    ("def _outs(r):\n    return [jax.ShapeDtypeStruct(r.shape, r.dtype)] * 2\n    return None\n",
     "which has code after its `return` (line 9)"),
])
def test_a_builder_that_is_not_straight_line_is_refused_saying_what_to_write(builder, why):
    assert _refusals(builder) == {_WHAT + why + _TAIL}


def test_a_builder_reading_a_name_the_call_shadows_is_refused():
    builder = "def _outs(r):\n    return [jax.ShapeDtypeStruct((r.shape[0], CHUNK, r.shape[2]), r.dtype)] * 2\n"
    src = _HEAD + builder + _KERNEL.replace("def run(x):\n", "def run(x):\n    CHUNK = 2\n")
    told = {f.refusal for f in analyze_source(src, "k.py").findings if not f.fixable}
    assert told == {_WHAT + "which reads `CHUNK`, a name that means something else at the call (line 19)" + _TAIL}, told


def test_a_builder_that_returns_something_else_is_refused():
    src = _HEAD + "def _outs(r):\n    return make(r)\n" + _KERNEL
    told = {f.refusal for f in analyze_source(src, "k.py").findings if not f.fixable}
    assert told == {"the out_shape `_outs(x)` returns `make(x)`, which pallas-fix does not read as a list of "
                    "`jax.ShapeDtypeStruct`s; write the list at the call (sizes named there) to get this fix"}, told


def test_the_builder_error_is_a_call_site_error():
    ctx = ModuleContext(_HEAD + "def _outs(r):\n    r = r.T\n    return [jax.ShapeDtypeStruct(r.shape, r.dtype)]\n\n\nout = _outs(1)\n")
    assign = ctx.nodes_of(cst.Assign)[-1]
    with pytest.raises(CallSiteError, match="rebinds its parameter `r`"):
        read_structs(ctx, assign.value, assign)


def test_an_argument_rebound_between_the_builder_call_and_the_pallas_call_is_refused():
    """`shapes = _outs(x); x = x[:, ::2]`: the sizes read `x` as the builder got it, and written at
    the pallas_call `x.shape[1]` would be the halved array's."""
    builder = "def _outs(r):\n    B, T, D = r.shape\n    return [jax.ShapeDtypeStruct((B, T, D), r.dtype), jax.ShapeDtypeStruct((B, T // CHUNK, D), r.dtype)]\n"
    kernel = _KERNEL.replace("    return pl.pallas_call(_kernel, grid=(x.shape[0],), out_shape=_outs(x))(x)\n",
                             "    shapes = _outs(x)\n    x = x[:, ::2]\n    return pl.pallas_call(_kernel, grid=(x.shape[0],), out_shape=shapes)(x)\n")
    findings = analyze_source(_HEAD + builder + kernel, "k.py").findings
    assert {f.refusal for f in findings if not f.fixable} == {
        "`x` in out_shape (line 19) is rebound at line 20 before the pallas_call (line 21): written there, it would not be the "
        "size the kernel gets; build out_shape next to the pallas_call, or give the new value another name"}
    assert sum(f.fixable for f in findings) == 1  # the input's window: its block is read at the call
