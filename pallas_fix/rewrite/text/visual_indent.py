"""Calls written in visual-indent style (arguments aligned with the open bracket) keep that style
when a rewrite adds arguments to one of their lines:

    fn = pl.pallas_call(kernel, grid=(cdiv(n, bd),), out_shape=outs,
                        out_specs=pl.BlockSpec((bd,), lambda i: (i,)),
                        compiler_params=pltriton.CompilerParams(), interpret=True)

The long line's arguments are refilled, aligned with the bracket, as many to a line as the width
allows. When one argument cannot fit at that column the whole call is laid out in hanging style
(one argument per line, the file's block indent past the line that opens it) instead. Lines with
comments or strings spanning lines are left alone: nothing here may drop a comment.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from typing import Optional

Pos = tuple[int, int]  # (row from 1, column)


@dataclass(frozen=True)
class Brackets:
    """Where each bracket of a text closes, which bracket each comma belongs to, and the rows no
    line-level edit may touch (comments, strings spanning lines)."""

    close: dict[Pos, Pos]
    commas: dict[Pos, list[Pos]]
    untouchable: frozenset[int]


def scan(text: str) -> Optional[Brackets]:
    close: dict[Pos, Pos] = {}
    commas: dict[Pos, list[Pos]] = {}
    untouchable: set[int] = set()
    stack: list[Pos] = []
    lambdas: list[int] = []  # depths of lambdas whose parameters (commas not splitting a call) are open
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and tok.string == "lambda":
                lambdas.append(len(stack))
            elif tok.type == tokenize.OP and tok.string == ":" and lambdas and lambdas[-1] == len(stack):
                lambdas.pop()
            elif tok.type == tokenize.COMMENT:
                untouchable.add(tok.start[0])
            elif tok.start[0] != tok.end[0] and tok.type not in (tokenize.NEWLINE, tokenize.NL):
                untouchable.update(range(tok.start[0], tok.end[0] + 1))
            elif tok.type == tokenize.OP and tok.string in "([{":
                stack.append(tok.start)
            elif tok.type == tokenize.OP and tok.string in ")]}" and stack:
                close[stack.pop()] = tok.start
            elif tok.type == tokenize.OP and tok.string == "," and stack and not (lambdas and lambdas[-1] == len(stack)):
                commas.setdefault(stack[-1], []).append(tok.start)
    except (tokenize.TokenError, SyntaxError):
        return None
    return Brackets(close, commas, frozenset(untouchable))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def visual_bracket(lines: list[str], n: int, br: Brackets) -> Optional[Pos]:
    """The bracket whose arguments line `n` (from 0) holds, when that call is in visual-indent
    style: opened on this line with arguments after it and the next line aligned with it, or
    opened above with this line aligned with it."""
    row = n + 1
    here = [o for o, c in br.close.items() if o[0] == row and c[0] > row]
    if here:
        o = max(here)
        after = lines[n][o[1] + 1:].strip()
        nxt = lines[n + 1] if n + 1 < len(lines) else ""
        return o if after and _indent(nxt) == o[1] + 1 and "\t" not in nxt[: o[1] + 1] else None
    around = [o for o, c in br.close.items() if o[0] < row <= c[0]]
    if not around:
        return None
    o = max(around)
    return o if _indent(lines[n]) == o[1] + 1 and not lines[n].startswith("\t") else None


def _items(lines: list[str], br: Brackets, o: Pos, first: Pos, last: Pos) -> list[str]:
    """The bracket's arguments between `first` and `last` (row, column), split at its own commas."""
    cuts = [first] + [c for c in br.commas.get(o, []) if first <= c < last] + [last]
    out = []
    for a, b in zip(cuts, cuts[1:]):
        start = (a[0], a[1] + (0 if a == first else 1))
        out.append(_text(lines, start, b).strip())
    return out


def _text(lines: list[str], a: Pos, b: Pos) -> str:
    if a[0] == b[0]:
        return lines[a[0] - 1][a[1]:b[1]]
    return "\n".join([lines[a[0] - 1][a[1]:], *lines[a[0]:b[0] - 1], lines[b[0] - 1][:b[1]]])


def refill(lines: list[str], n: int, o: Pos, br: Brackets, width: int) -> Optional[list[str]]:
    """Line `n` of a visual-indent call as lines aligned with its bracket `o`, filled to `width`;
    None when an argument does not fit at that column."""
    row, text, col = n + 1, lines[n], o[1] + 1
    start = (row, col) if o[0] == row else (row, _indent(text))
    c = br.close[o]
    end = c if c[0] == row else (row, len(text.rstrip()))
    tail = text[c[1]:] if c[0] == row else ""
    items = _items(lines, br, o, start, end)
    trailing = items and items[-1] == ""
    if trailing:
        items = items[:-1]
    if not items or any(not i or "\n" in i for i in items):
        return None
    out = [text[: start[1]]]
    for k, item in enumerate(items):
        piece = item + ("," if k < len(items) - 1 or trailing else "") + (tail if k == len(items) - 1 else "")
        if out[-1].strip() == "" or out[-1].endswith(("(", "[", "{")):
            out[-1] += piece
        elif len(out[-1]) + 1 + len(piece) <= width:
            out[-1] += " " + piece
        else:
            out.append(" " * col + piece)
    return out if all(len(line) <= width for line in out) else None


def hang(lines: list[str], o: Pos, br: Brackets, unit: str,
         fit: Optional[int] = None) -> Optional[tuple[int, int, list[str]]]:
    """The whole call opened at `o` in hanging style: (first row index, last row index, new lines),
    or None when a line of it holds a comment or an argument spans lines. With `fit` (a `def`'s
    parameters) they share one line when it stays within that width, as black lays them out."""
    c = br.close[o]
    opener = lines[o[0] - 1]
    if opener[o[1]] != "(" or not re.search(r"[\w)\]]\s*$", opener[: o[1]]):
        return None  # only a call: a trailing comma would make `x[i]` or `(a)` a tuple
    if any(r in br.untouchable for r in range(o[0], c[0] + 1)):
        return None
    items = _items(lines, br, o, (o[0], o[1] + 1), c)
    if items and items[-1] == "":
        items = items[:-1]
    if not items or any(not i or "\n" in i for i in items):
        return None
    lead = opener[: len(opener) - len(opener.lstrip(" \t"))]
    one = [f"{lead}{unit}{', '.join(items)}"]
    middle = one if fit is not None and len(one[0]) <= fit else [f"{lead}{unit}{i}," for i in items]
    new = [opener[: o[1] + 1]] + middle + [lead + lines[c[0] - 1][c[1]:]]
    return o[0] - 1, c[0] - 1, new
