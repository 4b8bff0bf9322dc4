"""The scope analysis of one top-level statement (other defs and classes stubbed) answers as the
whole module's does, for every name in that statement (a def elsewhere is known by its name)."""

from pathlib import Path

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.rewrite.text import libcst_scopes as C

FIXTURES = Path(__file__).parent / "fixtures"

GLOBALS = '''
import jax
from jax.experimental import pallas as pl

OFFSET = 3


def set_offset(value):
    global OFFSET
    OFFSET = value


class Config:
    OFFSET = 7

    def offset(self):
        return OFFSET


def kernel(x_ref, o_ref):
    n = x_ref.shape[0]
    for i in range(n):
        o_ref[i] = x_ref[i] + OFFSET + len(x_ref)
    jax = None
    return Config, set_offset, jax


def helper(jax):
    return jax
'''


def _answer(ctx: ModuleContext, found, node: cst.Name):
    scope = found.get(node)
    if scope is None:
        return None
    out = []
    for a in scope[node.value]:
        where = getattr(a, "node", None)
        if isinstance(where, (cst.FunctionDef, cst.ClassDef)):
            # A stub stands for the other statements' defs: callers only ask whether a binding
            # is a plain assignment, a parameter or a loop variable, and a def is none of them.
            shown = f"def {where.name.value}"
        else:
            shown = ctx.code(where) if where is not None and ctx.parent(where) is not None else None
        out.append((type(a).__name__, type(a.scope).__name__, shown))
    return sorted(out, key=repr)


def _agree(source: str) -> int:
    ctx = ModuleContext(source)
    full = C._resolve(ctx.module)
    checked = 0
    for stmt in ctx.module.body:
        if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        reduced = C._resolve(C._module_around(ctx, frozenset({id(stmt)})))
        for node in ctx.nodes_of(cst.Name):
            if ctx._within(node, stmt):
                assert _answer(ctx, reduced, node) == _answer(ctx, full, node), ctx.code(node)
                checked += 1
    return checked


def test_a_global_declared_in_another_function_still_counts():
    assert _agree(GLOBALS) > 20


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("codemods/*/*_before.py"))[::7], ids=lambda p: p.name)
def test_fixture_scopes_agree(path):
    assert _agree(path.read_text(encoding="utf-8")) > 0


def test_a_second_statement_is_kept_too_and_many_switch_to_the_whole_module():
    ctx = ModuleContext(GLOBALS)
    defs = [s for s in ctx.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))]
    kernel, helper = (s for s in defs if s.name.value in ("kernel", "helper"))
    first = C.scopes_for(ctx, kernel.body)
    assert C.scopes_for(ctx, kernel.body) is first
    both = C.scopes_for(ctx, helper.body)
    assert both is not first and C.scopes_for(ctx, kernel.body) is both  # one analysis answers for both
    full = C._resolve(ctx.module)
    for node in ctx.nodes_of(cst.Name):
        if ctx._within(node, kernel) or ctx._within(node, helper):
            assert _answer(ctx, both, node) == _answer(ctx, full, node), ctx.code(node)
    for stmt in defs:
        C.scopes_for(ctx, stmt.body)
    assert C._SCOPES[ctx].full  # past PARTIAL_ROUNDS statements, the whole module once


def test_simple_statements_elsewhere_keep_only_the_names_the_statement_reads():
    ctx = ModuleContext(GLOBALS + "\nUNUSED = OFFSET * 2\nprint(UNUSED)\n")
    kernel = next(s for s in ctx.module.body if isinstance(s, cst.FunctionDef) and s.name.value == "kernel")
    code = ctx.module.with_changes(body=C._module_around(ctx, frozenset({id(kernel)})).body).code
    assert "UNUSED" not in code and "print" not in code and "OFFSET = None" in code, code
