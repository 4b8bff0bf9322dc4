"""The next version's LibCST tree from the last one's: only the blocks an edit touched are parsed.

A full parse of a 2,000-line file costs more than everything the language server does after an
edit to one kernel. The blocks before and after the edit have the same text, and LibCST gives a
top-level statement the same node wherever it is parsed, provided the boundary is one LibCST
draws too: it gives the blank and comment lines above a statement to that statement, except
lines up to the last indented one, which belong to the indented block above (its `footer`). So a
boundary is reused only where the block below starts with no indented line, in both versions;
else the parsed region grows by a block. The result is the tree `libcst.parse_module(text)`
gives (tests/test_lsp_splice.py compares them node for node over random edits).
"""

from __future__ import annotations

import ast
from typing import Optional

import libcst as cst

from pallas_fix.analysis.discovery.top_level import LINE, first_line
from pallas_fix.frontends.lsp.incremental.blocks import Block


def spliced_parse(old: cst.Module, old_blocks: list[Block], new_blocks: list[Block], same_start: int, same_end: int) -> Optional[cst.Module]:
    """The tree of the new text, made of `old`'s statements outside the edit and a parse of the
    blocks between the first `same_start` and the last `same_end` blocks (the text the two
    versions share); None where this cannot be sure of that tree (the caller parses it all)."""
    if len(old.body) != len(old_blocks) - 1:  # one statement per block, the tail block has none
        return None
    tail = len(new_blocks) - 1
    a = min(same_start, tail)
    b = len(new_blocks) - same_end  # the first new block after the edit
    shift = len(new_blocks) - len(old_blocks)
    while b <= tail and not _clean(new_blocks[b]):
        b += 1
    # How the file ends (`has_trailing_newline`) is LibCST's reading of the last statement and
    # the lines after it: an edit of either parses both.
    if b == tail:
        b += 1
    if b > tail and a == tail:
        a -= 1
    while a > 0 and not (_clean(new_blocks[a]) and (a >= len(old_blocks) or _clean(old_blocks[a]))):
        a -= 1
    if a == 0:
        return None  # the module's header would come from the edited text
    # LibCST's default indent is the file's first indent: the old tree's, the region's, or
    # (neither has one) one after the region the old tree may not have seen first.
    indent_before, indent_within = _indents(new_blocks[:a]), _indents(new_blocks[a:b])
    if not indent_before and not indent_within:
        return None
    region = "".join(blk.text for blk in new_blocks[a:b])
    try:
        part = cst.parse_module(region)
    except cst.ParserSyntaxError:
        return None  # the full parse reports it, at the file's own place
    # Nodes leave out an indent or newline that is the module's default, so the region's
    # defaults must be the file's.
    if indent_before and indent_within and part.default_indent != old.default_indent or part.default_newline != old.default_newline:
        return None
    with_tail = b > tail
    if len(part.body) != b - a - with_tail:
        return None
    # What LibCST makes the region's header is the first statement's leading lines in the file,
    # or the file's footer when the region holds no statement (an edit below the last one).
    body, footer = list(part.body), part.footer
    if part.header and body:
        body[0] = body[0].with_changes(leading_lines=[*part.header, *body[0].leading_lines])
    elif part.header:
        footer = [*part.header, *footer]
    kept_after = old.body[b - shift :] if not with_tail else ()
    return old.with_changes(
        body=[*old.body[:a], *body, *kept_after],
        footer=footer if with_tail else old.footer,
        has_trailing_newline=part.has_trailing_newline if with_tail else old.has_trailing_newline,
        default_indent=old.default_indent if indent_before else part.default_indent,
    )


def _clean(block: Block) -> bool:
    """No line above the block's statement starts with whitespace: none can belong to the
    indented block of the statement above."""
    first = first_line(block.statements[0]) if block.statements else block.end + 1
    return not any(line[:1] in (" ", "\t", "\f") for line in LINE.findall(block.text)[: first - block.start])


def _indents(blocks: list[Block]) -> bool:
    """A statement of these blocks opens an indented body: LibCST's default indent (the first
    indent of the file) comes from them."""
    for blk in blocks:
        for stmt in blk.statements:
            body = getattr(stmt, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt) and body[0].lineno > stmt.lineno:
                return True
    return False
