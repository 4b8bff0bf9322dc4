"""in_specs written as a head and a whole-array tail sized by the operand list
(rewrite.callsite.spelling.sized_tails, rewrite.callsite.conditional_specs): which spellings are
read, which are left to the refusal that names them, and the text a lift writes. No interpreter
runs: the golden pairs pid_sized_tail_* run these rewrites through the interpreters."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.engine import analyze_source, fix_source
from pallas_fix.rewrite.callsite.spelling.sized_tails import read_sized_tail, sized_tail_text

_HEAD = "from jax.experimental import pallas as pl\n"


def _read(expr: str):
    ctx = ModuleContext(_HEAD + f"specs = {expr}\n")
    value = ctx.module.body[-1].body[0].value
    return read_sized_tail(ctx, value, value)


@pytest.mark.parametrize("expr, length, name, drop", [
    ("[a] * 3 + [pl.no_block_spec] * (len(ops) - 3)", 3, "ops", 3),
    ("[a, b] + [c] * 2 + [pl.BlockSpec()] * (len(ops) - 4)", 4, "ops", 4),
    ("2 * [a] + [pl.no_block_spec] * len(ops)", 2, "ops", 0),
    ("[pl.BlockSpec()] * len(ops)", 0, "ops", 0),
])
def test_reads_head_and_sized_tail(expr, length, name, drop):
    tail = _read(expr)
    assert tail is not None
    assert (tail.length, tail.name, tail.drop) == (length, name, drop)


@pytest.mark.parametrize("expr", [
    "[a] * 3 + [b] * (len(ops) - 3)",  # b may move its block: not the whole array on every grid
    "[a] * n + [pl.no_block_spec] * (len(ops) - 3)",  # a head whose length is not written
    "[a] + [pl.no_block_spec] * (len(ops) - k)",  # a count that is not a literal offset
    "[a] + [pl.no_block_spec] * len(ops[1:])",
    "[a] + [pl.BlockSpec(memory_space=pl.ANY)] * (len(ops) - 1)",
    "[a] + [pl.no_block_spec]",
])
def test_leaves_other_spellings(expr):
    assert _read(expr) is None


@pytest.mark.parametrize("expr, codes, offset, text", [
    # a blocked head entry: only its part is written out
    ("[a] * 3 + [pl.no_block_spec] * (len(ops) - 3)", {1: "NEW"}, 0, "[a, NEW, a] + [pl.no_block_spec] * (len(ops) - 3)"),
    # a blocked fixed operand the tail covered: an entry of its own, the tail starting after it
    ("[a] * 3 + [pl.no_block_spec] * (len(ops) - 3)", {4: "NEW"}, 0,
     "[a] * 3 + [pl.no_block_spec, NEW] + [pl.no_block_spec] * (len(ops) - 5)"),
    # operands passed before `*ops` count in the head but not in `len(ops)`
    ("[a] + [pl.BlockSpec()] * len(ops)", {1: "NEW"}, 1, "[a] + [NEW] + [pl.BlockSpec()] * (len(ops) - 1)"),
])
def test_writes_new_specs_in_their_entries(expr, codes, offset, text):
    assert sized_tail_text(_read(expr), codes, offset) == text


_KERNEL = '''
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BN = 64


def kernel(x_ref, w_ref, *rest, has_gate):
    if has_gate:
        g_ref, o_ref = rest
    else:
        (o_ref,) = rest
    cols = pl.ds(pl.program_id(0) * BN, BN)
    y = x_ref[...] + w_ref[:, cols]
    if has_gate:
        y = y * g_ref[...]
    o_ref[:, cols] = y


def run(x, w, g=None):
    {build}
    return pl.pallas_call(
        functools.partial(kernel, has_gate=g is not None),
        grid=(w.shape[1] // BN,),
        in_specs={specs},
        out_specs=pl.no_block_spec,
        out_shape=jax.ShapeDtypeStruct(w.shape, jnp.float32),
    )(*operands)
'''

_OPERANDS = "operands = [x, w] + ([] if g is None else [g])"


def _w_refusal(build: str, specs: str) -> str:
    src = textwrap.dedent(_KERNEL).replace("{build}", build).replace("{specs}", specs)
    refusals = [f.refusal for f in analyze_source(src, "k.py").findings if "`w_ref`" in f.message]
    assert refusals, "no finding on w_ref"
    return refusals[0] or ""


def _fixed(build: str, specs: str) -> str:
    src = textwrap.dedent(_KERNEL).replace("{build}", build).replace("{specs}", specs)
    result = fix_source(src, "k.py", unsafe=True)
    assert result.error is None, result.error
    return result.source


def test_fixed_operand_in_the_tail_lifts():
    out = _fixed(_OPERANDS, "[pl.BlockSpec()] + [pl.BlockSpec()] * (len(operands) - 1)")
    cst.parse_module(out)
    assert "[pl.BlockSpec()] + [pl.BlockSpec((w.shape[0], BN), lambda i: (0, i))] + [pl.BlockSpec()] * (len(operands) - 2)" in " ".join(out.split())
    assert "w_ref[...]" in out


@pytest.mark.parametrize("build, specs, why", [
    (_OPERANDS, "[pl.no_block_spec] * 2 + [pl.no_block_spec] * (len(operands) - 1)", "in_specs is not built so"),  # counts disagree
    (_OPERANDS, "[pl.no_block_spec] * 3 + [pl.no_block_spec] * (len(operands) - 3)", "in_specs is not built so"),  # head past `if`
    # `len(operands)` read before the optional operand is appended: the tail would be one entry short
    ("operands = [x, w]\n    in_specs = [pl.no_block_spec] + [pl.no_block_spec] * (len(operands) - 1)\n"
     "    if g is not None:\n        operands.append(g)", "in_specs", "inputs cannot be matched to refs"),
])
def test_spellings_that_do_not_fit_the_operands_are_refused(build, specs, why):
    assert why in _w_refusal(build, specs)
    src = textwrap.dedent(_KERNEL).replace("{build}", build).replace("{specs}", specs)
    assert _fixed(build, specs) == src


@pytest.mark.parametrize("build, written", [
    (_OPERANDS, "([] if g is None else [pl.BlockSpec((g.shape[0], BN), lambda i: (0, i))])"),
    ("operands = [x, w]\n    if g is not None:\n        operands.append(g)",
     "([pl.BlockSpec((g.shape[0], BN), lambda i: (0, i))] if g is not None else [])"),
    ("operands = [x, w] + ([g] if g is not None else [])",
     "([pl.BlockSpec((g.shape[0], BN), lambda i: (0, i))] if g is not None else [])"),
])
def test_blocked_optional_operand_gets_its_spec_where_it_is_chosen(build, written):
    src = textwrap.dedent(_KERNEL).replace("g_ref[...]", "g_ref[:, cols]").replace("{build}", build)
    src = src.replace("{specs}", "[pl.no_block_spec] * 2 + [pl.no_block_spec] * (len(operands) - 2)")
    result = fix_source(src, "k.py", unsafe=True)
    assert result.error is None, result.error
    flat = " ".join(result.source.split())
    assert written in flat, result.source
    assert "len(operands)" not in flat  # every entry written: the specs follow the operands by construction
    assert "g_ref[...]" in result.source


def test_optional_operands_chosen_with_shared_items_are_refused():
    src = textwrap.dedent(_KERNEL).replace("g_ref[...]", "g_ref[:, cols]").replace(
        "{build}", "operands = (x, w, g) if g is not None else (x, w)").replace(
        "{specs}", "[pl.no_block_spec] * 2 + [pl.no_block_spec] * (len(operands) - 2)")
    refusals = [f.refusal for f in analyze_source(src, "k.py").findings if "`g_ref`" in f.message]
    assert any("pallas-fix can mirror" in (r or "") for r in refusals), refusals
