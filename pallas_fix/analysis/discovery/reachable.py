"""The part of a module its kernel analysis can reach, for LibCST to parse instead of the whole.

Checking a large library module that holds a pallas_call or two (a lowering, a test file of
hundreds of cases) cost mostly its LibCST parse and the index over it. What the analysis reads
starts at the statements that name pallas_call (or GPU interpret mode, which the rules for that
mode look for anywhere) and goes through module-level names: the statements mentioning a name
they bind (a caller, an alias, an example call), the statements binding a name any of these
mention (the kernel, its helpers, constants, specs), transitively;
plus every import. A top-level class is cut into its members the same way (a test class keeps
the tests that call pallas_call). `reachable_source` keeps those statements and replaces every
other line with an empty line, so lines and columns stay those of the file and the findings on
the kept statements are those of the whole file (tests/test_reachable.py compares them over
every kernel fixture with unrelated code added, and over JAX's own Pallas sources).

Only reports use the result: a fix is planned on the whole file's tree (see `engine`), because
a rewrite turns that tree back into the file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from pallas_fix.core.names import GPU_INTERPRET_WORDS
from pallas_fix.analysis.discovery.top_level import LINE, bound_names, first_line, last_line, statement_groups

# Every identifier in the text, strings and comments included: a superset of what the statement
# mentions, found at C speed.
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
_SEED = "pallas_call"
_ENTRY_SEED = ".kernel("


@dataclass
class _Unit:
    """A top-level statement group, or a statement group of a top-level class's body."""

    statements: list[ast.stmt]
    first: int
    last: int
    text: str
    parent: int = -1  # the class's unit, for a member
    members: list[int] = field(default_factory=list)  # a class's member units, in order
    header: Optional[str] = None  # a class's text above its body: what it mentions itself


def reachable_source(source: str, keep_at_most: float = 0.7) -> Optional[str]:
    """`source` with the statements its analysis cannot reach emptied, or None when they are
    less than `1 - keep_at_most` of its text (parsing the whole then costs about the same) or
    `ast` cannot parse it (LibCST's parse then reports the error). A class whose methods are
    tests (hundreds, a few with a pallas_call) keeps only the members the analysis reaches."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = LINE.findall(source)
    units = _units(statement_groups(tree), lines)
    kept = _reached(units)
    dropped = [u for u, k in zip(units, kept) if not k and (u.parent < 0 or kept[u.parent])]
    size = sum(len(u.text) for u in dropped)
    if size == 0 or len(source) - size > keep_at_most * len(source):
        return None
    out = list(lines)
    for u in dropped:
        for i in range(u.first - 1, _footer_end(lines, u.last, _indent(lines[u.first - 1]))):
            out[i] = _line_end(lines[i])
    return "".join(out)


def _units(groups: list[list[ast.stmt]], lines: list[str]) -> list[_Unit]:
    units = []
    for g in groups:
        units.append(_Unit(g, first_line(g[0]), last_line(g), "".join(lines[first_line(g[0]) - 1 : last_line(g)])))
        cls = g[0]
        if len(g) != 1 or not isinstance(cls, ast.ClassDef) or cls.body[0].lineno == cls.lineno:
            continue
        k = len(units) - 1
        members = statement_groups(cls)
        body_start = first_line(members[0][0])
        units[k].header = "".join(lines[units[k].first - 1 : body_start - 1])
        for m in members:
            units[k].members.append(len(units))
            units.append(_Unit(m, first_line(m[0]), last_line(m), "".join(lines[first_line(m[0]) - 1 : last_line(m)]), k))
    return units


def _reached(units: list[_Unit]) -> list[bool]:
    """Per unit, whether the analysis can reach it. Two ways in:

    * up: the statements that name pallas_call in code, and what mentions a module-level name
      they bind (their callers, aliases, example calls), transitively;
    * down: what binds a name any kept statement mentions (kernels, helpers, constants, specs),
      transitively.

    Other uses of what the kernels read (a second caller of a kernel that names no pallas_call)
    are not followed: only a planner asks about them, and a plan sends the analysis back to the
    whole file (`engine.analyze_source`). A class's members bind their names in the class: what
    mentions them is not followed up, and taking them for module names going down only keeps
    more.
    """
    imports = [all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in u.statements) for u in units]
    bound = [bound_names(u.statements, u.text) for u in units]
    binders: dict[str, list[int]] = {}
    for k, names in enumerate(bound):
        for n in names:
            binders.setdefault(n, []).append(k)
    mentioned: dict[int, set[str]] = {}
    mentioners: dict[str, list[int]] = {}

    def mentions(k: int) -> set[str]:
        if k not in mentioned:
            u = units[k]
            mentioned[k] = set(_IDENTIFIER.findall(u.header if u.header is not None else u.text))
        return mentioned[k]

    def mentioning(names: set[str]) -> list[int]:
        """The units whose text holds one of `names` as a word."""
        if names and not mentioners:
            for j in range(len(units)):
                for n in mentions(j):
                    mentioners.setdefault(n, []).append(j)
        return [j for n in names for j in mentioners.get(n, ())]

    def seed(k: int) -> bool:
        u = units[k]
        text = u.header if u.header is not None else u.text
        # What turns GPU interpret mode on is looked for in the whole module (rules.gpu_interpret.hazards
        # .trigger): every statement naming it is kept, an import of it followed to its uses.
        if any(w in text for w in GPU_INTERPRET_WORDS):
            return True
        if u.header is not None:
            return _SEED in u.header
        if _ENTRY_SEED in u.text and _calls_attribute(u.statements, "kernel"):
            return True  # `plgpu.kernel(body, ...)` / `pl.kernel(...)` runs a kernel as pallas_call does
        return _SEED in u.text and _names_in_code(u.statements, _SEED)

    kept = list(imports)
    up = [k for k in range(len(units)) if seed(k)]
    down: list[int] = []
    ups = set(up)

    def keep(j: int, into: list[int]) -> None:
        """Keep unit j (its class's header with it, its first member with a class: a body
        cannot be empty) and follow it the way `into` goes."""
        if kept[j]:
            return
        kept[j] = True
        into.append(j)
        u = units[j]
        if u.parent >= 0:
            keep(u.parent, down)
        if u.members:
            keep(u.members[0], down)

    seeds, up = up, []
    for k in seeds:
        kept[k] = False  # an import naming pallas_call is kept already, but must be followed up
        keep(k, up)
    while up or down:
        if up:
            k = up.pop()
            # Up: who mentions the module-level names this binds (a member's are the class's,
            # read through `self`). An import's names (`jnp`) are read everywhere and lead
            # nowhere; one naming pallas_call (`import pallas_call as pc`) leads to its calls.
            module_level = units[k].parent < 0 and (not imports[k] or k in ups)
            for j in mentioning(bound[k] if module_level else set()):
                keep(j, up)
            for j in [j for n in mentions(k) for j in binders.get(n, ())]:
                keep(j, down)
        else:
            k = down.pop()
            for j in [j for n in mentions(k) for j in binders.get(n, ())]:
                keep(j, down)
    return kept


def _calls_attribute(group: list[ast.stmt], attr: str) -> bool:
    """A call `x.attr(...)` in the statements."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr
        for stmt in group for node in ast.walk(stmt)
    )


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


def _footer_end(lines: list[str], end: int, indent: int) -> int:
    """The last line LibCST gives the statement ending on line `end`, indented by `indent`:
    the blank and comment lines after it up to the last comment indented further (its indented
    block's footer). Left in place, they would join the footer of the kept statement above."""
    last, j = end, end
    while j < len(lines) and (not lines[j].strip() or lines[j].lstrip().startswith("#")):
        if _indent(lines[j]) > indent:  # a comment, or whitespace LibCST takes for indent
            last = j + 1
        j += 1
    return last


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t\f"))


def _line_end(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]
