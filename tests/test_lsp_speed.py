"""The fast tree indexes behind the language server's latency (pallas_fix/context.py) must give
exactly what LibCST's own (slow) machinery gives: children in the same order, the same parents,
the same import table, the same positions."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from pallas_fix.analysis.context import ModuleContext, child_nodes, positions, walk
from pallas_fix.core.names import ImportTable

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted(
    p
    for p in list((ROOT / "tests" / "fixtures").rglob("*.py")) + list((ROOT / "pallas_fix").glob("*.py"))
    if p.is_file()
)
# Constructs the fixtures may lack: decorators, async, walrus, match, f-strings, star-args, type
# annotations, lambdas with defaults, global/nonlocal, try/except*, with-items, comprehensions.
EXTRA = '''
import a.b as c, d
from .rel import x
from e import (f as g, h)
@dec(1)
@other
async def fn(p: int = 1, /, *args: "T", k=lambda q=2: q, **kw) -> dict[str, int]:
    global G
    async with ctx() as (u, v), other():
        if (w := await u) and not v:
            return {k: [i async for i in w if i] for k in "ab"}
    match p:
        case [1, *rest] | {"k": _} if rest:
            pass
        case Point(x=0):
            ...
    try:
        raise E from None
    except* (ValueError, TypeError) as eg:
        del eg
    finally:
        yield from f"{p!r:>{10}} {kw=}"
class K(Base, metaclass=M):
    x: int = 1; y = z = 2
    def m(self): nonlocal_ = self[1:2, ::3, ...]; return -x ** 2 if x else (y, *z)
'''


def _sources():
    for path in CORPUS:
        try:
            yield path.name, path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    yield "extra", EXTRA


def _parsed():
    out = []
    for name, text in _sources():
        try:
            out.append((name, text, cst.parse_module(text)))
        except cst.ParserSyntaxError:
            continue
    return out


PARSED = _parsed()


def test_corpus_is_not_empty():
    assert len(PARSED) > 20


@pytest.mark.parametrize("name,text,module", PARSED, ids=[p[0] for p in PARSED])
def test_indexes_match_libcst(name, text, module):
    ctx = ModuleContext(text)
    module = ctx.module
    count = 0
    for node in walk(module):
        count += 1
        assert child_nodes(node) == list(node.children), type(node).__name__
        assert ctx.kids(node) == list(node.children)
        for kid in ctx.kids(node):
            assert ctx.parents[kid] is node
    assert count == len(ctx._order) == len(ctx.parents) + 1
    slow = ImportTable(module)
    assert (ctx.imports.bindings, ctx.imports.modules) == (slow.bindings, slow.modules)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    fast = positions(module)
    assert set(fast) == set(expected)
    for node, rng in expected.items():
        assert fast[node] == ((rng.start.line, rng.start.column), (rng.end.line, rng.end.column)), type(node).__name__


def test_classes_with_conditional_visits_are_known():
    """A node class whose visit picks fields by value must be listed in CONDITIONAL_FIELDS (or
    only switch how one field is visited, as ImportFrom's `names` does)."""
    import ast
    import inspect
    import textwrap

    from pallas_fix.analysis.context import CONDITIONAL_FIELDS

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)

    same_field = {"ImportFrom", "LazyImportFrom"}
    for cls in set(subclasses(cst.CSTNode)):
        fn = cls.__dict__.get("_visit_and_replace_children")
        if fn is None:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        branches = [n for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp, ast.For, ast.While, ast.comprehension))]
        if branches:
            assert cls.__name__ in CONDITIONAL_FIELDS | same_field, cls.__name__


def test_walk_of_a_rewritten_tree_falls_back_to_libcst():
    ctx = ModuleContext("x = f(1)\ny = 2\n")
    new = ctx.module.visit(_Rename())
    assert [type(n).__name__ for n in walk(new)] == [type(n).__name__ for n in _slow_walk(new)]
    assert "zz" in new.code


class _Rename(cst.CSTTransformer):
    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value="zz") if updated_node.value == "f" else updated_node


def _slow_walk(node):
    yield node
    for kid in node.children:
        yield from _slow_walk(kid)
