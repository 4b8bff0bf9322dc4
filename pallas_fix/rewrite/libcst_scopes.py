"""LibCST's scope analysis of an analysed tree, computed lazily and, where it can be, only for
the top-level statement a planner asks about."""

from __future__ import annotations

import weakref
from typing import Mapping, Optional

import libcst as cst
from libcst.metadata import MetadataWrapper, Scope, ScopeProvider

from pallas_fix.analysis.context import ModuleContext


class _Scopes:
    """LibCST's scope analysis of the analysed tree (same node identities), computed only for
    modules where a planner has something to look at, and first only for the top-level statement
    it looks at: most files have one kernel statement among much other code.

    That first analysis runs on the module with every other top-level def and class reduced to a
    stub binding the same name. The scopes of the statement's nodes come out as over the whole
    module: a def or class body binds nothing outside itself unless it declares `global`, and
    those are kept whole. A question about any other statement computes the whole module's
    analysis, which then answers everything (two analyses never mix in one answer)."""

    def __init__(self) -> None:
        self.first: Optional[cst.CSTNode] = None
        self.first_scopes: Optional[Mapping[cst.CSTNode, Scope]] = None
        self.full: Optional[Mapping[cst.CSTNode, Scope]] = None

    def covering(self, ctx: ModuleContext, *nodes: cst.CSTNode) -> Mapping[cst.CSTNode, Scope]:
        """One analysis that answers for all of `nodes`."""
        tops = [_top_statement(ctx, n) for n in nodes]
        top = tops[0]
        if self.full is None and all(t is top for t in tops):
            if top is not None and self.first is None:
                self.first, self.first_scopes = top, _resolve(_module_around(ctx, top))
            if top is not None and top is self.first:
                return self.first_scopes  # type: ignore[return-value]
        if self.full is None:
            self.full = _resolve(ctx.module)
        return self.full


_SCOPES: "weakref.WeakKeyDictionary[ModuleContext, _Scopes]" = weakref.WeakKeyDictionary()


def _resolve(module: cst.Module) -> Mapping[cst.CSTNode, Scope]:
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)  # type: ignore[return-value]


def _module_around(ctx: ModuleContext, statement: cst.CSTNode) -> cst.Module:
    declares_global = [ctx.statement_of(node) for node in ctx.nodes_of(cst.Global)]
    kept = lambda stmt: stmt is statement or any(g is not None and ctx._within(g, stmt) for g in declares_global)  # noqa: E731
    return ctx.module.with_changes(body=[stmt if kept(stmt) else _stub(stmt) for stmt in ctx.module.body])


def _stub(stmt: cst.CSTNode) -> cst.CSTNode:
    suite = cst.SimpleStatementSuite([cst.Pass()])
    if isinstance(stmt, cst.FunctionDef):
        return cst.FunctionDef(name=cst.Name(stmt.name.value), params=cst.Parameters(), body=suite)
    if isinstance(stmt, cst.ClassDef):
        return cst.ClassDef(name=cst.Name(stmt.name.value), body=suite)
    return stmt


def _top_statement(ctx: ModuleContext, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    top = None
    for anc in ctx.ancestors(node):
        if anc is ctx.module:
            return top
        top = anc
    return None


def scopes_for(ctx: ModuleContext, *nodes: cst.CSTNode) -> Mapping[cst.CSTNode, Scope]:
    """node -> Scope, from one analysis that answers for every node given."""
    state = _SCOPES.get(ctx)
    if state is None:
        state = _SCOPES[ctx] = _Scopes()
    return state.covering(ctx, *nodes)


def scope_at(ctx: ModuleContext, node: cst.CSTNode) -> Optional[Scope]:
    return scopes_for(ctx, node).get(node)


_FOR_TARGETS: "weakref.WeakKeyDictionary[ModuleContext, frozenset[str]]" = weakref.WeakKeyDictionary()


def for_target_names(ctx: ModuleContext) -> frozenset[str]:
    """Names some `for NAME in ...` of the module binds: a name outside it cannot be a loop
    variable, which settles the question without LibCST's (whole-module) scope analysis."""
    found = _FOR_TARGETS.get(ctx)
    if found is None:
        found = _FOR_TARGETS[ctx] = frozenset(
            loop.target.value for loop in ctx.nodes_of(cst.For) if isinstance(loop.target, cst.Name)  # type: ignore[attr-defined]
        )
    return found
