"""A module's text cut into top-level blocks, and the module-level names each block binds and
mentions: what the language server's incremental analysis compares between two versions.

A block is one top-level statement (statements sharing a line are one block) together with the
blank and comment lines above it, so every line of the file but the tail after the last statement
belongs to exactly one block and an edit to a comment above a kernel changes the kernel's block.
Python's own `ast` finds the statements (`analysis.discovery.top_level`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.analysis.discovery.top_level import LINE, bound_names, identifiers, last_line, statement_groups


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
            self._bound = frozenset(bound_names(self.statements, self.text))
        return self._bound

    @property
    def mentioned(self) -> frozenset[str]:
        """Every identifier the block uses or defines, at any depth."""
        if self._mentioned is None:
            self._mentioned = frozenset(n for s in self.statements for n in identifiers(s))
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
    lines = LINE.findall(text)
    blocks, start = [], 1
    for group in statement_groups(tree):
        end = last_line(group)
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
