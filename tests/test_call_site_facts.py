"""Unit tests for call-site facts: grids built by code (rewrite.callsite.grid_shape), asserted equalities
as proof facts (analysis.loops.proofs), checks an example call breaks (rewrite.proofs.example_facts) and the
position reads that keep a ragged grid refused (rewrite.proofs.ragged_blocks). The golden pairs under
tests/fixtures/codemods/ (`pid_grid_*`, `pid_asserted_*`, `pid_ragged_*`, `grid_*_tuple`,
`shape_*`) test the same mechanisms end to end."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext, walk
from pallas_fix.analysis.loops.proofs import Facts, Prover, read_facts
from pallas_fix.analysis.loops.symbolic import Symbols
from pallas_fix.frontends.service import analyze_source
from pallas_fix.rewrite.callsite.grid_shape import GridShape, read_grid
from pallas_fix.rewrite.callsite.spelling.operands import CallSiteError
from pallas_fix.rewrite.proofs.ragged_blocks import position_read


def _wrapper(body: str):
    """The module and the last statement of `f` (where the grid is read)."""
    ctx = ModuleContext("from jax.experimental import pallas as pl\n" + textwrap.dedent(body))
    fn = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef) and n.name.value == "f")
    return ctx, ctx.body_statements(fn)[-1]


def _grid_text(body: str, rank: int | None = 2):
    ctx, last = _wrapper(body)
    grid = last.body[0].value  # `return GRID`
    return [ctx.code(e) for e in read_grid(ctx, grid, last, lambda _array: rank)]


@pytest.mark.parametrize(
    "body, entries",
    [
        ("def f(m, n):\n    return (m // 8,) + (n // 4,)\n", ["m // 8", "n // 4"]),
        ("def f(m, n):\n    g = [m // 8, n // 4]\n    return tuple(g)\n", ["m // 8", "n // 4"]),
        ("def f(n):\n    return (n // 8,) * 2\n", ["n // 8", "n // 8"]),
        ("def f(m, n):\n    return tuple(d // b for d, b in zip((m, n), (8, 4)))\n", ["m // 8", "n // 4"]),
        ("def f(m, n):\n    return tuple(d + 1 // 2 for d in (m - 1, n))\n", ["(m - 1) + 1 // 2", "n + 1 // 2"]),
        ("def f(x):\n    return tuple(map(pl.cdiv, x.shape, (8, 4, 2)))\n", ["pl.cdiv(x.shape[0], 8)", "pl.cdiv(x.shape[1], 4)"]),
        ("def f(x, k):\n    return (*(x.shape[0] // 8,), k)\n", ["x.shape[0] // 8", "k"]),
        ("def f(n):\n    return n // 8\n", ["n // 8"]),
    ],
)
def test_grid_built_by_code_reads_as_its_entries(body, entries):
    assert _grid_text(body) == entries


@pytest.mark.parametrize(
    "body",
    [
        "def f(x, blocks):\n    return tuple(d // b for d, b in zip(x.shape, blocks))\n",  # len(blocks) unknown
        "def f(x):\n    return tuple(d // 8 for d in x.shape)\n",  # rank unknown (below)
        "def f(m, n):\n    g = [m // 8]\n    g.append(n // 4)\n    return tuple(g)\n",  # mutated after it is built
        "def f(m, n):\n    return tuple(d // 8 for d in (m, n) if d > 8)\n",  # a filter: length depends on values
        "def f(m, n):\n    g = (m // 8, n)\n    n = 3\n    return tuple(g)\n",  # `n` changes before the call
    ],
)
def test_grid_of_unknown_length_is_refused(body):
    with pytest.raises(CallSiteError, match="static length"):
        _grid_text(body, rank=None)


def test_comprehension_over_a_shape_needs_its_rank():
    ctx, last = _wrapper("def f(x):\n    return tuple(d // 8 for d in x.shape)\n")
    shape = GridShape(ctx, last, lambda _array: 3).entries(last.body[0].value)
    assert [ctx.code(e) for e in shape] == ["x.shape[0] // 8", "x.shape[1] // 8", "x.shape[2] // 8"]


def _prover(body: str):
    ctx, last = _wrapper(body)
    fn = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef) and n.name.value == "f")
    symbols, facts = Symbols(ctx), Facts()
    read_facts(symbols, ctx.body_statements(fn)[:-1], last, facts)
    return Prover(symbols, facts), lambda text: symbols.poly(cst.parse_expression(text), last)


def test_asserted_equality_reaches_inside_quotients():
    """`assert bm == BM` makes `m // bm` the quotient `m // 16`: 16 of its steps fit in m."""
    prover, poly = _prover("BM = 16\ndef f(m, bm):\n    assert bm == BM\n    return 0\n")
    assert prover.nonneg(poly("m") - poly("BM * (m // bm)"))
    unasserted, poly2 = _prover("BM = 16\ndef f(m, bm):\n    return 0\n")
    assert not unasserted.nonneg(poly2("m") - poly2("BM * (m // bm)"))


def test_equal_shapes_are_equal_dims():
    prover, poly = _prover("def f(x, y):\n    assert x.shape == y.shape\n    return 0\n")
    assert prover.nonneg(poly("y.shape[1]") - poly("x.shape[1]"))
    assert prover.nonneg(poly("x.shape[0]") - poly("y.shape[0]"))


_ASSERTED = '''\
import jax
from jax.experimental import pallas as pl

# pallas-fix: example shift_rows(f32[64, 128], block_rows={example})

BLOCK_ROWS = 16


def shift_rows_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BLOCK_ROWS, BLOCK_ROWS), :] = x_ref[pl.ds(i * BLOCK_ROWS, BLOCK_ROWS), :] + 1.0


def shift_rows(x, block_rows=16):
    m, _ = x.shape
    assert block_rows == BLOCK_ROWS
    return pl.pallas_call(
        shift_rows_kernel,
        grid=(m // block_rows,),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
'''


def test_check_the_example_breaks_proves_nothing():
    """With `block_rows=8` the original raises on its own example: its assert cannot vouch for
    the blocks, and the refusal says so; with 16 the same assert proves them."""
    broken = analyze_source(_ASSERTED.format(example=8), "asserted.py").findings
    reasons = [f.refusal or "" for f in broken]
    assert reasons and all("`block_rows == BLOCK_ROWS` is 8 == 16 in the example" in r for r in reasons)
    held = analyze_source(_ASSERTED.format(example=16), "asserted.py").findings
    assert held and all(f.refusal is None for f in held)


@pytest.mark.parametrize(
    "kernel, line",
    [
        ("def k(x_ref, o_ref):\n    i = pl.program_id(0)\n    o_ref[pl.ds(i * 8, 8)] = x_ref[pl.ds(i * 8, 8)]\n", None),
        ("def k(x_ref, o_ref):\n    i, j = pl.program_id(0), pl.program_id(1)\n    rows = pl.ds(i * 8, 8)\n"
         "    x = x_ref.at[rows, pl.ds(j * 4, 4)][...]\n    o_ref[rows, pl.ds(j * 4, 4)] = x * 2\n", None),
        ("def k(x_ref, o_ref, *, n):\n    i = pl.program_id(0)\n    pos = i * 8 + jnp.arange(8)\n"
         "    o_ref[pl.ds(i * 8, 8)] = jnp.where(pos < n, x_ref[pl.ds(i * 8, 8)], 0.0)\n", 6),
        ("def k(x_ref, o_ref):\n    o_ref[pl.ds(pl.program_id(0) * 8, 8)] = x_ref[...] * pl.program_id(0)\n", 4),
    ],
)
def test_position_reads(kernel, line):
    ctx = ModuleContext("from jax.experimental import pallas as pl\nimport jax.numpy as jnp\n" + kernel)
    fn = next(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef))
    assert position_read(ctx, fn, {"x_ref", "o_ref"}) == line


_SQUEEZED_INPUT = """
import jax
from jax.experimental import pallas as pl


def k(x_ref, o_ref):
    j = pl.program_id(1)
    o_ref[pl.program_id(0), j, :] = x_ref[j, :] * 2.0


def f(x):
    return pl.pallas_call(
        k,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0], x.shape[1]),
        in_specs=[pl.BlockSpec((None, x.shape[1], x.shape[2]), lambda i, j: (i, 0, 0))],
    )(x)
"""


def test_an_output_shaped_like_an_input_takes_its_rank_with_its_squeezed_dims():
    # The input's spec squeezes dim 0, so the kernel indexes x_ref with two indices: the output
    # `ShapeDtypeStruct(x.shape, ...)` still has x's three dims (a whole spec written with two
    # zeros failed verification on the merged tree: linearnexus mamba).
    from pallas_fix.analysis.result import analyze
    from pallas_fix.rewrite.callsite.reading import CallSite

    analysis = analyze(_SQUEEZED_INPUT, "k.py")
    site = analysis.sites[0]
    cs = CallSite(analysis.ctx, site, analysis.detection.envs.get(site.kernel))
    assert cs.rank("x_ref") == 3
    assert cs.rank("o_ref") == 3
