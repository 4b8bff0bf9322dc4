"""The README's Quick start names commands that exist, the fast test lane among them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(markdown: str, title: str) -> str:
    start = markdown.index(f"## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:end if end != -1 else None]


def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def test_quick_start_shows_the_fast_test_lane_beside_the_full_suite():
    quick = _section((ROOT / "README.md").read_text(encoding="utf-8"), "Quick start")
    named = re.findall(r"^make ([\w-]+)", quick, re.M)
    assert "test" in named and "test-fast" in named, named
    assert set(named) <= _make_targets()
