"""A module's top-level statements as Python's own `ast` sees them: their lines and the
module-level names each binds and mentions.

`ast` parses several times faster than LibCST, so what only needs these facts (which kernels an
edit touched, which statements an analysis can reach) reads them here before LibCST parses.
"""

from __future__ import annotations

import ast
import re

LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # the tokenizer's newlines, not str.splitlines'
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_GLOBAL = re.compile(r"\bglobal\b")


def statement_groups(tree: ast.Module) -> list[list[ast.stmt]]:
    """The module's statements, those sharing a line (`a = 1; b = 2`) grouped: a group is the
    smallest run of lines that holds whole statements only."""
    groups: list[list[ast.stmt]] = []
    for stmt in tree.body:
        if groups and first_line(stmt) <= groups[-1][-1].end_lineno:  # type: ignore[operator]
            groups[-1].append(stmt)
        else:
            groups.append([stmt])
    return groups


def first_line(stmt: ast.stmt) -> int:
    """The statement's first line, its decorators included."""
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno] + [d.lineno for d in decorators])


def last_line(group: list[ast.stmt]) -> int:
    return max(s.end_lineno or s.lineno for s in group)


def bound_names(statements: list[ast.stmt], text: str) -> set[str]:
    """What these statements (whose source is `text`) bind at module level; nested functions are
    searched for `global` only where the word appears."""
    has_global = _GLOBAL.search(text) is not None  # a word: `global_scale` asks for no walk
    return set().union(*(module_bindings(s, has_global) for s in statements))


def module_bindings(stmt: ast.stmt, has_global: bool) -> set[str]:
    """Names `stmt` binds at module level: targets, defs, imports, outside nested scopes and
    comprehensions, plus names any nested function declares `global` (looked for only when
    `has_global`)."""
    names: set[str] = set()
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if has_global:
                names.update(n for g in ast.walk(node) if isinstance(g, ast.Global) for n in g.names)
            stack.extend(node.decorator_list)  # decorators run at module level
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, _COMPREHENSIONS):
            # Its own targets are its own; only `:=` inside it binds in the module.
            names.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name))
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            names.update(h.name for h in node.handlers if h.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names


def identifiers(stmt: ast.stmt) -> set[str]:
    """Every identifier the statement uses or defines, at any depth."""
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, _SCOPES[:3]):
            out.add(node.name)  # type: ignore[union-attr]
        elif isinstance(node, ast.Global):
            out.update(node.names)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
    return out
