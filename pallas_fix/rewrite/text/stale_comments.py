"""Comments in a kernel that may describe a ref as the whole array it was before a lift.

After a lift the kernel sees a block where it saw the array, and a comment such as
`# x_ref: (M, K), all rows` is now wrong. pallas-fix does not rewrite prose; it names the
comment in the fix's summary so the user can check it.
"""

from __future__ import annotations

import io
import re
import tokenize

import libcst as cst

from pallas_fix.analysis.context import ModuleContext

# A shape written in a comment: `(M, K)`, `[bm, 128]`, `M x K`, or the word shape / rows.
_SHAPE = re.compile(r"[(\[]\s*\w+\s*(?:,\s*\w+\s*)+[)\]]|\b\w+\s*[x×]\s*\w+\b|\bshape\b|\ball rows\b|\bwhole\b")


def stale_comments_note(ctx: ModuleContext, kernel: cst.FunctionDef, refs: set[str]) -> str:
    """`; check the comment on line 12, ...` for comments in `kernel` that mention one of `refs`
    (or its name without `_ref`) next to a shape; empty when there is none."""
    found = _shape_comments(ctx, kernel, refs)
    if not found:
        return ""
    shown = ", ".join(f"line {line} (`{text}`)" for line, text in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"; {shown}{more} may describe a ref as the whole array, which is now a block: check it"


def _shape_comments(ctx: ModuleContext, kernel: cst.FunctionDef, refs: set[str]) -> list[tuple[int, str]]:
    span = ctx.span(kernel)
    lines = ctx.source.splitlines(keepends=True)[span.line - 1 : span.end_line]
    words = set(refs) | {r[: -len("_ref")] for r in refs if r.endswith("_ref") and len(r) > 4}
    if not words:
        return []
    mention = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, words))) + r")\b")
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("".join(lines)).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        text = tok.string.strip()
        if mention.search(text) and _SHAPE.search(text):
            out.append((span.line + tok.start[0] - 1, text if len(text) <= 72 else text[:69] + "..."))
    return out
