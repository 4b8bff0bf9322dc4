"""Text arithmetic for the language server: LSP lines and positions, minimal edits, suppressions.

Pure functions of strings, so they are tested without a client. Positions follow the protocol:
0-based lines split only at `\\r\\n`, `\\r` and `\\n` (not at the other characters Python's
`str.splitlines` splits at), and columns counted in the negotiated encoding's code units (UTF-16
unless the client asked for another).
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Iterable, Optional

from pallas_fix.core.directives import SUPPRESS
from pallas_fix.frontends.lines import split_lines

_TERMINATOR = re.compile(r"(?:\r\n|\r|\n)\Z")


def content(line: str) -> str:
    """A line without its terminator."""
    return _TERMINATOR.sub("", line)


def units(text: str, encoding: str = "utf-16") -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def to_units(line: str, column: int, encoding: str = "utf-16") -> int:
    """Code-point column -> client code units."""
    return units(content(line)[:column], encoding)


def from_units(line: str, character: int, encoding: str = "utf-16") -> int:
    """Client code units -> code-point column (clamped to the line's end)."""
    text = content(line)
    if encoding == "utf-32":
        return min(character, len(text))
    count = 0
    for i, ch in enumerate(text):
        if count >= character:
            return i
        count += units(ch, encoding)
    return len(text)


@dataclass(frozen=True)
class Edit:
    """A text edit in protocol coordinates: (line, character) pairs, end exclusive."""

    start: tuple[int, int]
    end: tuple[int, int]
    new_text: str

    def to_json(self) -> dict:
        return {
            "range": {
                "start": {"line": self.start[0], "character": self.start[1]},
                "end": {"line": self.end[0], "character": self.end[1]},
            },
            "newText": self.new_text,
        }


def _line_start(lines: list[str], index: int, encoding: str) -> tuple[int, int]:
    """Where line `index` starts; one past the last line is the end of the document."""
    if index < len(lines):
        return (index, 0)
    if not lines:
        return (0, 0)
    last = lines[-1]
    if content(last) != last:  # the text ends with a line break: an empty last line follows
        return (len(lines), 0)
    return (len(lines) - 1, units(last, encoding))


def minimal_edits(old: str, new: str, encoding: str = "utf-16") -> list[Edit]:
    """Whole-line edits turning `old` into `new`, one per changed run of lines.

    Whole lines keep the edits independent of the position encoding (they start at character 0)
    except at a last line without a line break. A rewrite that touches a kernel body and its
    pallas_call site gives one edit per place, not one edit spanning everything in between.
    """
    if old == new:
        return []
    a, b = split_lines(old), split_lines(new)
    # Common head and tail first: difflib is quadratic in the worst case, and a fix changes a few
    # lines of a long file.
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    edits = []
    matcher = difflib.SequenceMatcher(None, a_mid, b_mid, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(
            Edit(
                _line_start(a, head + i1, encoding),
                _line_start(a, head + i2, encoding),
                "".join(b_mid[j1:j2]),
            )
        )
    return edits


def _offset(lines: list[str], starts: list[int], pos: tuple[int, int], encoding: str) -> int:
    line, character = pos
    if line >= len(lines):
        return starts[-1]
    return starts[line] + from_units(lines[line], character, encoding)


def apply_edits(text: str, edits: Iterable[Edit], encoding: str = "utf-16") -> str:
    """Apply non-overlapping edits the way a client does (all positions refer to `text`)."""
    lines = split_lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    spans = sorted(
        ((_offset(lines, starts, e.start, encoding), _offset(lines, starts, e.end, encoding), e.new_text) for e in edits),
        key=lambda s: (s[0], s[1]),
    )
    out, cursor = [], 0
    for start, end, new_text in spans:
        if start < cursor:
            raise ValueError("overlapping edits")
        out.append(text[cursor:start])
        out.append(new_text)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


# -- suppression comments ----------------------------------------------------------------------
def _uncommentable_lines(text: str) -> Optional[set[int]]:
    """1-based lines whose end cannot take a comment: inside a string, or continued with `\\`.

    None when the text does not tokenize (then no line is known to be safe).
    """
    bad: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.start[0] < tok.end[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.DEDENT):
                bad.update(range(tok.start[0], tok.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    for n, line in enumerate(split_lines(text), start=1):
        body = content(line)
        if body.endswith("\\") and not body.lstrip().startswith("#"):
            bad.add(n)
    return bad


def suppression_edit(text: str, first_line: int, last_line: int, code: str, encoding: str = "utf-16") -> Optional[Edit]:
    """The edit that silences `code` on a finding spanning 1-based `first_line`..`last_line`.

    An existing `# pallas-fix: ignore[...]` on one of those lines gets the code merged into its
    list; otherwise `  # pallas-fix: ignore[CODE]` goes at the end of the first line that can end
    with a comment (a line inside a multi-line string or ending in a backslash cannot). None when
    no line can take it.
    """
    lines = split_lines(text)
    last_line = min(last_line, first_line + 20, len(lines))  # the engine looks 20 lines down at most
    for n in range(first_line, last_line + 1):
        body = content(lines[n - 1])
        m = SUPPRESS.search(body)
        if m is None:
            continue
        if m.group(1) is None:
            return None  # a bare ignore already silences every code on the line
        codes = [c.strip().upper() for c in m.group(1).split(",") if c.strip()]
        if code.upper() in codes:
            return None
        merged = ", ".join(sorted(set(codes) | {code.upper()}))
        start, end = m.span(1)
        return Edit((n - 1, units(body[:start], encoding)), (n - 1, units(body[:end], encoding)), merged)
    bad = _uncommentable_lines(text)
    if bad is None:
        return None
    for n in range(first_line, last_line + 1):
        if n in bad:
            continue
        body = content(lines[n - 1])
        kept = body.rstrip()
        return Edit(
            (n - 1, units(kept, encoding)),
            (n - 1, units(body, encoding)),
            f"  # pallas-fix: ignore[{code.upper()}]",
        )
    return None
