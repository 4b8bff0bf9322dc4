"""One parsed module plus the cheap indexes every analysis step needs (parents, defs, imports)."""

from __future__ import annotations

from typing import Iterator, Optional, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .model import Span
from .names import ImportTable

Scope = Union[cst.Module, cst.FunctionDef, cst.Lambda]


class ModuleContext:
    def __init__(self, source: str, path: str = "<string>") -> None:
        self.source = source
        self.path = path
        self.module = cst.parse_module(source)
        self.imports = ImportTable(self.module)
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.module.visit(_ParentCollector(self.parents))
        self._positions = None

    # -- structure ------------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        cur = self.parents.get(node)
        while cur is not None:
            yield cur
            cur = self.parents.get(cur)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The innermost function (or lambda, or the module) whose body holds `node`."""
        for anc in self.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                return anc
        return self.module

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.FunctionDef):
                return anc
        return None

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.BaseStatement]:
        """The statement (simple line or compound) that holds `node`."""
        cur: Optional[cst.CSTNode] = node
        while cur is not None:
            if isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return cur
            cur = self.parents.get(cur)
        return None

    def scope_chain(self, node: cst.CSTNode) -> list[Scope]:
        chain: list[Scope] = []
        for anc in self.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                chain.append(anc)
        chain.append(self.module)
        return chain

    def body_statements(self, scope: Scope) -> list[cst.CSTNode]:
        if isinstance(scope, cst.Module):
            return list(scope.body)
        if isinstance(scope, cst.Lambda):
            return []
        body = scope.body
        return list(body.body) if isinstance(body, cst.IndentedBlock) else [body]

    def local_defs(self, scope: Scope) -> dict[str, cst.FunctionDef]:
        """Function definitions anywhere in `scope`'s own body (not inside nested functions)."""
        found: dict[str, cst.FunctionDef] = {}
        for stmt in self.body_statements(scope):
            for node in _walk_same_scope(stmt):
                if isinstance(node, cst.FunctionDef):
                    found[node.name.value] = node
        return found

    def resolve_def(self, name: str, at: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The `def name` visible from `at`, innermost scope first."""
        for scope in self.scope_chain(at):
            defs = self.local_defs(scope)
            if name in defs:
                return defs[name]
        return None

    def assignments(self, name: str, scope: Scope) -> list[cst.BaseExpression]:
        """Values assigned to a plain `name = value` in `scope` (not nested functions)."""
        values: list[cst.BaseExpression] = []
        for stmt in self.body_statements(scope):
            for node in _walk_same_scope(stmt):
                if isinstance(node, cst.Assign):
                    for target in node.targets:
                        if isinstance(target.target, cst.Name) and target.target.value == name:
                            values.append(node.value)
                elif isinstance(node, cst.AnnAssign) and node.value is not None:
                    if isinstance(node.target, cst.Name) and node.target.value == name:
                        values.append(node.value)
        return values

    def resolve_value(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
        """Follow `name` to its single assignment in the nearest scope that assigns it."""
        seen = 0
        while isinstance(expr, cst.Name) and seen < 8:
            seen += 1
            for scope in self.scope_chain(at):
                values = self.assignments(expr.value, scope)
                if values:
                    if len(values) != 1:
                        return expr
                    at = values[0]
                    expr = values[0]
                    break
            else:
                return expr
        return expr

    # -- positions ------------------------------------------------------------------------------
    def span(self, node: cst.CSTNode) -> Span:
        if self._positions is None:
            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._positions = wrapper.resolve(PositionProvider)
        pos = self._positions[node]
        return Span(pos.start.line, pos.start.column, pos.end.line, pos.end.column)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


def _walk_same_scope(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk that yields nested FunctionDefs but does not enter them (or lambdas)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, (cst.FunctionDef, cst.Lambda)) and cur is not node:
            continue
        if isinstance(cur, cst.FunctionDef) and cur is node:
            continue
        stack.extend(reversed(cur.children))


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(reversed(cur.children))


class _ParentCollector(cst.CSTVisitor):
    def __init__(self, parents: dict) -> None:
        self.parents = parents
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parents[node] = self.stack[-1]
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
