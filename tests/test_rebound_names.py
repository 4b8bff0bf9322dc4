"""A name bound by a plain assignment and also by a loop target, a walrus, `with ... as`,
unpacking or a nested function's `nonlocal g` (`g = (n // BR,)`, then `for g in ...:`): a read
after both may see either value, so ModuleContext.resolve_value does not follow it to the
assignment. Before, a grid read so was
`(n // BR,)` while the pallas_call ran `(n // BR + 1,)`: the lift's proof that every block lies
inside the array held for the wrong grid, and the rewrite (a safe fix, written unverified) read
a block past the end (tpu-interpret: IndexError), where the original's slice was clamped."""

from __future__ import annotations

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.engine import analyze_source, fix_source

_PLAIN = '''
import jax
from jax.experimental import pallas as pl

BR = 16


def _rows_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BR, BR), :] = x_ref[pl.ds(i * BR, BR), :] * 2.0


def f(x):
    n, m = x.shape
    g = (n // BR,)
REBIND
    return pl.pallas_call(
        _rows_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=g,
        in_specs=[pl.BlockSpec((n, m), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((n, m), lambda i: (0, 0)),
    )(x)
'''

_REBINDS = {
    "for": "    for g in [(n // BR + 1,)]:\n        pass",
    "walrus": "    (g := (n // BR + 1,))",
    "with": "    with open('/dev/null') as g:\n        pass",
    "unpacking": "    g, h = (n // BR + 1,), 0",
    # a nested function that rebinds the wrapper's name when it runs
    "nonlocal": "\n    def grow():\n        nonlocal g\n        g = (n // BR + 1,)\n\n    grow()",
}


@pytest.mark.parametrize("how", sorted(_REBINDS))
def test_a_grid_rebound_other_than_by_assignment_is_not_read_as_its_assignment(how):
    src = _PLAIN.replace("REBIND", _REBINDS[how])
    findings = analyze_source(src, "k.py").findings
    assert findings and not any(f.fixable for f in findings), [(f.message, f.refusal) for f in findings]
    # `g, h = (...), 0` pairs each name with its value: a second assignment of `g`, so the grid is
    # read as the one binding that reaches the call, whose count the proof cannot follow to `n`.
    why = "cannot prove the blocks" if how == "unpacking" else "cannot read the grid `g`"
    assert all(why in f.refusal for f in findings), [f.refusal for f in findings]
    assert fix_source(src, "k.py", unsafe=True).source == src


def test_the_grid_assigned_once_still_lifts():
    src = _PLAIN.replace("REBIND\n", "")
    assert all(f.fixable for f in analyze_source(src, "k.py").findings)


def test_resolve_value_stops_at_the_scope_that_binds_the_name_by_a_loop():
    """`n` a module constant, and in `f` both assigned and a loop target: neither value is it."""
    src = "n = 4\n\ndef f(xs):\n    n = 8\n    for n in xs:\n        pass\n    return n\n\ndef g(xs):\n    for n in xs:\n        pass\n    return n\n"
    ctx = ModuleContext(src)
    module = ctx.module
    reads = [node.body.body[-1].body[0].value for node in module.body if isinstance(node, cst.FunctionDef)]
    for read in reads:
        assert ctx.resolve_value(read, read) is read


def test_a_class_body_in_the_wrapper_does_not_bind_the_grid_it_reads():
    """`class Cfg: GRID = (4,)` inside the wrapper binds `Cfg.GRID`; the pallas_call's `GRID` is
    the module's `(5,)`. Before, the class body's value was read as the wrapper's: the bounds were
    checked for 4 steps (an unsafe guard `n < 4 * BR`) while the call runs 5, the fifth block past
    the end. Now the guard checks the 5 steps the call runs."""
    src = _PLAIN.replace("g = (n // BR,)\nREBIND\n", "class Cfg:\n        GRID = (4,)\n").replace("grid=g,", "grid=GRID,")
    src = src.replace("BR = 16\n", "BR = 16\nGRID = (5,)\n")
    fixed = fix_source(src, "k.py", unsafe=True).source
    assert "if n < 5 * BR:" in fixed and "4 * BR" not in fixed, fixed


def test_a_module_name_a_function_rebinds_through_global_is_not_read_as_its_assignment():
    src = "N = 4\n\ndef grow():\n    global N\n    N = 8\n\ndef f():\n    return N\n"
    ctx = ModuleContext(src)
    read = ctx.module.body[-1].body.body[-1].body[0].value
    assert ctx.resolve_value(read, read) is read
