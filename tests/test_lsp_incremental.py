"""The language server's incremental analysis gives what a full analysis gives, after every edit.

Random edit sequences (hypothesis) over real kernel files: the codemod fixtures' before-files,
several of them in one module (same names bound twice: units that must merge), and the
many-kernel file `benchmarks/bench_lsp.py` builds. After each edit the snapshot analysed from the
previous one (`previous=`) is compared with one analysed from scratch: findings, offered fixes,
protocol diagnostics, and the edits of one offered fix.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pallas_fix.core.config import Config
from pallas_fix.frontends.lsp.snapshot import Snapshot, analyse, diagnostics, quick_fix_edits

ROOT = Path(__file__).resolve().parents[1]
BEFORE_FILES = sorted((ROOT / "tests" / "fixtures" / "codemods").glob("**/*_before.py"))
pytestmark = pytest.mark.timeout(900)


def _bench_source(lines: int) -> str:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_lsp import make_source
    finally:
        sys.path.pop(0)
    return make_source(lines)


# -- edits -----------------------------------------------------------------------------------------
def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def edit(text: str, data) -> str:
    """One random edit of the kinds typing makes, mostly leaving the file parseable."""
    lines = text.split("\n")
    n = data.draw(st.integers(0, max(0, len(lines) - 1)), label="line")
    kind = data.draw(st.sampled_from(["blank", "comment", "delete", "duplicate", "number", "rename", "statement", "call"]), label="kind")
    line = lines[n]
    if kind == "blank":
        lines.insert(n, "")
    elif kind == "comment":
        lines.insert(n, _indent(line) + "# a note")
    elif kind == "delete":
        del lines[n]
    elif kind == "duplicate":
        lines.insert(n, line)
    elif kind == "number":
        numbers = list(re.finditer(r"\b\d+\b", line))
        if numbers:
            m = data.draw(st.sampled_from(numbers), label="number")
            lines[n] = line[: m.start()] + str(data.draw(st.integers(0, 300), label="value")) + line[m.end() :]
    elif kind in ("rename", "call"):
        names = sorted(set(re.findall(r"^(?:def|class) (\w+)|^(\w+) =", text, re.M)) - {("", "")})
        flat = sorted({a or b for a, b in names})
        if flat:
            name = data.draw(st.sampled_from(flat), label="name")
            if kind == "call":  # a new module-level use of a kernel, helper or constant
                at = _module_level_line(lines, n)
                lines.insert(at, f"_probe = {name}")
            else:
                words = list(re.finditer(r"\b[A-Za-z_]\w*\b", line))
                if words:
                    m = data.draw(st.sampled_from(words), label="word")
                    lines[n] = line[: m.start()] + name + line[m.end() :]
    elif kind == "statement":
        lines.insert(n, _indent(line) + "extra_ = 1")
    return "\n".join(lines)


def _module_level_line(lines: list[str], n: int) -> int:
    """A line at or after `n` where a new top-level statement can start."""
    for k in range(n, len(lines)):
        if lines[k] and not lines[k][0].isspace() and not lines[k].startswith((")", "]", "}", "@", "else", "elif", "except", "finally")):
            return k
    return len(lines)


# -- comparison ------------------------------------------------------------------------------------
def assert_same(inc: Snapshot, full: Snapshot) -> None:
    assert (inc.syntax_error is None) == (full.syntax_error is None)
    if full.syntax_error is not None:
        assert (inc.syntax_error.line, inc.syntax_error.column, inc.syntax_error.reason) == (
            full.syntax_error.line, full.syntax_error.column, full.syntax_error.reason)
    assert inc.internal_error == full.internal_error
    assert inc.findings == full.findings
    assert [(k, f.codemod, f.safety) for k, f in inc.fixes.items()] == [(k, f.codemod, f.safety) for k, f in full.fixes.items()]
    assert diagnostics(inc) == diagnostics(full)
    if full.fixes:  # the edits of one fix: the plan comes from the unit's own analysis of this version
        key = sorted(full.fixes)[len(full.fixes) // 2]
        assert quick_fix_edits(inc, key) == quick_fix_edits(full, key)


def replay(text: str, data, steps: int) -> int:
    """Edit `text` `steps` times, comparing after each; how many edits were analysed in part."""
    config = Config()
    prev = analyse("file:///t.py", "t.py", 0, text, config)
    partial = 0
    for version in range(1, steps + 1):
        text = edit(text, data)
        inc = analyse("file:///t.py", "t.py", version, text, config, previous=prev)
        full = analyse("file:///t.py", "t.py", version, text, config)
        assert_same(inc, full)
        partial += inc.analysis is None and inc.syntax_error is None
        prev = inc
    return partial


_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)


@settings(max_examples=8, **_SETTINGS)
@given(st.data())
def test_edits_of_one_fixture(data):
    path = data.draw(st.sampled_from(BEFORE_FILES), label="fixture")
    replay(path.read_text(), data, steps=4)


@pytest.mark.slow
@settings(max_examples=40, **_SETTINGS)
@given(st.data())
def test_many_edits_of_one_fixture(data):
    path = data.draw(st.sampled_from(BEFORE_FILES), label="fixture")
    replay(path.read_text(), data, steps=5)


@pytest.mark.slow
@settings(max_examples=8, **_SETTINGS)
@given(st.data())
def test_edits_of_several_fixtures_in_one_module(data):
    picked = data.draw(st.lists(st.sampled_from(BEFORE_FILES), min_size=2, max_size=4), label="fixtures")
    replay("\n\n".join(p.read_text() for p in picked), data, steps=4)


@pytest.mark.slow
@settings(max_examples=2, **_SETTINGS)
@given(st.data())
def test_edits_of_the_many_kernel_file(data):
    replay(_bench_source(700), data, steps=3)


def test_an_edit_inside_one_kernel_reanalyses_it_alone():
    """Not a speed test: the edit must take the partial path, or the comparisons above prove little."""
    text = _bench_source(700)
    config = Config()
    prev = analyse("file:///t.py", "t.py", 0, text, config)
    assert prev.units is not None and len(prev.units.units) > 4
    lines = text.split("\n")
    at = next(k for k, line in enumerate(lines) if line.startswith("def ") and k > len(lines) // 2)
    lines.insert(at + 1, "    pass")
    edited = "\n".join(lines)
    inc = analyse("file:///t.py", "t.py", 1, edited, config, previous=prev)
    assert inc.analysis is None and inc.units is not None
    assert sum(u.result is not None for u in inc.units.units) == 1  # one unit analysed, the rest carried
    assert_same(inc, analyse("file:///t.py", "t.py", 1, edited, config))


def test_a_new_use_of_a_kernel_elsewhere_reanalyses_its_unit():
    """A module-level line naming a kernel (outside every unit's blocks) changes what the planners
    may do with it ("also called or passed outside its pallas_call"): the unit must be analysed
    again, not carried over."""
    config = Config()
    changed = 0
    for path in BEFORE_FILES[:40]:
        text = path.read_text()
        prev = analyse("file:///t.py", "t.py", 0, text, config)
        kernels = sorted({f.kernel for f in prev.findings if f.fixable and f.kernel})
        if prev.units is None or not kernels:
            continue
        edited = text + f"\nprint({kernels[0]})\n"
        inc = analyse("file:///t.py", "t.py", 1, edited, config, previous=prev)
        assert_same(inc, analyse("file:///t.py", "t.py", 1, edited, config))
        changed += inc.findings != prev.findings
    assert changed >= 3


def test_a_use_of_a_kernel_through_a_module_level_alias_reanalyses_its_unit():
    """`_probe = kernel` first, then a line reading `_probe`: the second edit names only the
    alias, and the unit must still be analysed again (found by test_many_edits_of_one_fixture)."""
    config = Config()
    text = (ROOT / "tests" / "fixtures" / "codemods" / "grid_to_loop" / "grid_loop_before.py").read_text()
    prev = analyse("file:///t.py", "t.py", 0, text, config)
    for version, line in enumerate(["_probe = kernel", "_probe = _probe"], start=1):
        text = f"{line}\n{text}"
        inc = analyse("file:///t.py", "t.py", version, text, config, previous=prev)
        full = analyse("file:///t.py", "t.py", version, text, config)
        assert_same(inc, full)
        prev = inc
    assert any(f.refusal and "also called or passed outside" in f.refusal for f in full.findings)
