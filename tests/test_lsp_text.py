"""Text arithmetic of the language server: lines, positions, minimal edits, suppression comments."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pallas_fix.core.config import Config
from pallas_fix.engine import analyze_source
from pallas_fix.frontends.lsp.settings import Settings
from pallas_fix.frontends.lsp.text import (
    Edit,
    apply_edits,
    from_units,
    minimal_edits,
    split_lines,
    suppression_edit,
    to_units,
)
from pallas_fix.core.model import Backend

FIX = Path(__file__).parent / "fixtures" / "lsp"


def test_split_lines_follows_the_protocol_not_str_splitlines():
    text = "a\r\nb\rc\nd\x0ce\u2028f"
    assert split_lines(text) == ["a\r\n", "b\r", "c\n", "d\x0ce\u2028f"]
    assert split_lines("") == []
    assert split_lines("x\n") == ["x\n"]
    assert "".join(split_lines(text)) == text


@pytest.mark.parametrize("encoding,expected", [("utf-16", 5), ("utf-8", 7), ("utf-32", 4)])
def test_columns_in_each_encoding(encoding, expected):
    line = 'x="\U0001F60B"\n'  # the closing quote: 4 code points in
    assert to_units(line, 4, encoding) == expected
    assert from_units(line, expected, encoding) == 4


def test_minimal_edits_one_per_changed_region():
    old = "".join(f"line {i}\n" for i in range(40))
    lines = old.splitlines(keepends=True)
    lines[3] = "changed 3\n"
    lines[30:32] = ["new 30\n", "extra\n", "new 31\n"]
    new = "".join(lines)
    edits = minimal_edits(old, new)
    assert [e.start for e in edits] == [(3, 0), (30, 0)]
    assert [e.end for e in edits] == [(4, 0), (32, 0)]
    assert apply_edits(old, edits) == new


def test_minimal_edits_at_a_last_line_without_newline():
    edits = minimal_edits("a\nb", "a\nc\u00e9\U0001F60B")
    assert edits == [Edit((1, 0), (1, 1), "c\u00e9\U0001F60B")]
    assert minimal_edits("a\nb", "a\nb\n") == [Edit((1, 0), (1, 1), "b\n")]
    assert minimal_edits("a\n", "a\nb\n") == [Edit((1, 0), (1, 0), "b\n")]
    assert minimal_edits("same", "same") == []


line_text = st.text(alphabet=st.sampled_from(list("ab \t\u00e9\U0001F60B")), max_size=6)
documents = st.lists(
    st.tuples(line_text, st.sampled_from(["\n", "\r\n", "\r", ""])), max_size=12
).map(lambda parts: "".join(t + nl for t, nl in parts))


@settings(max_examples=300, deadline=None)
@given(documents, documents, st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_minimal_edits_reproduce_the_new_text(old, new, encoding):
    edits = minimal_edits(old, new, encoding)
    assert apply_edits(old, edits, encoding) == new
    # Non-overlapping and in order, as clients require.
    for a, b in zip(edits, edits[1:]):
        assert a.end <= b.start


def test_suppression_appends_a_comment():
    text = "x = 1\ny = f(a,\n      b)   \n"
    edit = suppression_edit(text, 2, 3, "PF104")
    assert apply_edits(text, [edit]) == "x = 1\ny = f(a,  # pallas-fix: ignore[PF104]\n      b)   \n"


def test_suppression_merges_codes():
    text = "y = g()  # pallas-fix: ignore[PF101]\n"
    edit = suppression_edit(text, 1, 1, "pf104")
    assert apply_edits(text, [edit]) == "y = g()  # pallas-fix: ignore[PF101, PF104]\n"
    # Already silenced, by code or by a bare ignore: nothing to add.
    assert suppression_edit("y = g()  # pallas-fix: ignore[PF104]\n", 1, 1, "PF104") is None
    assert suppression_edit("y = g()  # pallas-fix: ignore\n", 1, 1, "PF104") is None


def test_suppression_skips_lines_that_cannot_end_in_a_comment():
    text = 'y = a + \\\n    b + f("""x\ny""") + c\n'
    edit = suppression_edit(text, 1, 3, "PF101")
    new = apply_edits(text, [edit])
    assert new == 'y = a + \\\n    b + f("""x\ny""") + c  # pallas-fix: ignore[PF101]\n'
    ast.parse(new)
    # No line of the span can take it: no action rather than a broken file.
    assert suppression_edit('y = a + \\\n    b\n', 1, 1, "PF101") is None


def test_suppression_comment_silences_the_finding():
    text = (FIX / "two_kernels.py").read_text()
    before = analyze_source(text, "two_kernels.py")
    target = next(f for f in before.findings if f.code == "PF104")
    edit = suppression_edit(text, target.span.line, target.span.end_line, target.code)
    after = analyze_source(apply_edits(text, [edit]), "two_kernels.py")
    assert [f.code for f in after.findings] == [f.code for f in before.findings if f is not target]


def test_settings_parse_and_override():
    s, problems = Settings.parse(
        {"select": ["pf1"], "ignore": "PF104", "backend": "tpu", "unsafeFixes": True, "debounceMs": 50, "target": "gpu-interpret"}
    )
    assert problems == []
    assert (s.select, s.ignore, s.backend, s.unsafe_fixes, s.debounce_s) == (("PF1",), ("PF104",), "tpu", True, 0.05)
    assert s.apply(Config()).target == "gpu-interpret"
    merged = s.apply(Config(select=("PF2",), unsafe_fixes=False))
    assert merged.select == ("PF1",) and merged.ignore == ("PF104",) and merged.backend is Backend.TPU
    assert merged.unsafe_fixes is True
    # Nested under the server's name (didChangeConfiguration), and invalid values reported.
    s2, problems = Settings.parse({"pallas-fix": {"backend": "cuda", "select": [1], "unsafeFixes": "yes", "target": "gpu"}})
    assert s2 == Settings() and len(problems) == 4
    assert Settings.parse("nonsense")[1]
