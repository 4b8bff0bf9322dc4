"""Building the statements a loop rewrite writes into a kernel, and keeping their blank lines and
comments where a reader expects them."""

from __future__ import annotations

import libcst as cst


def stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text + "\n")


def when_def(pl: str, cond: str, name: str, body: list[cst.BaseStatement]) -> cst.FunctionDef:
    """`@pl.when(cond)` / `def name(): body`, set off from the code before it by a blank line."""
    fn = cst.parse_statement(f"@{pl}.when({cond})\ndef {name}():\n    pass\n")
    assert isinstance(fn, cst.FunctionDef)
    body = [comments_only(body[0])] + body[1:] if body else [cst.SimpleStatementLine([cst.Pass()])]
    return fn.with_changes(
        body=fn.body.with_changes(body=body),
        leading_lines=[cst.EmptyLine(indent=False)],
    )


def comments_only(node):
    """`node` without the blank lines above it (its comments stay)."""
    if hasattr(node, "leading_lines"):
        return node.with_changes(leading_lines=[l for l in node.leading_lines if l.comment is not None])
    return node


def with_blank_line(node):
    if hasattr(node, "leading_lines"):
        return node.with_changes(leading_lines=[cst.EmptyLine(indent=False), *node.leading_lines])
    return node


def capture(bucket: list):
    """An edit that removes a statement and keeps its updated form in `bucket` (to re-place it)."""

    def edit(updated):
        bucket.append(updated)
        return cst.RemovalSentinel.REMOVE

    return edit


def strip_leading_blank_lines(fn: cst.CSTNode) -> cst.CSTNode:
    """A kernel whose first statements were removed should not start with an empty line."""
    assert isinstance(fn, cst.FunctionDef)
    body = fn.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return fn
    first = body.body[0]
    lines = list(getattr(first, "leading_lines", ()))
    while lines and lines[0].comment is None:
        lines.pop(0)
    if hasattr(first, "leading_lines"):
        first = first.with_changes(leading_lines=lines)
    return fn.with_changes(body=body.with_changes(body=[first, *body.body[1:]]))


def siblings_of(ctx, node: cst.CSTNode) -> list:
    """The statements of the block holding `node` (for removing it with its spacing)."""
    parent = ctx.parent(node)
    return list(getattr(parent, "body", ())) if parent is not None else []


def body_statements(fn: cst.FunctionDef) -> list[cst.BaseStatement]:
    """A def's statements; none when its body sits on the `def` line."""
    body = fn.body
    return list(body.body) if isinstance(body, cst.IndentedBlock) else []
