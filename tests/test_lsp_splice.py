"""`frontends/lsp/incremental/splice.py`: the tree made from the last version's statements and a parse of
the edited blocks is, node for node, the tree a full parse of the new text gives."""

from __future__ import annotations

import random
from pathlib import Path

import libcst as cst
import pytest

from pallas_fix.analysis.context import ModuleContext
from pallas_fix.frontends.lsp.incremental.blocks import split_blocks
from pallas_fix.frontends.lsp.incremental.reanalysis import _common_ends
from pallas_fix.frontends.lsp.incremental.splice import spliced_parse

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = sorted([*(FIXTURES / "lsp").glob("*.py"), *(FIXTURES / "detect").glob("*.py")])[:12]

# Lines an edit inserts: the forms LibCST attaches in different ways (blank, whitespace-only,
# indented and column-0 comments, a statement, a block opener and its body, a decorator, form
# feeds, which str.splitlines takes for line breaks and the tokenizer does not).
INSERTS = ["", "    ", "# note", "    # indented note", "\t# tab note", "x_new = 1", "    y_new = 2",
           "def _f():", "    return 3", "@staticmethod", "if True:", "    pass", "class _C:", "'''doc'''",
           "\x0c", "\x0c# form feed note"]


def _edit(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    at = rng.randrange(len(lines) + 1)
    op = rng.random()
    if op < 0.6:
        lines[at:at] = rng.sample(INSERTS, rng.randint(1, 3))
    elif op < 0.8 and at < len(lines):
        del lines[at : at + rng.randint(1, 4)]
    elif at < len(lines):
        lines.insert(at, lines[at])
    return "\n".join(lines)


def _check(old_text: str, new_text: str) -> bool:
    """True when the splice made a tree (it must then be the full parse's)."""
    old_blocks, new_blocks = split_blocks(old_text), split_blocks(new_text)
    if old_blocks is None or new_blocks is None:
        return False
    try:
        full = cst.parse_module(new_text)
    except cst.ParserSyntaxError:
        assert spliced_parse(cst.parse_module(old_text), old_blocks, new_blocks, *_common_ends(old_blocks, new_blocks)) is None
        return False
    spliced = spliced_parse(cst.parse_module(old_text), old_blocks, new_blocks, *_common_ends(old_blocks, new_blocks))
    if spliced is None:
        return False
    assert spliced.deep_equals(full)
    assert spliced.code == full.code  # the text, but where LibCST's own round trip is not
    assert (spliced.default_indent, spliced.default_newline, spliced.has_trailing_newline, spliced.encoding) == (
        full.default_indent, full.default_newline, full.has_trailing_newline, full.encoding)
    return True


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_random_edits_give_the_full_parse(path: Path):
    text = path.read_text(encoding="utf-8")
    rng = random.Random(path.name)
    made = 0
    for _ in range(60):
        made += _check(text, _edit(text, rng))
    assert made >= 5  # the splice is used, not only refused


def test_an_edit_inside_one_kernel_reuses_the_other_statements():
    text = (FIXTURES / "lsp" / "two_kernels.py").read_text(encoding="utf-8")
    lines = text.split("\n")
    at = next(k for k, line in enumerate(lines) if line.startswith("def ") and "kernel" in line)
    edited = "\n".join(lines[: at + 1] + ["    extra = 1"] + lines[at + 1 :])
    old = cst.parse_module(text)
    old_blocks, new_blocks = split_blocks(text), split_blocks(edited)
    spliced = spliced_parse(old, old_blocks, new_blocks, *_common_ends(old_blocks, new_blocks))
    assert spliced is not None and spliced.deep_equals(cst.parse_module(edited))
    same = sum(1 for s in spliced.body if any(s is t for t in old.body))
    assert same == len(old.body) - 1  # every statement but the edited kernel is the old node


def test_a_comment_indented_under_the_block_above_is_parsed_with_that_block():
    text = "import jax\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n\n\nx = 3\n"
    edited = text.replace("\n\n\ndef g", "\n    # belongs to f\n\ndef g")
    assert _check(text, edited)
    spliced = spliced_parse(cst.parse_module(text), split_blocks(text), split_blocks(edited),
                            *_common_ends(split_blocks(text), split_blocks(edited)))
    assert spliced is not None and spliced.body[1].body.footer  # f's footer, as LibCST gives it


def test_edits_at_the_ends_of_the_file():
    text = (FIXTURES / "lsp" / "two_kernels.py").read_text(encoding="utf-8")
    assert _check(text, text + "\n# appended\n")
    assert _check(text, text + "\ndef later():\n    return 1\n")
    assert not _check(text, "# a new first line\n" + text)  # the header: parsed whole


def test_the_index_of_a_spliced_tree_copies_the_kept_statements_and_equals_a_fresh_one():
    text = (FIXTURES / "lsp" / "two_kernels.py").read_text(encoding="utf-8")
    lines = text.split("\n")
    at = next(k for k, line in enumerate(lines) if line.startswith("def ") and "kernel" in line)
    edited = "\n".join(lines[: at + 1] + ["    extra = lambda v: v + 1"] + lines[at + 1 :])
    old_ctx = ModuleContext(text, "k.py")
    old_blocks, new_blocks = split_blocks(text), split_blocks(edited)
    spliced = spliced_parse(old_ctx.module, old_blocks, new_blocks, *_common_ends(old_blocks, new_blocks))
    assert spliced is not None
    copied, fresh = ModuleContext(edited, "k.py", spliced, reuse=old_ctx), ModuleContext(edited, "k.py", spliced)
    assert all(a is b for a, b in zip(copied._order, fresh._order)) and len(copied._order) == len(fresh._order)
    assert (copied._parent, copied._scope, copied._end) == (fresh._parent, fresh._scope, fresh._end)
    assert copied._by_type == fresh._by_type
    assert [copied.span(n) for n in copied.nodes_of(cst.Subscript)] == [fresh.span(n) for n in fresh.nodes_of(cst.Subscript)]


@pytest.mark.parametrize("path", SOURCES[:4], ids=lambda p: p.name)
def test_random_edits_of_a_crlf_file_give_the_full_parse(path: Path):
    # The edits insert "\n"-ended lines: the file ends up with both newlines, as pasted text does.
    text = path.read_text(encoding="utf-8").replace("\n", "\r\n")
    rng = random.Random("crlf" + path.name)
    made = sum(_check(text, _edit(text, rng)) for _ in range(40))
    assert made >= 5
