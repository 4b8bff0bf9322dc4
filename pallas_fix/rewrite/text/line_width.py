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

A call whose arguments are aligned with its open bracket (visual indent) keeps that style, or is
switched to hanging style when an argument cannot fit at the bracket (visual_indent.py); a long
guard message is split by implicit string concatenation; a lengthened `def` line hangs its
parameters.

The width is the longest code line (comment-only lines and docstring lines past 120 columns aside)
of the text before the rewrite, at least 79. A line is only rewritten when the module's AST stays
exactly the same, so this never changes what runs. After the last round, a call an early round
broke around one argument that a later round shortened is joined back (`rejoin`).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

import libcst as cst

from pallas_fix.rewrite.text import visual_indent
from pallas_fix.rewrite.text.syntax import summands

MIN_WIDTH = 79
MAX_PROSE = 120
# `<indent>[name=]<head><open>...<close><tail>`: a keyword argument or a simple statement.
_LINE = re.compile(r"^(?P<indent>[ \t]*)(?P<head>(?:[A-Za-z_][\w.]*\s*=\s*)?[^\s\[(]*)(?P<body>[\[(].*[\])])(?P<tail>,?\)*[,:]?)$")


def fit_width(before: str, after: str) -> str:
    """`after` with each line longer than `before`'s width, and not in `before`, broken up."""
    lines = after.splitlines(keepends=True)
    width = code_width(before)
    old = set(before.splitlines())
    plain = [_strip_eol(line) for line in lines]
    out: list[Optional[str]] = list(lines)
    br = visual_indent.scan("\n".join(plain) + "\n")
    changed = False
    for n, line in enumerate(lines):
        text, eol = plain[n], line[len(plain[n]):]
        if out[n] != line or len(text) <= width or text in old:
            continue  # already laid out with its call, or not a long new line
        layout = _layout(plain, n, width, eol or "\n", br)
        if layout is None:
            continue
        first, last, new = layout
        out[first:last + 1] = [(eol or "\n").join(new) + (lines[last][len(plain[last]):] or "")] + [None] * (last - first)
        changed = True
    if not changed:
        return after
    return _same_program("".join(line for line in out if line is not None), after)


def _same_program(candidate: str, text: str) -> str:
    """`candidate`, a relayout of `text`, where its AST is exactly `text`'s; else `text`."""
    try:
        return candidate if ast.dump(ast.parse(candidate)) == ast.dump(ast.parse(text)) else text
    except SyntaxError:
        return text


_OPENS = re.compile(r".*\($")  # a call: a list kept one element per line is a layout writers choose
_CLOSES = re.compile(r"^\s*[)\]}][)\]},:]*$")


def rejoin(original: str, final: str) -> str:
    """`final` with each call a rewrite broke over three lines around one argument (a long line
    an early round wrote, `pltriton.load(\n    x_ref.at[pl.ds(...), ...],\n)`, that a later round
    shortened to `pltriton.load(x_ref)`) joined back onto one line where that fits the file's
    width; only where its first two lines are not the original's, and only where the module's
    AST stays the same."""
    width, old = code_width(original), set(original.splitlines())
    lines = final.splitlines(keepends=True)
    plain = [_strip_eol(line) for line in lines]
    out: list[str] = []
    n = 0
    while n < len(lines):
        group = plain[n:n + 3]
        if (len(group) == 3 and _OPENS.match(group[0]) and group[1].rstrip().endswith(",") and _CLOSES.match(group[2])
                and group[0] not in old and group[1] not in old and not group[0].lstrip().startswith("#")):
            joined = group[0] + group[1].strip()[:-1] + group[2].strip()
            if len(joined) <= width:
                out.append(joined + lines[n + 2][len(plain[n + 2]):])
                n += 3
                continue
        out.append(lines[n])
        n += 1
    return _same_program("".join(out), final)


def code_width(source: str) -> int:
    """The width the file's code keeps: its longest line, at least MIN_WIDTH. Comment-only lines
    (license headers, long notes) do not set it, nor a docstring line past the widest limit style
    guides use (MAX_PROSE: a one-line summary that runs on is no line length the file keeps)."""
    prose: set[int] = set()
    try:
        for node in ast.walk(ast.parse(source)):
            body = getattr(node, "body", None)
            first = body[0] if isinstance(body, list) and body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                prose.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    except SyntaxError:
        pass
    return max([MIN_WIDTH, *(len(line) for n, line in enumerate(source.splitlines(), 1)
                             if (n not in prose or len(line) <= MAX_PROSE) and not line.lstrip().startswith("#"))])


def _layout(lines: list[str], n: int, width: int, eol: str,
            br: Optional[visual_indent.Brackets]) -> Optional[tuple[int, int, list[str]]]:
    """New text for the long line `n`: (first and last line index it replaces, its lines). A
    visual-indent call keeps its style when its arguments fit at the bracket's column; else the
    line's own list or call is broken up; else the visual call (or a `def` line's parameters) is
    switched to hanging style."""
    text = lines[n]
    unit = _block_indent(lines) or "    "
    o = visual_indent.visual_bracket(lines, n, br) if br is not None and n + 1 not in br.untouchable else None
    if o is not None:
        filled = visual_indent.refill(lines, n, o, br, width)
        if filled is not None:
            return n, n, filled
    wrapped = _wrap(text, width, eol, _hanging_indent(lines, n, "    ")) or _wrap_message(text, width, eol, unit)
    if wrapped is not None:
        return n, n, wrapped.split(eol)
    signature = o is None and br is not None and re.match(r"\s*(async\s+)?def \w+\(", text)
    if signature:
        o = (n + 1, text.index("("))  # a signature the rewrite lengthened: its parameters hang
    hung = visual_indent.hang(lines, o, br, unit, width if signature else None) if o is not None else None
    if hung is None:
        return None
    first, last, new = hung
    return first, last, [piece for line in new for piece in
                         ((_wrap(line, width, eol, unit) or line).split(eol) if len(line) > width else [line])]


# `<indent>raise Error("message")` or `<indent>Error(f"message")`: a guard pallas-fix writes.
_MESSAGE = re.compile(r'^(?P<indent>[ \t]*)(?P<head>(?:raise )?[A-Za-z_][\w.]*\()(?P<f>f?)"(?P<text>[^"\\]*)"\)$')


def _wrap_message(text: str, width: int, eol: str, unit: str) -> Optional[str]:
    """A long one-string call as the call's head, the string in pieces joined by implicit
    concatenation one indent in, each within the width, and the closing bracket. An f-string is
    only cut at spaces outside its `{...}` fields; a piece with no field is a plain string."""
    m = _MESSAGE.match(text)
    if m is None:
        return None
    inner = m["indent"] + unit
    room = width - len(inner) - 2 - len(m["f"])
    pieces = [""]
    for word in _words(m["text"], bool(m["f"])):
        if pieces[-1] and len(pieces[-1]) + len(word) > room:
            pieces.append("")
        pieces[-1] += word
    body = [f'{inner}{m["f"] if "{" in p or "}" in p else ""}"{p}"' for p in pieces]
    if len(body) < 2 and len(inner) + len(pieces[0]) + 2 + len(m["f"]) > width or any(len(line) > width for line in body):
        return None
    return eol.join([m["indent"] + m["head"], *body, m["indent"] + ")"])


def _words(message: str, formatted: bool) -> list[str]:
    """The message cut after each space, no cut inside an f-string's `{...}` field."""
    words, depth, start = [], 0, 0
    for k, ch in enumerate(message):
        depth += (ch == "{") - (ch == "}") if formatted else 0
        if ch == " " and depth == 0:
            words.append(message[start:k + 1])
            start = k + 1
    return words + [message[start:]] if message[start:] else words


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
    rest = ""
    if _list_plus(expr) and body[0] == "[" and head.endswith("="):
        # `in_specs=[a, b] + [pl.BlockSpec()] * (len(operands) - 2)`: each summand on its own line,
        # as black puts an operator it splits at (inside the call's brackets); where one does not
        # fit, the first list broken, one element per line, the rest after it
        parts = summands(expr)
        split = [f"{indent}{head}{_code(parts[0])}"] + [f"{indent}+ {_code(p)}" for p in parts[1:]]
        if all(len(line) <= width for line in split[:-1]) and len(split[-1] + tail) <= width:
            return eol.join(split) + tail
        expr, rest = parts[0], "".join(f"{eol}{indent}+ {_code(p)}" for p in parts[1:])
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
    lines = [f"{indent}{prefix}{opener}"] + [f"{inner}{item}," for item in items] + [f"{indent}{closer}{rest}{tail}"]
    if len(lines[0]) > width or len(lines[-1].split(eol)[-1]) > width:
        return None
    return eol.join(lines)


def _list_plus(expr: cst.BaseExpression) -> bool:
    """`[...] + rest` or `[a] * 3 + rest`, unparenthesised (its parts then sit inside the call's own brackets)."""
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add) and not expr.lpar


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()
