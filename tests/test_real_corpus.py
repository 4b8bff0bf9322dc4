"""The real corpus (tests/fixtures/real/): every file carries the header the coverage benchmark and
its README rely on, in order, parses, and names an example call pallas-fix can read; a third of
the folder is held out. The interp-marked test runs each file's own check against its reference."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_loading import FIXTURES
from pallas_fix.verify.examples.sources import collect_examples

REAL = FIXTURES / "real"
FILES = sorted(REAL.glob("*.py"))

# The header lines after the docstring, in this order (blind corpora use the same label words);
# `# gold:` only where a hand-lifted form is known.
OPTIONAL = {"gold"}
HEADER = [
    ("source", re.compile(
        r"^# source: https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+\.py \(function [^)]+\), license \S+")),
    ("label", re.compile(r"^# label: (fix|either|refuse)$")),
    ("why", re.compile(r"^# why: \S.{20,}")),
    ("gold", re.compile(r"^# gold: \S+")),
    ("held-out", re.compile(r"^# held-out: (yes|no)$")),
    ("example", re.compile(r"^# pallas-fix: example \w[\w.]*\(.*\)$")),
]


def _header_lines(source: str) -> list[str]:
    """The comment lines that follow the module docstring, up to the first non-comment line."""
    lines = source.splitlines()
    assert lines and lines[0].startswith('"""') and lines[0].endswith('"""') and len(lines[0]) > 6, (
        "the file must start with a one-line docstring")
    out = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        out.append(line)
    return out


def test_corpus_is_not_empty():
    assert len(FILES) >= 18


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_header_in_order(path: Path):
    lines = _header_lines(path.read_text(encoding="utf-8"))
    keys = [key for line in lines for key, rx in HEADER if rx.match(line)]
    first = [keys.index(key) if key in keys else -1 for key, _ in HEADER]
    missing = [key for (key, _), i in zip(HEADER, first) if i < 0 and key not in OPTIONAL]
    assert not missing, f"{path.name}: header lines missing or malformed: {missing}"
    present = [i for i in first if i >= 0]
    assert present == sorted(present), f"{path.name}: header lines out of order: {keys}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_parses_with_example_and_main_check(path: Path):
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body), (
        f"{path.name}: no __main__ block")
    assert 'print("OK")' in source
    examples = collect_examples(path, source, pyproject=False, recorded=False)
    assert examples, f"{path.name}: no example pallas-fix can read"
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert all(ex.entry.split(".")[0] in defined for ex in examples), f"{path.name}: example entry not defined"


def test_file_names_name_the_repository():
    """`<repo-short>__<kernel>.py`: the prefix before the double underscore groups a repository."""
    for path in FILES:
        assert re.fullmatch(r"[a-z0-9][a-z0-9_-]*?__[a-z0-9_]+\.py", path.name), path.name


def _held_out(path: Path) -> bool:
    return re.search(r"^# held-out: yes$", path.read_text(encoding="utf-8"), re.M) is not None


def _part_c() -> set[str]:
    """The files in the README's part-c table (a later, wholly held-out set); the section ends
    where the next `## ` section (part d, held out by thirds like halves a and b) begins."""
    readme = (REAL / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Part c\n", 1)
    if len(section) != 2:
        return set()
    body = section[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| ([\w-]+\.py) \|", body, re.M))


def test_a_third_is_held_out():
    """Halves a and b and part d hold out a third each; part c is held out as a whole."""
    part_c = _part_c()
    halves = [p for p in FILES if p.name not in part_c]
    held = [p for p in halves if _held_out(p)]
    assert 0.25 <= len(held) / len(halves) <= 0.4, f"{len(held)} of {len(halves)} held out"
    not_held = sorted(p.name for p in FILES if p.name in part_c and not _held_out(p))
    assert not not_held, f"part-c files not held out: {not_held}"


def test_readme_rows_name_existing_files():
    readme = (REAL / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| ([\w-]+\.py) \|", readme, re.M))
    assert named, "README.md has no table rows"
    assert named <= {p.name for p in FILES}, f"stale README rows: {sorted(named - {p.name for p in FILES})}"


@pytest.mark.interp
@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_runs_and_matches_its_reference(path: Path):
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-2000:]
