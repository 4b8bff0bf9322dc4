"""Lines a rewrite adds stay within the file's own width.

A lift writes call-site keywords (`in_specs=[...]`, `scratch_shapes=[...]`,
`compiler_params=pltpu.CompilerParams(...)`) on one line, and one BlockSpec per operand can take
that line far past the width the rest of the file keeps. Each such new line that is a keyword
argument, or a statement ending in a bracketed list or call, is broken after its opening bracket
with one element per line and a trailing comma, the way black and ruff format it:

    in_specs=[
        pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
        pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
    ],

The width is the longest code line (comment-only lines aside) of the text before the rewrite, at
least 79. A line is only rewritten when the module's AST stays exactly the same, so this never
changes what runs.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

import libcst as cst

MIN_WIDTH = 79
# `<indent>[name=]<head><open>...<close><tail>`: a keyword argument or a simple statement.
_LINE = re.compile(r"^(?P<indent>[ \t]*)(?P<head>(?:[A-Za-z_][\w.]*\s*=\s*)?[^\s\[(]*)(?P<body>[\[(].*[\])])(?P<tail>,?\)*[,:]?)$")


def fit_width(before: str, after: str) -> str:
    """`after` with each line longer than `before`'s width, and not in `before`, broken up."""
    lines = after.splitlines(keepends=True)
    # Comment-only lines (license headers, long notes) do not set the width the code keeps.
    width = max([MIN_WIDTH, *(len(line) for line in before.splitlines() if not line.lstrip().startswith("#"))])
    old = set(before.splitlines())
    changed = False
    out: list[str] = []
    plain = [_strip_eol(line) for line in lines]
    for n, line in enumerate(lines):
        text, eol = plain[n], line[len(plain[n]):]
        long_and_new = len(text) > width and text not in old
        wrapped = _wrap(text, width, eol or "\n", _hanging_indent(plain, n, "    ")) if long_and_new else None
        if wrapped is None:
            out.append(line)
            continue
        out.append(wrapped + eol)
        changed = True
    if not changed:
        return after
    candidate = "".join(out)
    try:
        if ast.dump(ast.parse(candidate)) != ast.dump(ast.parse(after)):
            return after
    except SyntaxError:
        return after
    return candidate


def _strip_eol(line: str) -> str:
    return line.rstrip("\r\n")


def _hanging_indent(lines: list[str], n: int, default: str) -> str:
    """How far this file indents inside brackets: line `n`'s indentation past the line that opened
    its bracket (the nearest line above indented less), so a 2-space file with 4-space
    continuation lines keeps its style. Under a bracket opened mid-line (arguments aligned with
    it), that distance is the alignment, not a unit: the file's block indent is used instead."""
    text = lines[n]
    indent = text[: len(text) - len(text.lstrip(" \t"))]
    for above in reversed(lines[:n]):
        stripped = above.lstrip(" \t")
        lead = above[: len(above) - len(stripped)]
        if stripped.strip() and len(lead) < len(indent) and indent.startswith(lead):
            if stripped.rstrip().endswith(("(", "[", "{")):
                return indent[len(lead):]
            break
    return _block_indent(lines) or default


def _block_indent(lines: list[str]) -> Optional[str]:
    """The indent of the first block in the file (the line after the first `...:` line)."""
    for above, below in zip(lines, lines[1:]):
        if above.rstrip().endswith(":") and not above.lstrip().startswith("#") and below.strip():
            lead = above[: len(above) - len(above.lstrip(" \t"))]
            inner = below[: len(below) - len(below.lstrip(" \t"))]
            if len(inner) > len(lead) and inner.startswith(lead):
                return inner[len(lead):]
    return None


def _wrap(text: str, width: int, eol: str, unit: str) -> Optional[str]:
    """The line as an opening bracket, one element per line and the closing bracket; None when it
    is not a bracketed list or call pallas-fix can split."""
    m = _LINE.match(text)
    if m is None or "#" in text:
        return None
    indent, head, body, tail = m["indent"], m["head"], m["body"], m["tail"]
    try:
        expr = cst.parse_expression(body if body[0] == "[" or not head else head.split("=", 1)[-1].strip() + body)
    except cst.ParserSyntaxError:
        return None
    if isinstance(expr, cst.List) and body[0] == "[":
        items = [_code(e.value if isinstance(e, cst.Element) else e) for e in expr.elements]
        opener, closer, prefix = "[", "]", head
    elif isinstance(expr, cst.Call) and body[0] == "(" and head and not head.endswith("="):
        items = [_code(a).rstrip(", ") for a in expr.args]
        opener, closer, prefix = "(", ")", head
    else:
        return None
    if not items or any("\n" in i for i in items):
        return None
    inner = indent + unit
    lines = [f"{indent}{prefix}{opener}"] + [f"{inner}{item}," for item in items] + [f"{indent}{closer}{tail}"]
    if len(lines[0]) > width:
        return None
    return eol.join(lines)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()
