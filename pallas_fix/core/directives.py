"""The `# pallas-fix: ...` comments, read in one place: suppressions and verification directives.

`# pallas-fix: ignore` / `# pallas-fix: ignore[PF101, PF2]` turns findings off on its line (a
finding spanning several lines is suppressed by a comment on any of its first 20 lines);
`# pallas-fix: example CALL` and `# pallas-fix: entry NAME` feed verification
(verify/examples/sources.py; core/example_parser.py parses the calls).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from typing import Iterable

from pallas_fix.core.model import Span

# The code list is captured by position: the language server merges codes into it.
SUPPRESS = re.compile(r"#\s*pallas-fix:\s*ignore(?:\[([A-Za-z0-9_,\s]+)\])?")
# A finding spanning more lines than this is only suppressed from its first lines.
_SUPPRESS_REACH = 20


def suppressed(lines: list[str], span: Span, code: str) -> bool:
    """Whether a suppression comment on the finding's lines turns `code` off."""
    for n in range(span.line, min(span.end_line, span.line + _SUPPRESS_REACH) + 1):
        if n - 1 >= len(lines):
            break
        m = SUPPRESS.search(lines[n - 1])
        if m is None:
            continue
        if m.group(1) is None:
            return True
        codes = {c.strip().upper() for c in m.group(1).split(",")}
        if code in codes or any(code.startswith(c) for c in codes if c):
            return True
    return False


_DIRECTIVE_RE = re.compile(r"#\s*pallas-fix\s*:\s*(example|entry)\b\s*(.*?)\s*$")


@dataclass
class Directive:
    kind: str  # "example" | "entry"
    text: str  # what follows the keyword
    line: int  # 1-based
    column: int  # 0-based column of `text` in the source line
    line_text: str


def _comments(source: str) -> Iterable[tuple[int, int, str, str]]:
    """(line, col, comment text, line text) for every comment; falls back to a line scan."""
    lines = source.splitlines()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.start[1], tok.string, tok.line
        return
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    for n, line in enumerate(lines, 1):
        idx = line.find("#")
        if idx >= 0:
            yield n, idx, line[idx:], line


def extract_directives(source: str) -> list[Directive]:
    """Every ``# pallas-fix: example ...`` / ``# pallas-fix: entry ...`` comment, in file order."""
    out: list[Directive] = []
    seen: set[int] = set()
    for line, col, comment, line_text in _comments(source):
        m = _DIRECTIVE_RE.search(comment)
        if not m or line in seen:
            continue
        seen.add(line)
        out.append(Directive(m.group(1), m.group(2), line, col + m.start(2), line_text))
    return out
