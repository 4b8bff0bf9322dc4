"""The part of a module its kernel analysis can reach, for LibCST to parse instead of the whole.

Checking a large library module that holds a pallas_call or two (a lowering, a test file of
hundreds of cases) cost mostly its LibCST parse and the index over it. The analysis reads the
statements that hold a pallas_call and what they reach through module-level names: the
statements binding a name they mention (the kernel, its helpers, constants, specs), the
statements mentioning a name they bind (a caller, an alias, an example call) and, transitively,
the same for those; plus every import. `reachable_source` keeps those top-level statements and
replaces every other line with an empty line, so lines and columns stay those of the file and
what the analysis says about the kept statements is what it says on the whole file.

Only analyses use the result: a fix is planned on the whole file's tree (see `engine`), because
a rewrite turns that tree back into the file.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from pallas_fix.analysis.top_level import LINE, first_line, last_line, module_bindings, statement_groups

# Every identifier in the text, strings and comments included: a superset of what the statement
# mentions, found at C speed.
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
_INDENTED_COMMENT = re.compile(r"[ \t\f]+#")
_SEED = "pallas_call"


def reachable_source(source: str, keep_at_most: float = 0.7) -> Optional[str]:
    """`source` with the top-level statements its analysis cannot reach emptied, or None when
    they are less than `1 - keep_at_most` of its text (parsing the whole then costs about the
    same) or `ast` cannot parse it (LibCST's parse then reports the error)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = LINE.findall(source)
    groups = statement_groups(tree)
    texts = ["".join(lines[first_line(g[0]) - 1 : last_line(g)]) for g in groups]
    kept = _reached(groups, texts, "global" in source)
    dropped = sum(len(t) for t, k in zip(texts, kept) if not k)
    if dropped == 0 or len(source) - dropped > keep_at_most * len(source):
        return None
    out = list(lines)
    for g, k in zip(groups, kept):
        if not k:
            start, end = first_line(g[0]), _footer_end(lines, last_line(g))
            for i in range(start - 1, end):
                out[i] = _line_end(lines[i])
    return "".join(out)


def _reached(groups: list[list[ast.stmt]], texts: list[str], has_global: bool) -> list[bool]:
    """Per group, whether the analysis can reach it. Three ways in:

    * up: the statements that name pallas_call in code, and what mentions a name they bind
      (their callers, aliases, example calls), transitively;
    * down: what binds a name any kept statement mentions (kernels, helpers, constants, specs),
      transitively;
    * beside: what mentions a name bound one step down (another use of the kernel, a second
      partial of it), with what those reach down.
    """
    imports = [all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in g) for g in groups]
    bound = [set().union(*(module_bindings(s, has_global) for s in g)) for g in groups]
    binders: dict[str, list[int]] = {}
    for k, names in enumerate(bound):
        for n in names:
            binders.setdefault(n, []).append(k)
    mentioned: dict[int, set[str]] = {}

    def mentions(k: int) -> set[str]:
        if k not in mentioned:
            mentioned[k] = set(_IDENTIFIER.findall(texts[k]))
        return mentioned[k]

    kept = list(imports)
    up = [k for k, t in enumerate(texts) if _SEED in t and _names_in_code(groups[k], _SEED)]
    down: list[int] = []
    ups = set(up)
    for k in up:
        kept[k] = True
    while up or down:
        if up:
            k = up.pop()
            # Up: who mentions what this binds. An import's names (`jnp`) are read everywhere and
            # lead nowhere; one naming pallas_call (`import pallas_call as pc`) leads to its calls.
            for j in _mentioning(texts, bound[k] if not imports[k] or k in ups else set()):
                if not kept[j]:
                    kept[j] = True
                    up.append(j)
            for j in (j for n in mentions(k) for j in binders.get(n, ())):
                if not kept[j]:
                    kept[j] = True
                    down.append(j)
                    # Beside: the other uses of what an upward statement reads directly.
                    for i in _mentioning(texts, bound[j] if not imports[j] else set()):
                        if not kept[i]:
                            kept[i] = True
                            down.append(i)
        else:
            k = down.pop()
            for j in (j for n in mentions(k) for j in binders.get(n, ())):
                if not kept[j]:
                    kept[j] = True
                    down.append(j)
    return kept


def _names_in_code(group: list[ast.stmt], name: str) -> bool:
    """`name` appears in the statements as code (not only in a string or a comment)."""
    for stmt in group:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                hit = node.id == name
            elif isinstance(node, ast.Attribute):
                hit = node.attr == name
            elif isinstance(node, ast.alias):
                hit = name in node.name.split(".") or node.asname == name
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                hit = node.name == name
            elif isinstance(node, (ast.arg, ast.keyword)):
                hit = node.arg == name
            else:
                continue
            if hit:
                return True
    return False


def _mentioning(texts: list[str], names: set[str]) -> list[int]:
    """The groups whose text holds one of `names` as a word."""
    if not names:
        return []
    pattern = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b")
    return [k for k, t in enumerate(texts) if pattern.search(t)]


def _footer_end(lines: list[str], end: int) -> int:
    """The last line LibCST gives the statement ending on line `end`: the blank and comment
    lines after it up to the last indented comment among them (an indented block's footer).
    Left in place, they would join the footer of the kept statement above."""
    last, j = end, end
    while j < len(lines) and (not lines[j].strip() or lines[j].lstrip().startswith("#")):
        if _INDENTED_COMMENT.match(lines[j]):
            last = j + 1
        j += 1
    return last


def _line_end(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]
