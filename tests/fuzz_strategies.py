"""Mutated fixture kernels for the fuzz tests (tests/test_fuzz.py).

Every mutation is a plain function `(source, rnd) -> source` driven by a `random.Random`, so that
Hypothesis can drive it (`st.randoms()` records and shrinks the draws) and a failing case can be
replayed from its printed source alone. Mutations that need a parse (renames, reordering) leave
text they cannot parse unchanged; the others work on any text.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import random
import re
import tokenize
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures"


@lru_cache(maxsize=None)
def fixture_sources() -> tuple[tuple[str, str], ...]:
    """(name, text) of the detection fixtures and the `*_before.py` ones of the expression-level
    codemods (tests/fixtures/codemods/traced_constant/ and scalar_start/)."""
    paths = sorted((FIXTURES / "detect").glob("*.py")) + [
        p for folder in ("traced_constant", "scalar_start") for p in sorted((FIXTURES / "codemods" / folder).glob("*_before.py"))
    ]
    return tuple((f"{p.parent.name}/{p.name}", p.read_text(encoding="utf-8")) for p in paths)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines as Python counts them (str.splitlines would also split at form feeds)."""
    return _LINE.findall(text)


_lines = split_lines


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []


def _offsets(text: str) -> list[int]:
    """Offset of the start of each line (1-based rows index it as row - 1)."""
    out, pos = [], 0
    for line in _lines(text) or [""]:
        out.append(pos)
        pos += len(line)
    out.append(pos)
    return out


def _replace_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


# -- renames ------------------------------------------------------------------------------------------
FRESH_NAMES = ("renamed", "_v", "blk", "ι", "très_long_nom_de_variable", "i_", "ds_", "ref_")


def _parse(text: str):
    """The ast of text, or None; quietly (mutants are full of invalid escape sequences)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _bound_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)  # `import functools` binds a module name too, but renaming it breaks the import
    return names


def rename_identifier(text: str, rnd: random.Random) -> str:
    """Rename one name bound in the file, consistently (every bare use; never `obj.attr`)."""
    tree = _parse(text)
    if tree is None:
        return text
    toks = _tokens(text)
    if not toks:
        return text
    candidates = sorted(_bound_names(tree) - set(dir(builtins)) - set(keyword.kwlist))
    if not candidates:
        return text
    old = rnd.choice(candidates)
    used = {t.string for t in toks if t.type == tokenize.NAME}
    base = rnd.choice(FRESH_NAMES)
    new, n = base, 0
    while new in used or keyword.iskeyword(new):
        n += 1
        new = f"{base}{n}"
    offs = _offsets(text)
    spans = []
    prev = None
    for tok in toks:
        if tok.type == tokenize.NAME and tok.string == old and not (prev is not None and prev.string == "."):
            start = offs[tok.start[0] - 1] + tok.start[1]
            spans.append((start, start + len(old), new))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok
    return _replace_spans(text, spans)


# -- reordering ---------------------------------------------------------------------------------------
def _reads_writes(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    reads, writes = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, ast.Store) else reads).add(node.id)
        elif isinstance(node, ast.NamedExpr):
            writes.add(node.target.id)
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    for t in targets:
        for node in ast.walk(t):
            if isinstance(node, (ast.Subscript, ast.Attribute)):
                base = node.value
                while isinstance(base, (ast.Subscript, ast.Attribute, ast.Call)):
                    base = base.func if isinstance(base, ast.Call) else base.value
                if isinstance(base, ast.Name):
                    writes.add(base.id)  # `o_ref[...] = v` writes o_ref
    return reads, writes


def _owns_lines(stmt: ast.stmt, lines: list[str]) -> bool:
    """The statement has its lines to itself (no `a = 1; b = 2`), so moving lines moves just it."""
    first = lines[stmt.lineno - 1]
    last = lines[stmt.end_lineno - 1]
    head_ok = first[: stmt.col_offset].strip() == ""
    tail = last[stmt.end_col_offset :].strip()
    return head_ok and (tail == "" or tail.startswith("#"))


def reorder_statements(text: str, rnd: random.Random) -> str:
    """Swap two adjacent assignments of one block that neither read nor write what the other writes."""
    tree = _parse(text)
    if tree is None:
        return text
    lines = _lines(text)
    pairs = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for a, b in zip(body, body[1:]):
                if not all(isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)) for s in (a, b)):
                    continue
                if not (_owns_lines(a, lines) and _owns_lines(b, lines)) or a.end_lineno >= b.lineno:
                    continue
                ra, wa = _reads_writes(a)
                rb, wb = _reads_writes(b)
                if wa & (rb | wb) or wb & ra:
                    continue
                pairs.append((a, b))
    if not pairs:
        return text
    a, b = rnd.choice(pairs)
    seg_a = lines[a.lineno - 1 : a.end_lineno]
    middle = lines[a.end_lineno : b.lineno - 1]
    seg_b = lines[b.lineno - 1 : b.end_lineno]
    if seg_b and not seg_b[-1].endswith("\n"):
        seg_b[-1] += "\n"
    return "".join(lines[: a.lineno - 1] + seg_b + middle + seg_a + lines[b.end_lineno :])


# -- comments and blank lines -------------------------------------------------------------------------
COMMENTS = (
    "# note",
    "#",
    "# pallas-fix: ignore",
    "# pallas-fix: ignore[PF101]",
    "# pallas-fix: ignore[PF1]",
    "# expect: PF101",
    "# type: ignore",
    "# ü ∂ 😀 — unicode in a comment",
    "# x_ref[pl.ds(i * BS, BS)] = 0",
    "# pallas-fix: entry nothing_here",
    "#" + "-" * 120,
)


def insert_comments(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    for _ in range(rnd.randint(1, 4)):
        comment = rnd.choice(COMMENTS)
        n = rnd.randint(0, len(lines))
        if rnd.random() < 0.6 or not lines:
            nxt = next((ln for ln in lines[n:] if ln.strip()), "")
            indent = nxt[: len(nxt) - len(nxt.lstrip())] if rnd.random() < 0.8 else " " * rnd.randint(0, 9)
            lines.insert(n, indent + comment + "\n")
        else:
            n = min(n, len(lines) - 1)
            body = lines[n].rstrip("\r\n")
            lines[n] = body + "  " + comment + lines[n][len(body) :]
    return "".join(lines)


def insert_blank_lines(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    for _ in range(rnd.randint(1, 5)):
        lines.insert(rnd.randint(0, len(lines)), rnd.choice(("\n", "    \n", "\t\n", "\n\n\n", "\f\n")))
    return "".join(lines)


# -- constants ----------------------------------------------------------------------------------------
NUMBERS = ("0", "1", "2", "3", "7", "8", "16", "31", "32", "64", "128", "1024", "10**9", "0x10", "1_000",
           "2.0", "1e3", "-1", "(2 * 3)", "True", "None")


def change_constants(text: str, rnd: random.Random) -> str:
    toks = [t for t in _tokens(text) if t.type == tokenize.NUMBER]
    if not toks:
        return text
    offs = _offsets(text)
    spans = []
    for tok in rnd.sample(toks, k=min(len(toks), rnd.randint(1, 3))):
        start = offs[tok.start[0] - 1] + tok.start[1]
        spans.append((start, start + len(tok.string), rnd.choice(NUMBERS)))
    return _replace_spans(text, spans)


# -- breakage -----------------------------------------------------------------------------------------
JUNK = ("(", ")", "[", "]", ":", ",", "=", "\\", "'''", '"', "@", "def ", "lambda", "pass", "\t", "  ", "\n",
        "pl.ds(", "pallas_call", "\x0c", "\r", "#")


def break_syntax(text: str, rnd: random.Random) -> str:
    if not text:
        return rnd.choice(JUNK)
    how = rnd.randrange(5)
    pos = rnd.randrange(len(text) + 1)
    if how == 0:  # delete one character of structure
        spots = [m.start() for m in re.finditer(r"[()\[\]:,=]", text)]
        if spots:
            p = rnd.choice(spots)
            return text[:p] + text[p + 1 :]
        return text[:pos] + text[pos + 1 :]
    if how == 1:  # insert junk
        return text[:pos] + rnd.choice(JUNK) + text[pos:]
    if how == 2:  # truncate
        return text[:pos]
    lines = _lines(text)
    n = rnd.randrange(len(lines))
    if how == 3:  # wrong indentation
        body = lines[n].lstrip(" \t")
        lines[n] = " " * rnd.choice((0, 1, 2, 3, 5, 8, 12)) + body
        return "".join(lines)
    lines.insert(n, lines[rnd.randrange(len(lines))])  # a duplicated line somewhere else
    return "".join(lines)


def delete_lines(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    for _ in range(rnd.randint(1, 3)):
        if not lines:
            break
        del lines[rnd.randrange(len(lines))]
    return "".join(lines)


MUTATIONS = {
    "rename": rename_identifier,
    "reorder": reorder_statements,
    "comments": insert_comments,
    "blank_lines": insert_blank_lines,
    "constants": change_constants,
    "break_syntax": break_syntax,
    "delete_lines": delete_lines,
}
# Kinds that keep a parsable file parsable and the kernel's meaning (up to its constants).
MEANING_PRESERVING = ("rename", "reorder", "comments", "blank_lines")


@dataclass
class Mutant:
    fixture: str
    kinds: tuple[str, ...]
    text: str

    def __repr__(self) -> str:  # what Hypothesis prints for a failing case
        return f"Mutant(fixture={self.fixture!r}, kinds={self.kinds!r}, text=\n{self.text}\n)"


def apply_mutations(text: str, kinds, rnd: random.Random) -> str:
    for kind in kinds:
        text = MUTATIONS[kind](text, rnd)
    return text


@st.composite
def mutants(draw, kinds=tuple(MUTATIONS), max_mutations: int = 3) -> Mutant:
    fixture, text = draw(st.sampled_from(fixture_sources()))
    chosen = tuple(draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=max_mutations)))
    rnd = draw(st.randoms(use_true_random=False))
    return Mutant(fixture, chosen, apply_mutations(text, chosen, rnd))


@st.composite
def notebook_cells(draw, mutant_strategy=None) -> list[str]:
    """A mutant's lines cut into code cells at random points (cells may start mid-statement)."""
    m = draw(mutant_strategy or mutants())
    lines = _lines(m.text)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(lines)), max_size=6))))
    bounds = [0] + cuts + [len(lines)]
    cells = ["".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]
    magics = ("%matplotlib inline\n", "!pip install jax\n", "%%time\n", "x = !ls\n", "jnp.sum?\n", "%load_ext foo\n")
    return [draw(st.sampled_from(magics)) + c if draw(st.booleans()) and draw(st.booleans()) else c for c in cells]
