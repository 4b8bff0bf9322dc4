"""LibCST's scope analysis of an analysed tree, computed lazily and, where it can be, only for
the top-level statement a planner asks about."""

from __future__ import annotations

import weakref
from typing import Mapping, Optional

import libcst as cst
from libcst.metadata import MetadataWrapper, Scope, ScopeProvider

from pallas_fix.analysis.context import ModuleContext, walk


class _Scopes:
    """LibCST's scope analysis of the analysed tree (same node identities), computed only for
    modules where a planner has something to look at, and only for the top-level statements it
    looks at: most files have one kernel and its wrapper among much other code.

    The analysis runs on the module with every other top-level def and class reduced to a stub
    binding the same name, and every other simple statement to the names it binds (`a, b = None`);
    statements binding no name the kept ones mention are left out.
    The scopes of the kept statements' nodes come out as over the whole module: a def or class
    body binds nothing outside itself unless it declares `global`, and those are kept whole; an
    expression binds nothing unless it holds a walrus, and those are kept whole too. A question
    about a statement not yet kept analyses again with it kept as well (a few times, then the
    whole module once); every answer comes from one analysis (two never mix in one answer)."""

    # Past this many partial analyses (a file with many kernels, all analysed) the whole module's
    # analysis is cheaper than growing the kept set once more per kernel.
    PARTIAL_ROUNDS = 3

    def __init__(self) -> None:
        self.kept: frozenset[int] = frozenset()
        self.scopes: Optional[Mapping[cst.CSTNode, Scope]] = None
        self.rounds = 0
        self.full = False

    def covering(self, ctx: ModuleContext, *nodes: cst.CSTNode) -> Mapping[cst.CSTNode, Scope]:
        """One analysis that answers for all of `nodes`."""
        tops = {id(t) for t in (_top_statement(ctx, n) for n in nodes)}
        if self.scopes is not None and (self.full or tops <= self.kept):
            return self.scopes
        self.rounds += 1
        if None in tops or self.rounds > self.PARTIAL_ROUNDS:
            self.full, self.scopes = True, _resolve(ctx.module)
        else:
            self.kept = self.kept | tops
            self.scopes = _resolve(_module_around(ctx, self.kept))
        return self.scopes


_SCOPES: "weakref.WeakKeyDictionary[ModuleContext, _Scopes]" = weakref.WeakKeyDictionary()


def _resolve(module: cst.Module) -> Mapping[cst.CSTNode, Scope]:
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)  # type: ignore[return-value]


def _module_around(ctx: ModuleContext, kept_ids: frozenset[int]) -> cst.Module:
    declares_global = [ctx.statement_of(node) for node in ctx.nodes_of(cst.Global)]
    walrus = [ctx.statement_of(node) for node in ctx.nodes_of(cst.NamedExpr)]
    special = [n for n in declares_global + walrus if n is not None]
    kept = [s for s in ctx.module.body if id(s) in kept_ids or any(ctx._within(g, s) for g in special)]
    # Only the names the kept statements mention can be asked about (imports aside, kept whole).
    mentioned = {n.value for stmt in kept for n in walk(stmt) if isinstance(n, cst.Name)}
    body = []
    for stmt in ctx.module.body:
        if any(stmt is k for k in kept):
            body.append(stmt)
        else:
            body += _stub(stmt, mentioned)
    return ctx.module.with_changes(body=body)


def _stub(stmt: cst.CSTNode, mentioned: set[str]) -> list[cst.CSTNode]:
    """What of a statement outside the kept ones the analysis needs: the bindings of mentioned
    names (a def as an empty def, `a, b = <value>` as `a, b = None`), imports whole."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        if stmt.name.value not in mentioned:
            return []
        suite = cst.SimpleStatementSuite([cst.Pass()])
        if isinstance(stmt, cst.FunctionDef):
            return [cst.FunctionDef(name=cst.Name(stmt.name.value), params=cst.Parameters(), body=suite)]
        return [cst.ClassDef(name=cst.Name(stmt.name.value), body=suite)]
    if isinstance(stmt, cst.SimpleStatementLine):
        if any(isinstance(small, (cst.Import, cst.ImportFrom)) for small in stmt.body):
            return [stmt]
        smalls = [_bindings_only(small) for small in stmt.body if _binds(small) & mentioned]
        return [stmt.with_changes(body=smalls)] if smalls else []
    return [stmt]


def _binds(small: cst.BaseSmallStatement) -> set[str]:
    """The names a simple statement binds (or deletes)."""
    if isinstance(small, cst.Assign):
        targets = [t.target for t in small.targets]
    elif isinstance(small, (cst.AugAssign, cst.AnnAssign, cst.Del)):
        targets = [small.target]
    else:
        targets = []
    return {n.value for t in targets for n in walk(t) if isinstance(n, cst.Name)}


def _bindings_only(small: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
    """A simple statement reduced to the names it binds: its value reads nothing."""
    if isinstance(small, (cst.Assign, cst.AugAssign)):
        return small.with_changes(value=cst.Name("None"))
    return small


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
