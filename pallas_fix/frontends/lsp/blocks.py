"""A module's text cut into top-level blocks, and the module-level names each block binds and
mentions: what the language server's incremental analysis compares between two versions.

A block is one top-level statement (statements sharing a line are one block) together with the
blank and comment lines above it, so every line of the file but the tail after the last statement
belongs to exactly one block and an edit to a comment above a kernel changes the kernel's block.
Python's own `ast` finds the statements: it parses several times faster than LibCST.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # the tokenizer's newlines, not str.splitlines'
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass
class Block:
    start: int  # first line, 1-based (its leading blank and comment lines included)
    end: int  # last line
    text: str
    statements: list[ast.stmt] = field(default_factory=list, repr=False)
    _bound: Optional[frozenset[str]] = field(default=None, repr=False)
    _mentioned: Optional[frozenset[str]] = field(default=None, repr=False)

    @property
    def bound(self) -> frozenset[str]:
        """Names this block binds in the module's namespace ("*" for a star import)."""
        if self._bound is None:
            has_global = "global" in self.text  # else no nested function needs walking for one
            self._bound = frozenset(n for s in self.statements for n in _module_bindings(s, has_global))
        return self._bound

    @property
    def mentioned(self) -> frozenset[str]:
        """Every identifier the block uses or defines, at any depth."""
        if self._mentioned is None:
            self._mentioned = frozenset(n for s in self.statements for n in _identifiers(s))
        return self._mentioned

    def __post_init__(self) -> None:
        self.only_imports = bool(self.statements) and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in self.statements)


def split_blocks(text: str) -> Optional[list[Block]]:
    """The blocks of `text` in order, the tail (lines after the last statement) as a last block
    without statements; None when `ast` cannot parse what LibCST did."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = _LINE.findall(text)
    groups: list[list[ast.stmt]] = []
    for stmt in tree.body:
        if groups and _first_line(stmt) <= groups[-1][-1].end_lineno:  # type: ignore[operator]
            groups[-1].append(stmt)
        else:
            groups.append([stmt])
    blocks, start = [], 1
    for group in groups:
        end = max(s.end_lineno or s.lineno for s in group)
        blocks.append(Block(start, end, "".join(lines[start - 1 : end]), group))
        start = end + 1
    blocks.append(Block(start, max(len(lines), start - 1), "".join(lines[start - 1 :])))
    return blocks


def block_at(blocks: list[Block], line: int) -> Optional[int]:
    """The index of the block holding `line` (bisection: blocks are in line order)."""
    lo, hi = 0, len(blocks) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        b = blocks[mid]
        if line < b.start:
            hi = mid - 1
        elif line > b.end:
            lo = mid + 1
        else:
            return mid
    return None


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno] + [d.lineno for d in decorators])


def _module_bindings(stmt: ast.stmt, has_global: bool) -> set[str]:
    """Names `stmt` binds at module level: targets, defs, imports, outside nested scopes, plus
    names any nested function declares `global`."""
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


def _identifiers(stmt: ast.stmt) -> set[str]:
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
